#include "config_view.hpp"

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace halinfo {
namespace {

std::string searched_paths() {
  std::string text;
  for (const auto& path : hal::Config::search_paths()) text += (text.empty() ? "" : ", ") + path.string();
  return text;
}

}  // namespace

void print_settings(const hal::Config& file, const hal::Settings& settings, std::ostream& out) {
  if (file.source)
    out << "config file: " << file.source->string() << "\n";
  else
    out << "config file: none, so the built-in defaults (looked for " << searched_paths() << ")\n";
  for (const auto& warning : file.warnings) out << "warning: " << warning.to_string() << "\n";
  std::size_t key_width = 3, value_width = 5;
  for (const hal::Setting& setting : settings.entries()) {
    key_width = std::max(key_width, setting.key.size());
    value_width = std::max(value_width, setting.value.size());
  }
  auto row = [&](const std::string& key, const std::string& value, const std::string& source) {
    out << key << std::string(key_width - key.size() + 2, ' ') << value << std::string(value_width - value.size() + 2, ' ')
        << source << "\n";
  };
  out << "\n";
  row("key", "value", "source");
  for (const hal::Setting& setting : settings.entries()) row(setting.key, setting.value, setting.source_text());
}

nlohmann::ordered_json settings_document(const hal::Config& file, const hal::Settings& settings) {
  nlohmann::ordered_json document{{"schema", "hal.settings/1"},
                          {"config_file", file.source ? nlohmann::ordered_json(file.source->string()) : nlohmann::ordered_json()},
                          {"warnings", nlohmann::ordered_json::array()},
                          {"settings", nlohmann::ordered_json::array()}};
  for (const auto& warning : file.warnings) document["warnings"].push_back(warning.to_string());
  for (const hal::Setting& setting : settings.entries()) {
    nlohmann::ordered_json sources = nlohmann::ordered_json::array();
    for (const hal::SettingSource& source : setting.sources)
      sources.push_back({{"kind", std::string(hal::to_string(source.kind))},
                         {"location", source.kind == hal::SettingSource::Kind::built_in ? nlohmann::ordered_json()
                                                                                        : nlohmann::ordered_json(source.location)}});
    document["settings"].push_back({{"key", setting.key},
                                    {"value", setting.value},
                                    {"source", setting.source_text()},
                                    {"sources", sources},
                                    {"environment_variable", setting.environment_variable.empty()
                                                                 ? nlohmann::ordered_json()
                                                                 : nlohmann::ordered_json(setting.environment_variable)}});
  }
  return document;
}

}  // namespace halinfo
