// halinfo config: every setting in effect, its value and where it came from.
#pragma once

#include <ostream>

#include <nlohmann/json.hpp>

#include "hal/hal.hpp"

namespace halinfo {

// One row per key: key, value, source; the config file and its warnings first.
void print_settings(const hal::Config& file, const hal::Settings& settings, std::ostream& out);
// Schema hal.settings/1 (docs/halinfo.md), keys in the order written.
nlohmann::ordered_json settings_document(const hal::Config& file, const hal::Settings& settings);

}  // namespace halinfo
