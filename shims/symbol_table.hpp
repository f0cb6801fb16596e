// A library's functions declared once, as a list, from which both its table
// of function pointers and the table's resolution are generated. A list is
// an X-macro whose rows read
//
//   X(field, type, requirement, names...)
//
//   field        the table's member: "AllToAll", "cuMemAlloc"
//   type         the member's pointer type: NcclResult (*)(int* version),
//                decltype(&::cuMemAlloc), or an object's (MPI's handles)
//   requirement  required (the library is unusable without it) or optional
//                (disables only what needs it)
//   names...     the exported names, alternatives in the order tried (RCCL
//                spells all-to-all ncclAllToAll, NCCL ncclAlltoAll); none:
//                the field's own name. A name may carry the version at
//                which a library that resolves by version is asked for it
//                ({"cuMemAlloc_v2", 3020}: the CUDA driver's
//                cuGetProcAddress takes the field and that version).
//
//   #define HAL_EXAMPLE_FUNCTIONS(X) (one row a line, each line ending in a backslash)
//     X(GetVersion, Result (*)(int* version), required, "exampleGetVersion")
//     X(AllToAll, Result (*)(const void*, void*), optional, "exampleAlltoAll", "exampleAllToAll")
//   struct ExampleApi { HAL_SYMBOL_FIELDS(HAL_EXAMPLE_FUNCTIONS) };
//   resolve_symbols(HAL_SYMBOL_SPECS(HAL_EXAMPLE_FUNCTIONS, api, ""), find);
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace hal::shims {

// Appends item to a separated list. (Written out instead of
// `list += (list.empty() ? "" : sep) + item`, which GCC 12 at -O3 flags
// with a false -Wrestrict.)
inline void append_listed(std::string& list, std::string_view item, std::string_view separator) {
  if (!list.empty()) list += separator;
  list += item;
}

enum class Requirement { required, optional };

// One exported name of a function and, for a library that resolves by
// version (the CUDA driver), the version whose ABI the table's type matches.
struct SymbolName {
  SymbolName(const char* exported, int abi_version = 0) : name(exported), version(abi_version) {}
  std::string name;
  int version = 0;  // 0: the library is not asked by version
};

// One row of a list, bound to the field it fills.
struct SymbolSpec {
  const char* field = nullptr;   // the member's name: what a versioned lookup asks for
  std::vector<SymbolName> names;  // alternatives, the first one found wins
  bool required = true;
  void* slot = nullptr;  // address of the pointer to fill (or, for absent_symbols, to read)
  std::size_t slot_size = 0;

  // How messages name it: its alternatives "a|b", or, where the library is
  // asked by version, the field (the name that library knows it by).
  std::string description() const {
    if (names.front().version != 0) return field;
    std::string alternatives;
    for (const auto& name : names) append_listed(alternatives, name.name, "|");
    return alternatives;
  }
};

// Binds one row to a pointer member; prefix goes before every listed name
// (NVML's and HGML's functions differ only in it).
template <typename Pointer>
SymbolSpec symbol(Pointer& field, const char* field_name, Requirement requirement, std::string_view prefix,
                  std::initializer_list<SymbolName> names) {
  static_assert(std::is_pointer_v<std::remove_const_t<Pointer>> && sizeof(Pointer) == sizeof(void*),
                "table members must be pointers that fit in void*");
  SymbolSpec spec{field_name, {}, requirement == Requirement::required,
                  const_cast<void*>(static_cast<const void*>(&field)), sizeof(Pointer)};
  spec.names.assign(names);
  if (spec.names.empty()) spec.names.emplace_back(field_name);
  for (SymbolName& name : spec.names) name.name.insert(0, prefix);
  return spec;
}

// The members of a table: one pointer per row of LIST, null until resolved.
#define HAL_SYMBOL_FIELDS(LIST) LIST(HAL_SYMBOL_FIELD_)
#define HAL_SYMBOL_FIELD_(field, type, requirement, ...) std::type_identity_t<type> field = nullptr;

// The rows of LIST bound to the members of `object` (a table declared with
// HAL_SYMBOL_FIELDS, or any struct with those members), as a
// std::vector<SymbolSpec>; prefix goes before every listed name.
#define HAL_SYMBOL_SPECS(LIST, object, prefix)                                                    \
  ([](auto& hal_symbol_table_, std::string_view hal_symbol_prefix_) {                              \
    return std::vector<::hal::shims::SymbolSpec>{LIST(HAL_SYMBOL_SPEC_)};                          \
  }((object), (prefix)))
#define HAL_SYMBOL_SPEC_(field, type, requirement, ...)                                            \
  ::hal::shims::symbol(hal_symbol_table_.field, #field, ::hal::shims::Requirement::requirement,    \
                       hal_symbol_prefix_, {__VA_ARGS__}),

struct SymbolResolution {
  std::vector<std::string> missing_required;  // each as SymbolSpec::description() names it
  std::vector<std::string> missing_optional;
  bool complete() const { return missing_required.empty(); }
  static std::string join(const std::vector<std::string>& names) {
    std::string text;
    for (const auto& name : names) append_listed(text, name, ", ");
    return text;
  }
  void note_missing(const SymbolSpec& spec) {
    (spec.required ? missing_required : missing_optional).push_back(spec.description());
  }
};

// Fills every spec's member. find(spec, name) returns the address of one
// alternative or nullptr; most libraries answer with dlsym(name.name).
inline SymbolResolution resolve_symbols(const std::vector<SymbolSpec>& specs,
                                        const std::function<void*(const SymbolSpec&, const SymbolName&)>& find) {
  SymbolResolution resolution;
  for (const auto& spec : specs) {
    void* address = nullptr;
    for (const SymbolName& name : spec.names) {
      address = find(spec, name);
      if (address != nullptr) break;
    }
    std::memcpy(spec.slot, &address, spec.slot_size);
    if (address == nullptr) resolution.note_missing(spec);
  }
  return resolution;
}

// The same account for a table someone else filled (a plugin's table of
// entry points): which members are null. Reads the members only.
inline SymbolResolution absent_symbols(const std::vector<SymbolSpec>& specs) {
  SymbolResolution resolution;
  for (const auto& spec : specs) {
    void* address = nullptr;
    std::memcpy(&address, spec.slot, spec.slot_size);
    if (address == nullptr) resolution.note_missing(spec);
  }
  return resolution;
}

}  // namespace hal::shims
