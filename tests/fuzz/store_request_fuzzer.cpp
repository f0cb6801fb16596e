// libFuzzer target for the TcpStore's request parser (hal/src/store_protocol.cpp).
// An input is one byte choosing the server's value limit, then the bytes a
// connection sent. Whatever they are, the parser must stay inside them, and
// its answer must be consistent:
//   complete:  the request lies within the input, its parts where the wire
//              format puts them, its value within the limit; every shorter
//              prefix of it asks for more bytes, and it alone parses the same;
//   need_more: so does every shorter prefix;
//   refused:   with a reason, and more bytes after it change nothing.
// A broken rule prints what broke and traps, so libFuzzer keeps the input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "store_protocol.hpp"

namespace {

using hal::detail::parse_store_request;
using hal::detail::StoreParse;
using hal::detail::StoreRequest;

constexpr std::uint64_t value_limits[] = {
    0, 1, 5, 4096, std::uint64_t{1} << 16, std::uint64_t{64} << 20, std::uint64_t{1} << 40,
    std::numeric_limits<std::uint64_t>::max() / 2, std::numeric_limits<std::uint64_t>::max() - 8,
    std::numeric_limits<std::uint64_t>::max(),
};
constexpr std::size_t header_bytes = 1 + sizeof(std::uint32_t);

void require(bool holds, const char* rule, std::string_view input, std::uint64_t limit) {
  if (holds) return;
  std::fprintf(stderr, "store request parser: %s (input of %zu bytes, value limit %llu)\n", rule, input.size(),
               static_cast<unsigned long long>(limit));
  __builtin_trap();
}

bool within(std::string_view part, const char* begin, const char* end) {
  return part.empty() || (part.data() >= begin && part.data() + part.size() <= end);
}

StoreParse parse(std::string_view input, std::uint64_t limit, StoreRequest& request, std::string& why) {
  // The parser gets exactly these bytes in a block of their own, so
  // AddressSanitizer reports a read one byte past them.
  char* copy = static_cast<char*>(std::malloc(input.size() + 1));
  if (!input.empty()) std::memcpy(copy, input.data(), input.size());
  const std::string_view exact(copy, input.size());
  const StoreParse result = parse_store_request(exact, limit, request, why);
  // Views into the copy are moved onto the caller's input before it goes.
  if (result == StoreParse::complete) {
    if (!request.key.empty()) request.key = std::string_view(input.data() + (request.key.data() - copy), request.key.size());
    if (!request.value.empty())
      request.value = std::string_view(input.data() + (request.value.data() - copy), request.value.size());
  }
  std::free(copy);
  return result;
}

void check(std::string_view input, std::uint64_t limit) {
  StoreRequest request;
  std::string why;
  const StoreParse result = parse(input, limit, request, why);
  if (result == StoreParse::refused) {
    require(!why.empty(), "a refusal without a reason", input, limit);
    StoreRequest longer_request;
    std::string longer_why;
    const std::string longer = std::string(input) + std::string(16, '\xff');
    require(parse(longer, limit, longer_request, longer_why) == StoreParse::refused,
            "a refusal that more bytes undo", input, limit);
    return;
  }
  require(why.empty(), "a reason without a refusal", input, limit);
  std::size_t prefix_end = input.size();
  if (result == StoreParse::complete) {
    const char* begin = input.data();
    const char* end = begin + request.size;
    require(request.size >= header_bytes && request.size <= input.size(), "a request size outside the input", input,
            limit);
    require(request.op == 'S' || request.op == 'G' || request.op == 'A' || request.op == 'T', "an unknown request type",
            input, limit);
    require(within(request.key, begin + header_bytes, end) && request.key.size() <= hal::detail::store_max_key_bytes,
            "a key outside the request", input, limit);
    require(request.key.empty() || request.key.data() == begin + header_bytes, "a key not after the header", input,
            limit);
    const std::size_t after_key = header_bytes + request.key.size();
    if (request.op == 'S') {
      require(within(request.value, begin + after_key + 8, end), "a value outside the request", input, limit);
      require(request.value.size() <= limit, "a value over the limit", input, limit);
      require(request.size == after_key + 8 + request.value.size(), "a set request of the wrong size", input, limit);
    } else {
      require(request.value.empty(), "a value on a request that has none", input, limit);
      require(request.size == after_key + (request.op == 'T' ? 0 : 8), "a request of the wrong size", input, limit);
    }
    StoreRequest alone;
    std::string alone_why;
    require(parse(input.substr(0, request.size), limit, alone, alone_why) == StoreParse::complete &&
                alone.op == request.op && alone.size == request.size && alone.key == request.key &&
                alone.value == request.value && alone.argument == request.argument,
            "a request that parses differently on its own", input, limit);
    prefix_end = request.size;
  }
  // Every shorter prefix (of the request, or of an incomplete input) waits
  // for more bytes. Long inputs are sampled.
  const std::size_t step = prefix_end > 512 ? prefix_end / 256 : 1;
  for (std::size_t length = 0; length < prefix_end; length += step) {
    StoreRequest shorter;
    std::string shorter_why;
    require(parse(input.substr(0, length), limit, shorter, shorter_why) == StoreParse::need_more,
            "a prefix that does not wait for more bytes", input, limit);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint64_t limit = value_limits[data[0] % (sizeof(value_limits) / sizeof(value_limits[0]))];
  check(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), limit);
  return 0;
}
