#include <cstdio>
#include "hal/hal.hpp"
int main() {
  auto runtime = hal::Runtime::create();
  for (auto& b : runtime.backends()) std::printf("%s %s %s\n", b.name.c_str(), std::string(hal::to_string(b.state)).c_str(), b.reason.c_str());
  for (auto& d : runtime.devices()) std::printf("%s %s\n", d.id().c_str(), d.info().name.c_str());
}
