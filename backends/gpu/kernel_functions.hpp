// The functions of a device's loaded kernel image, resolved by name once and
// kept: both GPU backends look kernels up per launch, and the vendor's
// lookup (cuModuleGetFunction, hipModuleGetFunction) takes a lock and a
// string search each time.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "last_error.hpp"

namespace hal::backend {

// The "kernels" capability's note until a device's image is loaded: loading
// needs the device's context, which discovery must not create.
inline constexpr const char* kernels_loaded_on_first_use =
    "loaded and checked on first use (the first attention call on the device); attention's supports() and "
    "explain then say whether they run";

template <typename Function>
class KernelFunctions {
 public:
  // resolve(name, &function) returns "" when found, otherwise why not; a
  // failure is not cached, so a later call reports it again.
  template <typename Resolve>
  std::pair<Function, std::string> find(const std::string& name, Resolve&& resolve) {
    std::lock_guard lock(mutex_);
    if (const auto found = functions_.find(name); found != functions_.end()) return {found->second, {}};
    Function function{};
    std::string problem = resolve(name.c_str(), &function);
    if (problem.empty()) functions_.emplace(name, function);
    return {function, std::move(problem)};
  }
  // The module is gone: its functions with it.
  void clear() {
    std::lock_guard lock(mutex_);
    functions_.clear();
  }

 private:
  std::mutex mutex_;
  std::map<std::string, Function, std::less<>> functions_;
};

// The named kernel of a device's loaded image, resolved once: `usable` says
// the image loaded (`status` why not), lookup(name, &function) asks the
// vendor's `lookup_call` and returns "" when found.
template <typename Function, typename Lookup>
hal_status find_kernel(const std::string& device, bool usable, const std::string& status,
                       KernelFunctions<Function>& functions, const char* name, const char* lookup_call, Lookup&& lookup,
                       Function* out) {
  if (!usable) return fail(HAL_ERROR_UNSUPPORTED, device + " has no usable kernels: " + status);
  auto [found, problem] = functions.find(name, lookup);
  if (!problem.empty())
    return fail(HAL_ERROR_INTERNAL, "the kernel image loaded on " + device + " lacks " + name + " (" + lookup_call +
                                        ": " + problem + "); the plugin was built from mismatched sources, rebuild it");
  *out = found;
  return HAL_OK;
}

}  // namespace hal::backend
