// The options of [backend.NAME] as a backend receives them at initialize:
// libhal reads the config file and the HAL_* variables that set them, so a
// backend reads no environment of its own.
#pragma once

#include <initializer_list>
#include <map>
#include <string>

#include "hal/backend_abi.h"

namespace hal::backend {

// One option's value and where it was set: the variable's name
// ("HAL_CUDA_DRIVER") or "config".
struct BackendOption {
  std::string value;
  std::string source;
};

class BackendOptions {
 public:
  // The value, "" when the option is unset.
  const std::string& value(const std::string& key) const;
  // Where the value was set; "" when unset.
  const std::string& source(const std::string& key) const;
  // "HAL_HOST_ISA=sse9" or "config isa=sse9", for messages about a bad value.
  std::string origin(const std::string& key) const;

  std::map<std::string, BackendOption> options;
};

// The known options of init, by key; an unknown key is logged as a warning
// naming what the backend takes (`takes`, e.g. "runtime (a path to
// libamdhip64.so)") and otherwise ignored.
BackendOptions read_backend_options(const hal_backend_init_v1& init, const std::string& backend,
                                    std::initializer_list<const char*> known, const std::string& takes);

}  // namespace hal::backend
