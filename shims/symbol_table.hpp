// Filling a table of function pointers from a library: each entry is
// required or optional and may have alternative exported names (RCCL spells
// all-to-all ncclAllToAll, NCCL ncclAlltoAll).
#pragma once

#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace hal::shims {

// Appends item to a separated list. (Written out instead of
// `list += (list.empty() ? "" : sep) + item`, which GCC 12 at -O3 flags
// with a false -Wrestrict.)
inline void append_listed(std::string& list, std::string_view item, std::string_view separator) {
  if (!list.empty()) list += separator;
  list += item;
}

struct SymbolSpec {
  std::vector<const char*> names;  // alternatives, the first one found wins
  bool required = true;
  void* slot = nullptr;            // address of the function pointer to fill
  std::size_t slot_size = 0;
};

// Describes a typed function pointer field for SymbolSpec.
template <typename Function>
SymbolSpec symbol(Function*& field, std::initializer_list<const char*> names, bool required) {
  static_assert(sizeof(Function*) == sizeof(void*), "function pointers must fit in void*");
  return SymbolSpec{names, required, &field, sizeof(Function*)};
}

struct SymbolResolution {
  std::vector<std::string> missing_required;  // "a|b" for alternatives
  std::vector<std::string> missing_optional;
  bool complete() const { return missing_required.empty(); }
  static std::string join(const std::vector<std::string>& names) {
    std::string text;
    for (const auto& name : names) append_listed(text, name, ", ");
    return text;
  }
};

// find(name) returns the address or nullptr.
inline SymbolResolution resolve_symbols(const std::vector<SymbolSpec>& specs,
                                        const std::function<void*(const char*)>& find) {
  SymbolResolution resolution;
  for (const auto& spec : specs) {
    void* address = nullptr;
    for (const char* name : spec.names) {
      address = find(name);
      if (address != nullptr) break;
    }
    std::memcpy(spec.slot, &address, spec.slot_size);
    if (address != nullptr) continue;
    std::string alternatives;
    for (const char* name : spec.names) append_listed(alternatives, name, "|");
    (spec.required ? resolution.missing_required : resolution.missing_optional).push_back(alternatives);
  }
  return resolution;
}

}  // namespace hal::shims
