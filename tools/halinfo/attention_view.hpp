// halinfo attention: the explain table for one attention problem.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "hal/hal.hpp"

namespace halinfo {

struct AttentionQuery {
  std::string shape = "b=1,hq=32,hkv=8,sq=2048,d=128";  // Llama-3-8B-like default
  std::string dtype = "bf16";
  bool causal = false;
  std::string alignment = "top_left";
  std::string window;  // "L,R"
  bool backward = false;
};

// Throws hal::Error(invalid_argument) naming a bad field.
hal::AttentionParams parse_attention_query(const AttentionQuery& query);
void print_attention(const std::vector<hal::Device>& devices, const AttentionQuery& query, bool json,
                     std::ostream& out);

}  // namespace halinfo
