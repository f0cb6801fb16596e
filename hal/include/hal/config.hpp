// hal's configuration file (TOML). Every key, its type, default and
// overriding environment variable is listed in Config::schema() and in
// docs/config.md. The values in effect, with the environment applied and
// where each came from, are a Settings (hal/settings.hpp).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hal {

// Something in a config file that hal ignored, e.g. a misspelt key.
struct ConfigWarning {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;

  // "file:line:col: message"
  std::string to_string() const;
};

// One key of the configuration file: what tools and docs show about it.
struct ConfigKeyInfo {
  // Dotted: "log.level". The per-backend tables read "backend.<backend>.<option>".
  std::string name;
  std::string type;                  // "string", "boolean", "number", ...
  std::string default_value;         // as TOML: "\"warning\"", "false", "[]"
  std::string allowed;               // the values it accepts, in words
  std::string environment_variable;  // overrides the key; empty when none does
  std::string description;
};

struct Config {
  // The file it came from; nullopt for built-in defaults and parse().
  std::optional<std::filesystem::path> source;

  // [backends]
  // Items as in HAL_BACKENDS: either names to load ("host", "cuda") or names
  // to skip ("!rocm"), never both. Empty: every backend found.
  std::vector<std::string> backends_filter;
  // Directories searched for backend plugins; relative entries are resolved
  // against the config file's directory.
  std::vector<std::filesystem::path> backends_search_paths;

  // [backend.<name>]: options handed to one backend, e.g.
  // [backend.cuda] driver = "/x/libcuda.so.1" -> {"cuda": {"driver": "/x/libcuda.so.1"}}.
  // Integers and booleans arrive as text ("8", "true").
  std::map<std::string, std::map<std::string, std::string>> backend_options;

  // [log]
  std::string log_level = "warning";  // debug | info | warning | error

  // [attention]
  std::vector<std::string> attention_order;  // fused | flash | math, each at most once
  bool attention_strict = false;
  bool attention_debug = false;

  // [capabilities]
  // "key=value" items as in HAL_CAPABILITY_OVERRIDES ("attention.fused=false"):
  // the top capability layer, above declarations, quirks and probes.
  std::vector<std::string> capability_overrides;

  // [probes]
  // Where verified probe results are cached; empty means $XDG_CACHE_HOME/hal.
  std::filesystem::path probes_cache_dir;

  // [collectives]
  double collectives_timeout_seconds = 300;
  std::string collectives_engine = "auto";  // auto | gloo | mpi
  // Every rank checks that its peers call the same collective with the same
  // count, type and root before running it (costs a store round trip).
  bool collectives_check = false;

  // Keys hal ignored, with their position.
  std::vector<ConfigWarning> warnings;
  // Where each key set in the file was written ("/etc/hal/hal.toml:4"), by
  // dotted name ("attention.order", "backend.cuda.driver").
  std::map<std::string, std::string> key_positions;

  // Parses TOML text. `source_name` names the text in messages, and relative
  // paths in it resolve against its directory. Throws hal::Error
  // (invalid_argument) "<file>:<line>:<col>: <what is wrong>, expected <what is allowed>"
  // on syntax errors and bad values.
  static Config parse(std::string_view text, const std::string& source_name);
  // Reads and parses one file; throws hal::Error naming the path and the OS
  // error when it cannot be read.
  static Config load_file(const std::filesystem::path& path);
  // Where load_default() looks, in order: $HAL_CONFIG alone when set;
  // otherwise ./hal.toml, $XDG_CONFIG_HOME/hal/hal.toml (XDG_CONFIG_HOME
  // defaults to ~/.config), /etc/hal/hal.toml.
  static std::vector<std::filesystem::path> search_paths();
  // The first file of search_paths() that exists, parsed; built-in defaults
  // (no source) when none exists. HAL_CONFIG naming a missing file is an error.
  static Config load_default();

  // Every key the file may hold; unknown-key detection uses the same list.
  static const std::vector<ConfigKeyInfo>& schema();
};

// Parses a backend filter as HAL_BACKENDS writes it ("host,cuda", "!rocm").
// Throws hal::Error (invalid_argument) starting with `origin`, e.g.
// "HAL_BACKENDS", on malformed names or a mix of included and skipped names.
std::vector<std::string> parse_backend_filter(std::string_view text, std::string_view origin);

// Parses an attention order as HAL_ATTN_BACKENDS writes it ("flash,math").
// Throws hal::Error (invalid_argument) starting with `origin` on unknown or
// repeated names.
std::vector<std::string> parse_attention_order(std::string_view text, std::string_view origin);

}  // namespace hal
