// The options of [backend.NAME] as a backend receives them at initialize.
#pragma once

#include <initializer_list>
#include <map>
#include <string>

#include "hal/backend_abi.h"

namespace hal::backend {

// The known options of init, by key; an unknown key is logged as a warning
// naming what the backend takes (`takes`, e.g. "runtime (a path to
// libamdhip64.so)") and otherwise ignored.
std::map<std::string, std::string> read_backend_options(const hal_backend_init_v1& init, const std::string& backend,
                                                        std::initializer_list<const char*> known,
                                                        const std::string& takes);

}  // namespace hal::backend
