// PLACEHOLDER until the config module lands.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>
namespace hal {
struct ConfigWarning { std::string file; int line = 0; int column = 0; std::string message; std::string to_string() const { return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message; } };
struct Config {
  std::optional<std::filesystem::path> source;
  std::vector<std::string> backends_filter;
  std::vector<std::filesystem::path> backends_search_paths;
  std::map<std::string, std::map<std::string, std::string>> backend_options;
  std::string log_level = "warning";
  std::vector<std::string> attention_order;
  bool attention_strict = false;
  bool attention_debug = false;
  std::vector<ConfigWarning> warnings;
  static Config load_default() { return {}; }
};
}
