// A vendor library opened by search and filled into a symbol table: what
// every shim's library has in common, and the one result every shim's load
// returns.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "library_loader.hpp"
#include "symbol_table.hpp"

namespace hal::shims {

// What loading a shim's library gave: the library, or why there is none.
template <typename Library>
struct LoadResult {
  std::unique_ptr<Library> library;  // what was opened (path(), missing_optional()); null when it cannot be used
  std::string message;               // why not, every path tried included
  bool library_missing = false;      // true: nothing loadable was found; false: found but unusable
};

// Keeps an optional library's load: `library` gets it (null when it cannot be
// used), `status` says "loaded <path>", or why not.
template <typename Library>
void keep_optional(LoadResult<Library> result, std::unique_ptr<Library>& library, std::string& status) {
  library = std::move(result.library);
  status = library ? "loaded " + library->path() : result.message;
}

// The opened library behind a shim's table.
class VendorLibrary {
 public:
  // The file that was opened, as the dynamic linker resolved it.
  const std::string& path() const { return library_.path(); }
  // What the request called it: "NCCL (libnccl.so.2)", "RCCL (librccl.so.1)".
  const std::string& display_name() const { return display_name_; }
  // Every path tried, as LibraryLoad::describe_attempts says.
  const std::string& attempts() const { return attempts_; }
  // The optional functions it lacks; the features these disable are the caller's to name.
  const std::vector<std::string>& missing_optional() const { return missing_optional_; }
  // The dlopen handle, for vendor code that resolves its own symbols (the cuDNN frontend).
  void* native_handle() const { return library_.native_handle(); }

 protected:
  VendorLibrary() = default;
  ~VendorLibrary() = default;
  VendorLibrary(VendorLibrary&&) = default;
  VendorLibrary& operator=(VendorLibrary&&) = default;

  // Keeps what the search opened; path() and find() answer from here on.
  void adopt(SharedLibrary library, std::string display_name, std::string attempts) {
    library_ = std::move(library);
    display_name_ = std::move(display_name);
    attempts_ = std::move(attempts);
  }
  void* find(const char* symbol) const { return library_.find(symbol); }

  std::vector<std::string> missing_optional_;

 private:
  template <typename Library>
  friend LoadResult<Library> open_vendor_library(std::unique_ptr<Library> library, const LibraryRequest& request,
                                                 const std::vector<SymbolSpec>& symbols);

  SharedLibrary library_;
  std::string display_name_;
  std::string attempts_;
};

// Searches for request's library and fills symbols (specs over library's
// table) from it by name. Missing: "<display name> was not found ...
// Tried: ..."; lacking a required function: unusable, with the names.
template <typename Library>
LoadResult<Library> open_vendor_library(std::unique_ptr<Library> library, const LibraryRequest& request,
                                        const std::vector<SymbolSpec>& symbols) {
  LibraryLoad load = load_library(request);
  if (!load.loaded()) {
    const std::string advice = !request.not_found_advice.empty()      ? "; " + request.not_found_advice
                               : !request.environment_variable.empty() ? " or set " + request.environment_variable
                                                                       : "";
    return {nullptr, request.display_name + " was not found" + advice + ". Tried: " + load.describe_attempts(), true};
  }
  const SymbolResolution resolution = resolve_symbols(
      symbols, [&](const SymbolSpec&, const SymbolName& name) { return load.library.find(name.name.c_str()); });
  if (!resolution.complete())
    return {nullptr,
            request.display_name + " at " + load.library.path() + " lacks required functions (" +
                SymbolResolution::join(resolution.missing_required) + "); install a newer release",
            false};  // load.library closes here
  VendorLibrary& opened = *library;
  opened.missing_optional_ = resolution.missing_optional;
  opened.adopt(std::move(load.library), request.display_name, load.describe_attempts());
  return {std::move(library), {}, false};
}

}  // namespace hal::shims
