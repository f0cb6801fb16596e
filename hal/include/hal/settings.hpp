// The settings in effect: every configuration key with its value and where
// that value came from. Runtime::create resolves them once, from the
// built-in defaults, the config file and the environment (which outranks the
// file, key by key); nothing reads the environment again per call.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hal/config.hpp"

namespace hal {

// Where a setting's value came from.
struct SettingSource {
  enum class Kind { built_in, config_file, environment };
  Kind kind = Kind::built_in;
  // config_file: "/etc/hal/hal.toml:4"; environment: "HAL_ATTN_STRICT=1",
  // or several variables ("NVTE_FUSED_ATTN=0 NVTE_FLASH_ATTN=1").
  std::string location;

  // "built-in default", "/etc/hal/hal.toml:4", "HAL_ATTN_STRICT=1"
  std::string to_string() const;
};

// "built-in", "config file", "environment"
std::string_view to_string(SettingSource::Kind kind);

struct Setting {
  std::string key;    // "attention.strict", "backend.cuda.driver"
  std::string value;  // as TOML writes it: true, ["flash", "math"], "warning"
  // One source; two for a list the environment extends (HAL_BACKEND_PATH's
  // directories come before the file's backends.search_paths).
  std::vector<SettingSource> sources;
  std::string environment_variable;  // the variable that overrides the key, if any

  // The sources joined: "HAL_BACKEND_PATH=/a:/b, then hal.toml:3"
  std::string source_text() const;
  // Who set it, for messages: "HAL_ATTN_STRICT=1", "config attention.strict
  // (/etc/hal/hal.toml:4)", "built-in default".
  std::string origin() const;
  bool from(SettingSource::Kind kind) const;  // one of the sources is of this kind
};

class Settings {
 public:
  // The built-in defaults; no file, no environment.
  Settings();
  // `file` (Config::load_default() or a caller's Config) with the
  // environment applied, read now. Throws hal::Error (invalid_argument)
  // naming a variable whose value is not allowed and what is.
  static Settings resolve(const Config& file);

  // The effective values in the config's own types.
  const Config& values() const { return values_; }
  // Every key of Config::schema() in schema order, backend options one
  // entry each ("backend.cuda.driver").
  const std::vector<Setting>& entries() const { return entries_; }
  // Throws hal::Error (invalid_argument) listing the keys for an unknown one.
  const Setting& at(std::string_view key) const;

 private:
  Config values_;
  std::vector<Setting> entries_;
};

}  // namespace hal
