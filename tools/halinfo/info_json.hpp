// halinfo's JSON document (schema hal.info/2, see docs/halinfo.md).
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "hal/hal.hpp"

namespace halinfo {

nlohmann::json backend_to_json(const hal::BackendReport& report);
nlohmann::json device_to_json(const hal::Device& device);
// The whole document; `devices` may be a subset (--device).
nlohmann::json info_document(const hal::Runtime& runtime, const std::vector<hal::Device>& devices);

}  // namespace halinfo
