// A vendor library opened by search and filled into a symbol table: the
// common part of the cuDNN and NCCL-compatible shims.
#pragma once

#include <string>
#include <vector>

#include "library_loader.hpp"
#include "symbol_table.hpp"

namespace hal::shims {

struct VendorLibraryLoad {
  SharedLibrary library;                      // closed on failure
  std::vector<std::string> missing_optional;  // features these disable are the caller's to name
  std::string error;                          // why it is unusable, every path tried included
  bool library_missing = false;               // nothing loadable was found (versus found but unusable)
  std::string attempts;                       // every path tried, as LibraryLoad::describe_attempts says
  bool ok() const { return library.is_open(); }
};

inline VendorLibraryLoad open_vendor_library(const LibraryRequest& request, const std::vector<SymbolSpec>& symbols) {
  VendorLibraryLoad result;
  LibraryLoad load = load_library(request);
  result.attempts = load.describe_attempts();
  if (!load.loaded()) {
    std::string variable = request.environment_variable.empty() ? "" : " or set " + request.environment_variable;
    result.error = request.display_name + " was not found" + variable + ". Tried: " + load.describe_attempts();
    result.library_missing = true;
    return result;
  }
  const SymbolResolution resolution = resolve_symbols(
      symbols, [&](const SymbolSpec&, const SymbolName& name) { return load.library.find(name.name.c_str()); });
  if (!resolution.complete()) {
    result.error = request.display_name + " at " + load.library.path() + " lacks required functions (" +
                   SymbolResolution::join(resolution.missing_required) + "); install a newer release";
    return result;  // load.library closes here
  }
  result.missing_optional = resolution.missing_optional;
  result.library = std::move(load.library);
  return result;
}

}  // namespace hal::shims
