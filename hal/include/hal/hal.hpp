// Umbrella header of the hal C++ API.
#pragma once

#include "hal/attention.hpp"
#include "hal/capabilities.hpp"
#include "hal/config.hpp"
#include "hal/device.hpp"
#include "hal/dtype.hpp"
#include "hal/event.hpp"
#include "hal/interop.hpp"
#include "hal/memory.hpp"
#include "hal/memory_test.hpp"
#include "hal/runtime.hpp"
#include "hal/settings.hpp"
#include "hal/status.hpp"
#include "hal/stream.hpp"
#include "hal/telemetry.hpp"
#include "hal/topology.hpp"
