// A fake NVRTC (libnvrtc.so.13): only what hal asks of it, its version.
// cuDNN's own use of NVRTC (compiling engines) is not faked: the fake cuDNN
// builds no engines. HAL_FAKE_NVRTC_VERSION ("12.8") sets what nvrtcVersion
// reports (default 13.0), read on every call.
#include <cstdio>
#include <cstdlib>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_EXPORT int nvrtcVersion(int* major, int* minor) {
  if (major == nullptr || minor == nullptr) return 3;  // NVRTC_ERROR_INVALID_INPUT
  *major = 13;
  *minor = 0;
  if (const char* version = std::getenv("HAL_FAKE_NVRTC_VERSION"); version != nullptr)
    if (std::sscanf(version, "%d.%d", major, minor) != 2) return 3;
  return 0;  // NVRTC_SUCCESS
}
