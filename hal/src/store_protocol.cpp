// The TcpStore's request parser (store_protocol.hpp): plain bytes in, no
// I/O and nothing of libhal, so that a fuzzer can build it on its own
// (tests/fuzz).
#include "store_protocol.hpp"

#include <cstring>

namespace hal::detail {

StoreParse parse_store_request(std::string_view input, std::uint64_t max_value_bytes, StoreRequest& request,
                               std::string& why) {
  constexpr std::size_t header = 1 + sizeof(std::uint32_t);
  if (input.empty()) return StoreParse::need_more;
  const auto op = static_cast<std::uint8_t>(input[0]);
  if (op != store_set && op != store_get && op != store_add && op != store_token) {
    why = "request type " + std::to_string(op) + " is not one of S, G, A, T; is this a hal TcpStore client?";
    return StoreParse::refused;
  }
  if (input.size() < header) return StoreParse::need_more;
  std::uint32_t key_size;
  std::memcpy(&key_size, input.data() + 1, sizeof(key_size));
  if (key_size > store_max_key_bytes) {
    why = "a key of " + std::to_string(key_size) + " bytes is over the store's limit of " +
          std::to_string(store_max_key_bytes) + " bytes";
    return StoreParse::refused;
  }
  const std::size_t key_end = header + key_size;
  std::size_t end = key_end;
  std::uint64_t value_size = 0;
  if (op == store_set) {
    if (input.size() < key_end + sizeof(value_size)) return StoreParse::need_more;
    std::memcpy(&value_size, input.data() + key_end, sizeof(value_size));
    if (value_size > max_value_bytes) {
      why = "a value of " + std::to_string(value_size) + " bytes is over the store's limit of " +
            std::to_string(max_value_bytes) + " bytes (HAL_STORE_MAX_VALUE_BYTES on rank 0)";
      return StoreParse::refused;
    }
    // Against what is left, not as a sum: under a limit near 2^64 (a
    // TcpStoreOptions may set one) the sum wraps, and a request would end
    // before its own header.
    if (value_size > input.size() - key_end - sizeof(value_size)) return StoreParse::need_more;
    end = key_end + sizeof(value_size) + value_size;
  } else if (op == store_get || op == store_add) {
    end = key_end + sizeof(std::int64_t);
  }
  if (input.size() < end) return StoreParse::need_more;
  request.op = op;
  request.key = input.substr(header, key_size);
  request.value = op == store_set ? input.substr(key_end + sizeof(value_size), value_size) : std::string_view();
  request.argument = 0;
  if (op == store_get || op == store_add) std::memcpy(&request.argument, input.data() + key_end, sizeof(std::int64_t));
  request.size = end;
  return StoreParse::complete;
}

}  // namespace hal::detail
