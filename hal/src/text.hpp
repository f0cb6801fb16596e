// Internal: cutting the lists hal reads (settings, plugin fields, quirk
// version ranges) into their items.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hal::detail {

// text cut at each separator, every part as it is: "a,,b" -> {"a", "", "b"}; "" -> {""}.
inline std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find(separator, start);
    parts.emplace_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// text without the blanks (spaces and tabs) around it.
inline std::string_view trim(std::string_view text) {
  const std::size_t first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

}  // namespace hal::detail
