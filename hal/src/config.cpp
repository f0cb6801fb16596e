#include "hal/config.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iosfwd>
#include <memory>
#include <system_error>
#include <type_traits>
#include <utility>

#include "hal/settings.hpp"
#include "hal/status.hpp"
#include "environment.hpp"
#include "text.hpp"

namespace hal {

namespace {

using Choices = std::vector<std::string_view>;

std::string in_quotes(std::string_view text) { return "\"" + std::string(text) + "\""; }

std::string join_quoted(const Choices& choices) {
  std::string text;
  for (std::string_view choice : choices) text += (text.empty() ? "" : ", ") + in_quotes(choice);
  return text;
}

std::string format_number(double value) {
  char buffer[32];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return error == std::errc() ? std::string(buffer, end) : std::to_string(value);
}

std::string format_position(std::string_view file, const toml::source_position& position) {
  return std::string(file) + ":" + std::to_string(position.line) + ":" + std::to_string(position.column);
}

std::string describe_type(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time: return "a date or time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

// Names of backends, option keys and similar: what HAL_BACKENDS accepts.
bool is_lower_case_name(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::vector<std::string> split_comma_list(std::string_view text) {
  std::vector<std::string> items;
  if (detail::trim(text).empty()) return items;
  for (const std::string& part : detail::split(text, ',')) items.emplace_back(detail::trim(part));
  return items;
}

// A problem with one item of a list value: which item, and what is wrong.
struct ItemProblem {
  std::size_t item;
  std::string problem;
};
using ListValidator = std::function<std::optional<ItemProblem>(const std::vector<std::string>&)>;

constexpr std::string_view kBackendFilterAllowed =
    "backend names of lower-case letters, digits and '_' to load (\"host,cuda\"), "
    "or each prefixed with '!' to skip (\"!rocm\"), not both";

std::optional<ItemProblem> check_backend_filter(const std::vector<std::string>& items) {
  bool any_loaded = false;
  bool any_skipped = false;
  for (std::size_t index = 0; index < items.size(); ++index) {
    std::string_view name = items[index];
    bool skipped = name.starts_with('!');
    if (skipped) name.remove_prefix(1);
    if (!is_lower_case_name(name)) return ItemProblem{index, in_quotes(items[index]) + " is not a backend name"};
    (skipped ? any_skipped : any_loaded) = true;
    if (any_loaded && any_skipped) {
      return ItemProblem{index, in_quotes(items[index]) + " mixes backends to skip with backends to load"};
    }
  }
  return std::nullopt;
}

std::string choice_list_allowed(const Choices& choices) { return "each of " + join_quoted(choices) + " at most once"; }

ListValidator choice_list_validator(Choices choices) {
  return [choices = std::move(choices)](const std::vector<std::string>& items) -> std::optional<ItemProblem> {
    for (std::size_t index = 0; index < items.size(); ++index) {
      if (std::find(choices.begin(), choices.end(), items[index]) == choices.end()) {
        return ItemProblem{index, in_quotes(items[index]) + " is not allowed"};
      }
      if (std::find(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(index), items[index]) !=
          items.begin() + static_cast<std::ptrdiff_t>(index)) {
        return ItemProblem{index, in_quotes(items[index]) + " is listed twice"};
      }
    }
    return std::nullopt;
  };
}

const Choices kAttentionBackends = {"fused", "flash", "math"};

std::vector<std::string> parse_list_from_text(std::string_view text, std::string_view origin,
                                              const ListValidator& validator, std::string_view allowed) {
  std::vector<std::string> items = split_comma_list(text);
  if (auto problem = validator(items)) {
    throw Error(StatusCode::invalid_argument,
                std::string(origin) + ": " + problem->problem + ", expected " + std::string(allowed));
  }
  return items;
}

// Reads the value of one key and reports problems with its position.
class ValueReader {
 public:
  struct Item {
    std::string text;
    const toml::node* node;
  };

  ValueReader(std::string_view file, const std::filesystem::path& base_directory, std::string_view key,
              std::string_view allowed)
      : file_(file), base_directory_(base_directory), key_(key), allowed_(allowed) {}

  [[noreturn]] void fail(const toml::source_region& at, std::string_view problem) const {
    throw Error(StatusCode::invalid_argument, format_position(file_, at.begin) + ": " + std::string(key_) + ": " +
                                                  std::string(problem) + ", expected " + std::string(allowed_));
  }
  [[noreturn]] void fail_type(const toml::node& node) const { fail(node.source(), "got " + describe_type(node)); }

  // "file:line" of a key, for where a setting came from.
  std::string position(const toml::source_region& at) const {
    return std::string(file_) + ":" + std::to_string(at.begin.line);
  }

  const std::string& string(const toml::node& node) const {
    if (const auto* text = node.as_string()) return text->get();
    fail_type(node);
  }

  // A string is a list of one; an array must hold only strings.
  std::vector<Item> string_items(const toml::node& node) const {
    std::vector<Item> items;
    if (node.is_string()) {
      items.push_back({string(node), &node});
    } else if (const auto* array = node.as_array()) {
      for (const toml::node& element : *array) items.push_back({string(element), &element});
    } else {
      fail_type(node);
    }
    return items;
  }

  // "~/x" is under $HOME; other relative paths are relative to the config file.
  std::filesystem::path resolve_path(const std::string& text) const {
    if (text.empty()) return {};
    const char* home = abi::environment("HOME");
    if (text.starts_with("~/") && home != nullptr) {
      return (std::filesystem::path(home) / text.substr(2)).lexically_normal();
    }
    std::filesystem::path path(text);
    if (path.is_relative()) path = base_directory_ / path;
    return path.lexically_normal();
  }

 private:
  std::string_view file_;
  const std::filesystem::path& base_directory_;
  std::string_view key_;
  std::string_view allowed_;
};

// How one key is checked, stored, shown and overridden.
struct KeyRule {
  std::string table_path;  // the dotted TOML path whose value this rule reads
  ConfigKeyInfo info;
  std::function<void(Config&, const toml::node&, const ValueReader&)> apply;
  // The key's value as TOML writes it.
  std::function<std::string(const Config&)> show;
  // Applies info.environment_variable (and any alias) when set, returning
  // the variables that decided ("HAL_ATTN_STRICT=1"), or nullopt when none
  // is set; throws invalid_argument naming the variable and what it allows.
  std::function<std::optional<std::string>(Config&)> apply_environment;
  // The variable's items come before the file's instead of replacing them.
  bool environment_extends = false;
};

const Config& built_in_defaults() {
  static const Config defaults;
  return defaults;
}

KeyRule make_rule(std::string name, std::string type, std::string default_value, std::string allowed,
                  std::string environment_variable, std::string description,
                  std::function<void(Config&, const toml::node&, const ValueReader&)> apply,
                  std::function<std::string(const Config&)> show) {
  return KeyRule{name,
                 {name, std::move(type), std::move(default_value), std::move(allowed), std::move(environment_variable),
                  std::move(description)},
                 std::move(apply),
                 std::move(show),
                 {},
                 false};
}

// "NAME=value" when the variable is set (to something other than ""), after
// parse(config, value) took it; nullopt when it is unset.
std::function<std::optional<std::string>(Config&)> environment_override(
    std::string variable, std::function<void(Config&, std::string_view)> parse) {
  return [variable = std::move(variable), parse = std::move(parse)](Config& config) -> std::optional<std::string> {
    const char* value = abi::environment(variable.c_str());
    if (value == nullptr) return std::nullopt;
    parse(config, value);
    return variable + "=" + value;
  };
}

std::string show_list(const std::vector<std::string>& items) {
  std::string text = "[";
  for (const std::string& item : items) text += (text.size() > 1 ? ", " : "") + in_quotes(item);
  return text + "]";
}

KeyRule choice_key(std::string name, std::string Config::*field, Choices choices, std::string environment_variable,
                   std::string description) {
  std::string allowed = "one of " + join_quoted(choices);
  KeyRule rule = make_rule(
      std::move(name), "string", in_quotes(built_in_defaults().*field), std::move(allowed), environment_variable,
      std::move(description),
      [field, choices](Config& config, const toml::node& node, const ValueReader& reader) {
        const std::string& value = reader.string(node);
        if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
          reader.fail(node.source(), in_quotes(value) + " is not allowed");
        }
        config.*field = value;
      },
      [field](const Config& config) { return in_quotes(config.*field); });
  if (!environment_variable.empty())
    rule.apply_environment = environment_override(
        environment_variable, [field, choices, environment_variable](Config& config, std::string_view value) {
          if (std::find(choices.begin(), choices.end(), value) == choices.end())
            throw Error(StatusCode::invalid_argument, environment_variable + "='" + std::string(value) +
                                                          "' is not allowed; use one of " + join_quoted(choices));
          config.*field = value;
        });
  return rule;
}

// A list written as a TOML array of strings or as one comma-separated string,
// the way the matching environment variable is written.
KeyRule string_list_key(std::string name, std::vector<std::string> Config::*field, std::string allowed,
                        ListValidator validator, std::string environment_variable, std::string description) {
  KeyRule rule = make_rule(
      std::move(name), "array of strings, or one comma-separated string", "[]", allowed, environment_variable,
      std::move(description),
      [field, validator](Config& config, const toml::node& node, const ValueReader& reader) {
        std::vector<ValueReader::Item> items;
        if (node.is_string()) {
          for (std::string& text : split_comma_list(reader.string(node))) items.push_back({std::move(text), &node});
        } else {
          items = reader.string_items(node);
        }
        std::vector<std::string> texts;
        for (const auto& item : items) texts.push_back(item.text);
        if (auto problem = validator(texts)) reader.fail(items[problem->item].node->source(), problem->problem);
        config.*field = std::move(texts);
      },
      [field](const Config& config) { return show_list(config.*field); });
  if (!environment_variable.empty())
    rule.apply_environment = environment_override(
        environment_variable, [field, validator, allowed, environment_variable](Config& config, std::string_view value) {
          config.*field = parse_list_from_text(value, environment_variable, validator, allowed);
        });
  return rule;
}

KeyRule choice_list_key(std::string name, std::vector<std::string> Config::*field, Choices choices,
                        std::string environment_variable, std::string description) {
  std::string allowed = choice_list_allowed(choices);
  return string_list_key(std::move(name), field, std::move(allowed), choice_list_validator(std::move(choices)),
                         std::move(environment_variable), std::move(description));
}

// Variables say 1, true or on; 0, false or off.
bool parse_flag(std::string_view variable, std::string_view value) {
  if (value == "1" || value == "true" || value == "on") return true;
  if (value == "0" || value == "false" || value == "off") return false;
  throw Error(StatusCode::invalid_argument, std::string(variable) + "='" + std::string(value) +
                                                "' is not allowed; use 1 (or true, on) or 0 (or false, off)");
}

KeyRule boolean_key(std::string name, bool Config::*field, std::string environment_variable, std::string description) {
  KeyRule rule = make_rule(
      std::move(name), "boolean", built_in_defaults().*field ? "true" : "false", "true or false", environment_variable,
      std::move(description),
      [field](Config& config, const toml::node& node, const ValueReader& reader) {
        const auto* value = node.as_boolean();
        if (value == nullptr) reader.fail_type(node);
        config.*field = value->get();
      },
      [field](const Config& config) { return std::string(config.*field ? "true" : "false"); });
  if (!environment_variable.empty())
    rule.apply_environment =
        environment_override(environment_variable, [field, environment_variable](Config& config, std::string_view value) {
          config.*field = parse_flag(environment_variable, value);
        });
  return rule;
}

KeyRule positive_number_key(std::string name, double Config::*field, std::string environment_variable,
                            std::string description) {
  return make_rule(
      std::move(name), "number", format_number(built_in_defaults().*field), "a number greater than 0",
      std::move(environment_variable), std::move(description),
      [field](Config& config, const toml::node& node, const ValueReader& reader) {
        std::optional<double> value;
        if (const auto* integer = node.as_integer()) value = static_cast<double>(integer->get());
        if (const auto* floating = node.as_floating_point()) value = floating->get();
        if (!value) reader.fail_type(node);
        if (!(*value > 0) || !std::isfinite(*value)) {
          reader.fail(node.source(), "got " + format_number(*value));
        }
        config.*field = *value;
      },
      [field](const Config& config) { return format_number(config.*field); });
}

constexpr std::string_view kPathRule = "relative paths are relative to the config file's directory, ~/ is $HOME";

KeyRule path_key(std::string name, std::filesystem::path Config::*field, std::string environment_variable,
                 std::string description) {
  return make_rule(
      std::move(name), "string (path)", in_quotes((built_in_defaults().*field).string()),
      "a path, or \"\" for the default; " + std::string(kPathRule), std::move(environment_variable),
      std::move(description),
      [field](Config& config, const toml::node& node, const ValueReader& reader) {
        config.*field = reader.resolve_path(reader.string(node));
      },
      [field](const Config& config) { return in_quotes((config.*field).string()); });
}

std::string show_paths(const std::vector<std::filesystem::path>& paths) {
  std::vector<std::string> texts;
  for (const auto& path : paths) texts.push_back(path.string());
  return show_list(texts);
}

// A list of directories; the variable's, separated by ':', come first.
KeyRule path_list_key(std::string name, std::vector<std::filesystem::path> Config::*field,
                      std::string environment_variable, std::string description) {
  KeyRule rule = make_rule(
      std::move(name), "array of strings (paths)", "[]", "non-empty directory paths; " + std::string(kPathRule),
      environment_variable, std::move(description),
      [field](Config& config, const toml::node& node, const ValueReader& reader) {
        std::vector<std::filesystem::path> paths;
        for (const auto& item : reader.string_items(node)) {
          if (item.text.empty()) reader.fail(item.node->source(), "got an empty path");
          paths.push_back(reader.resolve_path(item.text));
        }
        config.*field = std::move(paths);
      },
      [field](const Config& config) { return show_paths(config.*field); });
  rule.apply_environment = environment_override(environment_variable, [field](Config& config, std::string_view value) {
    std::vector<std::filesystem::path> paths;
    for (std::size_t start = 0; start <= value.size();) {
      const std::size_t colon = std::min(value.find(':', start), value.size());
      std::string_view directory = value.substr(start, colon - start);
      const auto first = directory.find_first_not_of(" \t");
      if (first != std::string_view::npos)
        paths.emplace_back(directory.substr(first, directory.find_last_not_of(" \t") - first + 1));
      start = colon + 1;
    }
    paths.insert(paths.end(), (config.*field).begin(), (config.*field).end());
    config.*field = std::move(paths);
  });
  rule.environment_extends = true;
  return rule;
}

// [backend.<name>] tables: free-form options, interpreted by that backend.
// Their values are shown one option at a time (settings_entries).
KeyRule backend_options_rule() {
  KeyRule rule = make_rule(
      "backend", "string, integer or boolean", "none",
      "tables named after a backend ([backend.cuda]) of lower-case option names with string, integer or boolean values",
      "", "Options handed to one backend; each backend's README lists the ones it reads.",
      [](Config& config, const toml::node& node, const ValueReader& reader) {
        const auto* backends = node.as_table();
        if (backends == nullptr) reader.fail_type(node);
        for (const auto& [backend, options] : *backends) {
          if (!is_lower_case_name(backend.str())) {
            reader.fail(backend.source(), in_quotes(backend.str()) + " is not a backend name");
          }
          const auto* option_table = options.as_table();
          if (option_table == nullptr) {
            reader.fail(options.source(), std::string(backend.str()) + " is " + describe_type(options));
          }
          auto& stored = config.backend_options[std::string(backend.str())];
          for (const auto& [option, value] : *option_table) {
            std::string option_path = std::string(backend.str()) + "." + std::string(option.str());
            if (!is_lower_case_name(option.str())) {
              reader.fail(option.source(), in_quotes(option_path) + " is not a lower-case option name");
            }
            if (const auto* text = value.as_string()) {
              stored[std::string(option.str())] = text->get();
            } else if (const auto* integer = value.as_integer()) {
              stored[std::string(option.str())] = std::to_string(integer->get());
            } else if (const auto* boolean = value.as_boolean()) {
              stored[std::string(option.str())] = boolean->get() ? "true" : "false";
            } else {
              reader.fail(value.source(), option_path + " is " + describe_type(value));
            }
            config.key_positions["backend." + option_path] = reader.position(option.source());
          }
        }
      },
      {});
  rule.info.name = "backend.<backend>.<option>";
  return rule;
}

// A backend's own setting that a HAL_* variable sets. libhal reads the
// variable with every other setting and hands the value to the backend at
// initialize as [backend.<backend>] <option>, with the variable as its source;
// the backend checks the value itself (its README says what it takes).
KeyRule backend_option_key(std::string backend, std::string option, std::string environment_variable,
                           std::string allowed, std::string description) {
  KeyRule rule =
      make_rule("backend." + backend + "." + option, "string", "\"\"", std::move(allowed), environment_variable,
                std::move(description), {},  // the file's [backend.<backend>] table is read by backend_options_rule
                [backend, option](const Config& config) {
                  const auto options = config.backend_options.find(backend);
                  if (options == config.backend_options.end()) return in_quotes("");
                  const auto value = options->second.find(option);
                  return in_quotes(value != options->second.end() ? value->second : "");
                });
  rule.apply_environment = environment_override(
      environment_variable,
      [backend, option](Config& config, std::string_view value) { config.backend_options[backend][option] = value; });
  return rule;
}

// TransformerEngine's switches, each on unless "0", in the order fused,
// flash, math: the attention order when any of them is set.
std::optional<std::string> transformer_engine_order(Config& config) {
  const std::pair<const char*, const char*> switches[] = {
      {"NVTE_FUSED_ATTN", "fused"}, {"NVTE_FLASH_ATTN", "flash"}, {"NVTE_UNFUSED_ATTN", "math"}};
  std::vector<std::string> order;
  std::string decided;
  for (const auto& [variable, implementation] : switches) {
    const char* value = abi::environment(variable);
    if (value != nullptr && std::string_view(value) != "0" && std::string_view(value) != "1")
      throw Error(StatusCode::invalid_argument, std::string(variable) + "=" + value + " is not allowed; use 0 or 1");
    if (value == nullptr || std::string_view(value) == "1") order.emplace_back(implementation);
    if (value != nullptr) decided += (decided.empty() ? "" : " ") + std::string(variable) + "=" + value;
  }
  if (decided.empty()) return std::nullopt;
  config.attention_order = std::move(order);
  return decided;
}

KeyRule attention_order_key() {
  KeyRule rule = choice_list_key("attention.order", &Config::attention_order, kAttentionBackends, "HAL_ATTN_BACKENDS",
                                 "Attention implementations to try, in this order; empty uses each device's default "
                                 "order. The TransformerEngine switches NVTE_FUSED_ATTN, NVTE_FLASH_ATTN and "
                                 "NVTE_UNFUSED_ATTN (0 or 1) set it too when HAL_ATTN_BACKENDS is not set.");
  rule.apply_environment = [by_name = std::move(rule.apply_environment)](Config& config) {
    if (auto decided = by_name(config)) return decided;
    return transformer_engine_order(config);
  };
  return rule;
}

constexpr std::string_view kCapabilityOverridesAllowed =
    "capability=value items, e.g. \"attention.fused=false\" or \"attention.flash=true\"";

std::optional<ItemProblem> check_capability_overrides(const std::vector<std::string>& items) {
  for (std::size_t index = 0; index < items.size(); ++index) {
    const std::size_t equals = items[index].find('=');
    if (equals == std::string::npos || items[index].find_first_not_of(' ') == equals)
      return ItemProblem{index, in_quotes(items[index]) + " is not capability=value"};
  }
  return std::nullopt;
}

// The schema: one line per key.
const std::vector<KeyRule>& key_rules() {
  static const std::vector<KeyRule> rules = {
      string_list_key("backends.filter", &Config::backends_filter, std::string(kBackendFilterAllowed),
                      check_backend_filter, "HAL_BACKENDS",
                      "Which backends to load, or which to skip; empty loads every backend found."),
      path_list_key("backends.search_paths", &Config::backends_search_paths, "HAL_BACKEND_PATH",
                    "Directories searched for backend plugins, after those in HAL_BACKEND_PATH and before the "
                    "directory of libhal and the system paths."),
      backend_options_rule(),
      choice_key("log.level", &Config::log_level, {"debug", "info", "warning", "error"}, "HAL_LOG_LEVEL",
                 "The least severe message hal logs."),
      attention_order_key(),
      boolean_key("attention.strict", &Config::attention_strict, "HAL_ATTN_STRICT",
                  "Fail instead of falling back when no implementation of attention.order fits a call."),
      boolean_key("attention.debug", &Config::attention_debug, "HAL_ATTN_DEBUG",
                  "Log every attention selection with the reasons each candidate was taken or passed over."),
      string_list_key("capabilities.overrides", &Config::capability_overrides, std::string(kCapabilityOverridesAllowed),
                      check_capability_overrides, "HAL_CAPABILITY_OVERRIDES",
                      "Capability values that outrank what backends declare, quirks and probes, on every device."),
      // HAL_PROBE_CACHE names the cache file itself, so it is not this key's variable.
      path_key("probes.cache_dir", &Config::probes_cache_dir, "",
               "Where verified capability probe results are cached (probes.json in it); \"\" means "
               "$XDG_CACHE_HOME/hal (~/.cache/hal). HAL_PROBE_CACHE, a file path, outranks it."),
      positive_number_key("collectives.timeout_seconds", &Config::collectives_timeout_seconds, "",
                          "How long a collective operation may wait for its peers before it fails with a timeout, "
                          "unless the communicator's options set their own."),
      choice_key("collectives.engine", &Config::collectives_engine, {"auto", "gloo", "mpi", "shm"}, "HAL_COLL_ENGINE",
                 "The host collectives engine; auto picks MPI when launched by mpirun or srun and libmpi loads, else "
                 "Gloo, with shared memory (shm) beside it when every rank shares the host; shm asks for that."),
      boolean_key("collectives.check", &Config::collectives_check, "HAL_COLL_CHECK",
                  "Every rank checks that its peers call the same collective with the same count, type and root "
                  "before running it."),
      backend_option_key("cuda", "driver", "HAL_CUDA_DRIVER", "a path to libcuda.so.1 or a directory holding it",
                         "NVIDIA's driver library; nothing else is searched when set."),
      backend_option_key("cuda", "cudnn", "HAL_CUDNN", "a path to libcudnn.so.9 or a directory holding it",
                         "cuDNN, for fused attention; nothing else is searched when set."),
      backend_option_key("cuda", "nvrtc", "HAL_NVRTC", "a path to libnvrtc.so.* or a directory holding it",
                         "NVRTC, which cuDNN compiles its attention engines with."),
      backend_option_key("cuda", "nccl", "HAL_NCCL", "a path to libnccl.so.2 or a directory holding it",
                         "NCCL, the GPU collectives engine."),
      backend_option_key("cuda", "cublas", "HAL_CUBLAS", "a path to libcublas.so.* or a directory holding it",
                         "cuBLAS, for the math attention path."),
      backend_option_key("cuda", "nvml", "HAL_NVML", "a path to libnvidia-ml.so.1 or a directory holding it",
                         "NVML, for telemetry."),
      backend_option_key("cuda", "cublas_tf32", "HAL_CUBLAS_TF32", "1 (TF32 tensor cores for float32 GEMMs) or 0",
                         "Whether the math attention path lets cuBLAS use TF32 for float32; off unless 1."),
      backend_option_key("ppu", "sysfs_root", "HAL_PPU_SYSFS_ROOT", "a directory",
                         "Where the PPU backend looks for the PCI devices (/sys unless set)."),
      backend_option_key("ppu", "dev_root", "HAL_PPU_DEV_ROOT", "a directory",
                         "Where the PPU backend looks for the device nodes (/dev unless set)."),
      backend_option_key("ppu", "hgml", "HAL_HGML", "a path to libhgml.so or a directory holding it",
                         "The PPU SDK's management library, for telemetry."),
      backend_option_key("rocm", "runtime", "HAL_HIP_RUNTIME", "a path to libamdhip64.so or a directory holding it",
                         "The HIP runtime; nothing else is searched when set."),
      backend_option_key("rocm", "rccl", "HAL_RCCL", "a path to librccl.so.1 or a directory holding it",
                         "RCCL, the GPU collectives engine."),
      backend_option_key("rocm", "amd_smi", "HAL_AMD_SMI", "a path to libamd_smi.so or a directory holding it",
                         "AMD SMI, for telemetry."),
      backend_option_key("rocm", "rocm_smi", "HAL_ROCM_SMI", "a path to librocm_smi64.so or a directory holding it",
                         "ROCm SMI, for telemetry where AMD SMI is absent."),
      backend_option_key("host", "isa", "HAL_HOST_ISA",
                         "one of \"scalar\", \"avx2\", \"avx512\", \"avx512bf16\", \"amx\"",
                         "The highest SIMD level the host kernels (attention, shared-memory reductions) use; never "
                         "above what the CPU has."),
      backend_option_key("host", "threads", "HAL_HOST_THREADS", "a whole number greater than 0",
                         "Threads of the host kernels' pool; unset: OMP_NUM_THREADS, else the CPUs this process may "
                         "use shared by the ranks on this machine."),
      backend_option_key(
          "host", "telemetry_root", "HAL_HOST_TELEMETRY_ROOT", "a directory",
          "Where the host backend reads its telemetry files (/ unless set); tests point it at a fixture."),
      backend_option_key("host", "shm_bytes", "HAL_SHM_BYTES", "bytes, optionally with K, M, G or T; at least 4096",
                         "The shared-memory collectives engine's area per rank and buffer."),
      backend_option_key("host", "mpi_library", "HAL_MPI_LIBRARY", "a path to libmpi.so",
                         "The MPI library of the host MPI collectives engine; unset: libmpi.so.40, then libmpi.so."),
  };
  return rules;
}

const KeyRule* find_rule(std::string_view table_path) {
  for (const KeyRule& rule : key_rules()) {
    if (rule.table_path == table_path) return &rule;
  }
  return nullptr;
}

// The keys and tables allowed directly inside the table at `table_path` ("" is the top level).
std::vector<std::string> known_children(std::string_view table_path) {
  std::vector<std::string> children;
  std::string prefix = table_path.empty() ? "" : std::string(table_path) + ".";
  for (const KeyRule& rule : key_rules()) {
    if (!rule.table_path.starts_with(prefix)) continue;
    std::string rest = rule.table_path.substr(prefix.size());
    std::string child = rest.substr(0, rest.find('.'));
    if (std::find(children.begin(), children.end(), child) == children.end()) children.push_back(child);
  }
  return children;
}

std::size_t edit_distance(std::string_view from, std::string_view to) {
  // Optimal string alignment: a swap of neighbours ("levle") counts as one edit.
  std::vector<std::vector<std::size_t>> distance(from.size() + 1, std::vector<std::size_t>(to.size() + 1));
  for (std::size_t i = 0; i <= from.size(); ++i) distance[i][0] = i;
  for (std::size_t j = 0; j <= to.size(); ++j) distance[0][j] = j;
  for (std::size_t i = 1; i <= from.size(); ++i) {
    for (std::size_t j = 1; j <= to.size(); ++j) {
      std::size_t substitution = distance[i - 1][j - 1] + (from[i - 1] == to[j - 1] ? 0 : 1);
      distance[i][j] = std::min({distance[i - 1][j] + 1, distance[i][j - 1] + 1, substitution});
      if (i > 1 && j > 1 && from[i - 1] == to[j - 2] && from[i - 2] == to[j - 1]) {
        distance[i][j] = std::min(distance[i][j], distance[i - 2][j - 2] + 1);
      }
    }
  }
  return distance[from.size()][to.size()];
}

std::string join_path(std::string_view table_path, std::string_view key) {
  return table_path.empty() ? std::string(key) : std::string(table_path) + "." + std::string(key);
}

// The known key the user most likely meant: a near spelling in the same
// table, or the same name in another table.
std::optional<std::string> suggest_key(std::string_view table_path, std::string_view key) {
  std::optional<std::string> best;
  std::size_t best_distance = key.size() <= 3 ? 2 : 3;
  for (const std::string& child : known_children(table_path)) {
    std::size_t distance = edit_distance(key, child);
    bool is_prefix = key.size() >= 3 && child.starts_with(key);
    if (is_prefix) distance = std::min<std::size_t>(distance, 1);
    if (distance < best_distance) {
      best_distance = distance;
      best = join_path(table_path, child);
    }
  }
  if (best) return best;
  for (const KeyRule& rule : key_rules()) {
    if (rule.table_path.ends_with("." + std::string(key))) return rule.table_path;
  }
  return std::nullopt;
}

std::string list_names(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// toml::table iterates by key name; problems read better in the order written.
std::vector<std::pair<const toml::key*, const toml::node*>> in_document_order(const toml::table& table) {
  std::vector<std::pair<const toml::key*, const toml::node*>> entries;
  for (const auto& [key, node] : table) entries.emplace_back(&key, &node);
  std::stable_sort(entries.begin(), entries.end(), [](const auto& left, const auto& right) {
    const toml::source_position& a = left.first->source().begin;
    const toml::source_position& b = right.first->source().begin;
    return a.line != b.line ? a.line < b.line : a.column < b.column;
  });
  return entries;
}

// Walks a parsed document, applying known keys and warning about the rest.
class DocumentReader {
 public:
  DocumentReader(std::string_view file, std::filesystem::path base_directory, Config& config)
      : file_(file), base_directory_(std::move(base_directory)), config_(config) {}

  void read_table(const toml::table& table, const std::string& table_path) {
    for (const auto& [key_pointer, node_pointer] : in_document_order(table)) {
      const toml::key& key = *key_pointer;
      const toml::node& node = *node_pointer;
      std::string path = join_path(table_path, key.str());
      if (const KeyRule* rule = find_rule(path)) {
        const ValueReader reader(file_, base_directory_, path, rule->info.allowed);
        rule->apply(config_, node, reader);
        if (rule->show) config_.key_positions[path] = reader.position(key.source());
        continue;
      }
      std::vector<std::string> children = known_children(path);
      if (!children.empty()) {
        const auto* subtable = node.as_table();
        if (subtable == nullptr) {
          ValueReader(file_, base_directory_, path, "a table with the keys " + list_names(children)).fail_type(node);
        }
        read_table(*subtable, path);
        continue;
      }
      warn_unknown_key(key, table_path, path);
    }
  }

 private:
  void warn_unknown_key(const toml::key& key, const std::string& table_path, const std::string& path) {
    std::string message = "unknown key " + in_quotes(path) + " is ignored";
    if (auto suggestion = suggest_key(table_path, key.str())) {
      message += "; did you mean " + in_quotes(*suggestion) + "?";
    } else if (table_path.empty()) {
      message += "; the file may hold the tables " + list_names(known_children(""));
    } else {
      message += "; [" + table_path + "] may hold " + list_names(known_children(table_path));
    }
    config_.warnings.push_back(ConfigWarning{std::string(file_), static_cast<int>(key.source().begin.line),
                                             static_cast<int>(key.source().begin.column), std::move(message)});
  }

  std::string_view file_;
  std::filesystem::path base_directory_;
  Config& config_;
};

std::string read_whole_file(const std::filesystem::path& path) {
  auto fail = [&](int error) -> std::string {
    throw Error(StatusCode::invalid_argument,
                "cannot read config file " + in_quotes(path.string()) + ": " + std::generic_category().message(error) +
                    "; check that the file exists and is readable, or set HAL_CONFIG to another file");
  };
  int descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (descriptor < 0) return fail(errno);
  std::string text;
  char buffer[8192];
  for (;;) {
    ssize_t count = ::read(descriptor, buffer, sizeof buffer);
    if (count < 0 && errno == EINTR) continue;
    if (count < 0) {
      int error = errno;
      ::close(descriptor);
      return fail(error);
    }
    if (count == 0) break;
    text.append(buffer, static_cast<std::size_t>(count));
  }
  ::close(descriptor);
  return text;
}

std::filesystem::path directory_of(const std::filesystem::path& file) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(file, error);
  return (error ? file : absolute).parent_path();
}


}  // namespace

std::string ConfigWarning::to_string() const {
  if (line <= 0) return file + ": " + message;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

Config Config::parse(std::string_view text, const std::string& source_name) {
  toml::table document;
  try {
    document = toml::parse(text, source_name);
  } catch (const toml::parse_error& error) {
    throw Error(StatusCode::invalid_argument, format_position(source_name, error.source().begin) + ": " +
                                                  std::string(error.description()) +
                                                  ", expected valid TOML (see https://toml.io/en/v1.0.0)");
  }
  Config config;
  DocumentReader(source_name, directory_of(source_name), config).read_table(document, "");
  return config;
}

Config Config::load_file(const std::filesystem::path& path) {
  Config config = parse(read_whole_file(path), path.string());
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  config.source = error ? path : absolute;
  return config;
}

std::vector<std::filesystem::path> Config::search_paths() {
  auto environment = [](const char* name) { return abi::environment_value(name).value_or(""); };
  if (std::string explicit_file = environment("HAL_CONFIG"); !explicit_file.empty()) return {explicit_file};

  std::vector<std::filesystem::path> paths;
  std::error_code error;
  std::filesystem::path working_directory = std::filesystem::current_path(error);
  paths.push_back(error ? std::filesystem::path("hal.toml") : working_directory / "hal.toml");
  // The XDG base directory spec ignores relative values.
  std::filesystem::path config_home = environment("XDG_CONFIG_HOME");
  if (config_home.empty() || config_home.is_relative()) {
    std::string home = environment("HOME");
    config_home = home.empty() ? std::filesystem::path() : std::filesystem::path(home) / ".config";
  }
  if (!config_home.empty()) paths.push_back(config_home / "hal" / "hal.toml");
  paths.push_back("/etc/hal/hal.toml");
  return paths;
}

Config Config::load_default() {
  std::vector<ConfigWarning> skipped;
  if (const char* explicit_file = abi::environment("HAL_CONFIG"); explicit_file != nullptr) {
    std::error_code error;
    // Other failures to look (e.g. permissions) are reported by load_file with their cause.
    if (!std::filesystem::exists(explicit_file, error) && !error) {
      throw Error(StatusCode::invalid_argument,
                  std::string("HAL_CONFIG=") + explicit_file +
                      " names a config file that does not exist; create it, or unset HAL_CONFIG to search "
                      "./hal.toml, $XDG_CONFIG_HOME/hal/hal.toml and /etc/hal/hal.toml");
    }
    return load_file(explicit_file);
  }
  for (const std::filesystem::path& path : search_paths()) {
    std::error_code error;
    if (std::filesystem::exists(path, error)) {
      Config config = load_file(path);
      config.warnings.insert(config.warnings.begin(), skipped.begin(), skipped.end());
      return config;
    }
    // Not found is the normal case; anything else (e.g. a directory we may
    // not search) is worth telling the user about.
    if (error && error != std::errc::no_such_file_or_directory) {
      skipped.push_back(ConfigWarning{path.string(), 0, 0, "skipped: " + error.message()});
    }
  }
  Config defaults;
  defaults.warnings = std::move(skipped);
  return defaults;
}

const std::vector<ConfigKeyInfo>& Config::schema() {
  static const std::vector<ConfigKeyInfo> keys = [] {
    std::vector<ConfigKeyInfo> infos;
    for (const KeyRule& rule : key_rules()) infos.push_back(rule.info);
    return infos;
  }();
  return keys;
}

std::vector<std::string> parse_backend_filter(std::string_view text, std::string_view origin) {
  return parse_list_from_text(text, origin, check_backend_filter, kBackendFilterAllowed);
}

std::vector<std::string> parse_attention_order(std::string_view text, std::string_view origin) {
  return parse_list_from_text(text, origin, choice_list_validator(kAttentionBackends),
                              choice_list_allowed(kAttentionBackends));
}

std::string_view to_string(SettingSource::Kind kind) {
  switch (kind) {
    case SettingSource::Kind::built_in: return "built-in";
    case SettingSource::Kind::config_file: return "config file";
    case SettingSource::Kind::environment: return "environment";
  }
  return "unknown";
}

std::string SettingSource::to_string() const { return kind == Kind::built_in ? "built-in default" : location; }

std::string Setting::source_text() const {
  std::string text;
  for (const SettingSource& source : sources) text += (text.empty() ? "" : ", then ") + source.to_string();
  return text;
}

std::string Setting::origin() const {
  std::string text;
  for (const SettingSource& source : sources)
    text += (text.empty() ? "" : ", then ") +
            (source.kind == SettingSource::Kind::config_file ? "config " + key + " (" + source.location + ")"
                                                             : source.to_string());
  return text;
}

bool Setting::from(SettingSource::Kind kind) const {
  return std::any_of(sources.begin(), sources.end(), [kind](const SettingSource& source) { return source.kind == kind; });
}

namespace {

// Every key's value in `values`, with its sources: the variables that
// decided it (by key, from Settings::resolve), the file where it was set.
std::vector<Setting> settings_entries(const Config& values, const std::map<std::string, std::string>& environment) {
  std::vector<Setting> entries;
  auto file_source = [&](const std::string& key) -> std::optional<SettingSource> {
    const auto position = values.key_positions.find(key);
    if (position == values.key_positions.end()) return std::nullopt;
    return SettingSource{SettingSource::Kind::config_file, position->second};
  };
  for (const KeyRule& rule : key_rules()) {
    if (!rule.show) {  // [backend.<name>]: one entry per option, from the file only
      for (const auto& [backend, options] : values.backend_options)
        for (const auto& [option, value] : options) {
          const std::string key = "backend." + backend + "." + option;
          if (find_rule(key) != nullptr) continue;  // a key of its own, shown in schema order
          entries.push_back({key, in_quotes(value), {file_source(key).value_or(SettingSource{})}, ""});
        }
      continue;
    }
    Setting setting{rule.table_path, rule.show(values), {}, rule.info.environment_variable};
    const auto variables = environment.find(rule.table_path);
    if (variables != environment.end())
      setting.sources.push_back({SettingSource::Kind::environment, variables->second});
    if (variables == environment.end() || rule.environment_extends)
      if (auto file = file_source(rule.table_path)) setting.sources.push_back(*file);
    if (setting.sources.empty()) setting.sources.emplace_back();
    entries.push_back(std::move(setting));
  }
  return entries;
}

}  // namespace

Settings::Settings() : entries_(settings_entries(values_, {})) {}

Settings Settings::resolve(const Config& file) {
  Settings settings;
  settings.values_ = file;
  std::map<std::string, std::string> environment;
  for (const KeyRule& rule : key_rules())
    if (rule.apply_environment)
      if (auto variables = rule.apply_environment(settings.values_)) environment[rule.table_path] = *variables;
  settings.entries_ = settings_entries(settings.values_, environment);
  return settings;
}

const Setting& Settings::at(std::string_view key) const {
  for (const Setting& setting : entries_)
    if (setting.key == key) return setting;
  std::string keys;
  for (const Setting& setting : entries_) keys += (keys.empty() ? "" : ", ") + setting.key;
  throw Error(StatusCode::invalid_argument, "there is no setting " + in_quotes(key) + "; the settings are " + keys);
}

}  // namespace hal
