// Reading the suite's TOML files (profiles, waivers): every error names the
// file and line it is about.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

#include <toml++/toml.h>

namespace hal::conformance::detail {

// "path:line" of a node of the file at path.
inline std::string origin_of(const std::filesystem::path& path, const toml::node& node) {
  return path.string() + ":" + std::to_string(node.source().begin.line);
}

// The file's document; a malformed one is invalid_argument "path:line: what is wrong".
inline toml::table parse_toml_file(const std::filesystem::path& path) {
  try {
    return toml::parse_file(path.string());
  } catch (const toml::parse_error& error) {
    throw std::invalid_argument(path.string() + ":" + std::to_string(error.source().begin.line) + ": " +
                                std::string(error.description()));
  }
}

}  // namespace hal::conformance::detail
