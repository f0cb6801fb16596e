#include "backend_options.hpp"

#include <algorithm>
#include <cstdint>

namespace hal::backend {

std::map<std::string, std::string> read_backend_options(const hal_backend_init_v1& init, const std::string& backend,
                                                        std::initializer_list<const char*> known,
                                                        const std::string& takes) {
  std::map<std::string, std::string> options;
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
    options[key] = init.options[i].value != nullptr ? init.options[i].value : "";
  }
  return options;
}

}  // namespace hal::backend
