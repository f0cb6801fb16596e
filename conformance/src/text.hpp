// Text helpers for the report writers.
#pragma once

#include <string>
#include <string_view>

namespace hal::conformance::detail {

// Replaces each byte that is not part of a valid UTF-8 sequence with U+FFFD:
// logs of crashed processes may hold anything, reports must stay valid.
inline std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    std::size_t length = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xE ? 3 : (byte >> 3) == 0x1E ? 4 : 0;
    bool valid = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; valid && k < length; ++k) valid = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
    if (valid) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

// For the writers' markup languages: HTML text and attributes, and XML 1.0.
enum class Markup { html, xml };

// `raw` as valid UTF-8 with the characters markup gives meaning to escaped.
// XML also gets &apos;, and '?' for the control characters it does not
// allow (all but tab, newline and return).
inline std::string escape_markup(std::string_view raw, Markup markup) {
  const std::string text = valid_utf8(raw);
  std::string escaped;
  escaped.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': escaped += "&amp;"; break;
      case '<': escaped += "&lt;"; break;
      case '>': escaped += "&gt;"; break;
      case '"': escaped += "&quot;"; break;
      case '\'': escaped += markup == Markup::xml ? "&apos;" : "'"; break;
      default:
        if (markup == Markup::xml && static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')
          escaped += "?";
        else
          escaped += c;
    }
  }
  return escaped;
}

}  // namespace hal::conformance::detail
