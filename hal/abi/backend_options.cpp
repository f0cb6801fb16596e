#include "backend_options.hpp"

#include <algorithm>
#include <cstdint>

namespace hal::backend {

namespace {
const std::string& unset() {
  static const std::string empty;
  return empty;
}
}  // namespace

const std::string& BackendOptions::value(const std::string& key) const {
  const auto found = options.find(key);
  return found != options.end() ? found->second.value : unset();
}

const std::string& BackendOptions::source(const std::string& key) const {
  const auto found = options.find(key);
  return found != options.end() ? found->second.source : unset();
}

std::string BackendOptions::origin(const std::string& key) const {
  const std::string& where = source(key);
  return (where == "config" ? "config " + key : where) + "=" + value(key);
}

BackendOptions read_backend_options(const hal_backend_init_v1& init, const std::string& backend,
                                    std::initializer_list<const char*> known, const std::string& takes) {
  BackendOptions read;
  for (std::uint32_t i = 0; i < init.option_count; ++i) {
    const std::string key = init.options[i].key != nullptr ? init.options[i].key : "";
    if (std::none_of(known.begin(), known.end(), [&](const char* name) { return key == name; })) {
      if (init.log != nullptr) {
        const std::string message =
            "unknown option '" + key + "' for the " + backend + " backend is ignored; it takes " + takes;
        init.log(init.log_user_data, HAL_LOG_WARNING, message.c_str());
      }
      continue;
    }
    read.options[key] = {init.options[i].value != nullptr ? init.options[i].value : "",
                         hal_backend_option_source(&init, i)};
  }
  return read;
}

}  // namespace hal::backend
