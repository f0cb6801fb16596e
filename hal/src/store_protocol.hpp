// The TcpStore's wire format (store_tcp.cpp), parsed without I/O so the
// server's handling of any byte sequence can be tested on its own.
//
// Little-endian host order; both ends run the same build:
//   request  := op:u8 key_size:u32 key  then  'S' value_size:u64 value
//                                          |  'G' timeout_ms:i64
//                                          |  'A' delta:i64
//                                          |  'T' (nothing: the key is the token)
//   response := status:u8, then for 'G' found: value_size:u64 value
//                               for 'A': value:i64
//               status 'refused' := message_size:u32 message, and the server
//               closes the connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hal::detail {

constexpr std::uint8_t store_set = 'S', store_get = 'G', store_add = 'A', store_token = 'T';
constexpr std::uint8_t store_found = 0, store_timed_out = 1, store_refused = 2;
constexpr std::uint32_t store_max_key_bytes = 1u << 20;

struct StoreRequest {
  std::uint8_t op = 0;
  std::string_view key;    // points into the parsed input
  std::string_view value;  // 'S' only
  std::int64_t argument = 0;  // 'G' timeout in ms, 'A' delta
  std::size_t size = 0;    // bytes of input the request takes
};

enum class StoreParse {
  complete,   // `request` is the first request of the input
  need_more,  // a prefix of a request within the limits: wait for more bytes
  refused,    // not a request this server takes; `why` says what and the limit
};

StoreParse parse_store_request(std::string_view input, std::uint64_t max_value_bytes, StoreRequest& request,
                               std::string& why);

}  // namespace hal::detail
