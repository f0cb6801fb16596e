// A test's own directory, made from a mkdtemp pattern and removed with all
// in it when the test ends.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace hal::testing {

struct ScratchDirectory {
  std::string path;
  explicit ScratchDirectory(std::string pattern) {
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

}  // namespace hal::testing
