// Where a Gloo TCP device listens, chosen alike by hal's Gloo engine and by
// halbench's direct Gloo baseline, so both reach the same peers across hosts.
#pragma once

#include <string>

#include "environment.hpp"

namespace hal::abi {

struct GlooListen {
  std::string interface_name;  // listen on this interface ("eth0"), or
  std::string host_name;       // on this host name or address
  std::string describe() const {
    return interface_name.empty() ? "address " + host_name : "interface " + interface_name;
  }
};

// The caller's options first, then HAL_GLOO_INTERFACE, then
// HAL_GLOO_HOSTNAME, else loopback (one node).
inline GlooListen gloo_listen(const std::string& interface_option = {}, const std::string& host_option = {}) {
  GlooListen listen{interface_option, host_option};
  if (listen.interface_name.empty() && listen.host_name.empty()) {
    listen.interface_name = environment_value("HAL_GLOO_INTERFACE").value_or("");
    listen.host_name = environment_value("HAL_GLOO_HOSTNAME").value_or("");
  }
  if (listen.interface_name.empty() && listen.host_name.empty()) listen.host_name = "127.0.0.1";
  return listen;
}

}  // namespace hal::abi
