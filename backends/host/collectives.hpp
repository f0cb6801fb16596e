// The host backend's collectives sub-table (Gloo over TCP).
#pragma once

#include "hal/backend_abi.h"

namespace hal::host {

const hal_collectives_v1* collectives();

}  // namespace hal::host
