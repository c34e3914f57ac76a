// torch's c10d TCPStore wire protocol, apart from sockets: an incremental request decoder that
// trusts nothing (every length checked before a byte of it is kept, memory growing only as bytes
// arrive) and the replies' encoding. Both dialects: torch 1.13 (no handshake, SET is 0) and 2.x
// (VALIDATE with a magic number first, every other op one higher). Verified against both; see docs/store.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtl::store {

/// What a 2.x client sends first, after VALIDATE, as a little-endian uint32.
inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

/// The operations, by meaning. Each value is torch 2.x's QueryType code (TCPStoreBackend.hpp), the
/// v2 wire code, stated here so that no reordering can change the wire; v1's are op_for's table.
enum class Op : uint8_t {
  validate = 0, set = 1, compare_set = 2, get = 3, add = 4, check = 5, wait = 6, num_keys = 7,
  delete_key = 8, append = 9, multi_get = 10, multi_set = 11, cancel_wait = 12, ping = 13,
  queue_push = 14, queue_pop = 15, queue_len = 16, list_keys = 17, barrier = 18,
};
const char* op_name(Op op);

enum class Dialect : uint8_t {
  unknown,  ///< nothing decided yet: the first message says
  v1,       ///< torch 1.x: SET=0 ... DELETE_KEY=8 (7 is WATCH_KEY, which dtlaunch refuses)
  v2,       ///< torch 2.x: VALIDATE=0, SET=1 ... QUEUE_LEN=16, LIST_KEYS=17, BARRIER=18
};

/// The op a code means in `d` (v1 or v2), or nullopt.
std::optional<Op> op_for(Dialect d, uint8_t code);

/// Replies' single bytes (the same in both dialects).
inline constexpr uint8_t kReady = 0, kNotReady = 1;                 ///< CHECK
inline constexpr uint8_t kStopWaiting = 0, kWaitCanceled = 1;      ///< WAIT, CANCEL_WAIT

struct Request {
  Op op = Op::get;
  std::vector<std::string> keys;    ///< in wire order
  std::vector<std::string> values;  ///< set/append/queue_push: 1; compare_set: expected, desired; multi_set: one per key
  int64_t number = 0;               ///< add: the delta; barrier: the world size; validate/ping: the magic or nonce
  bool operator==(const Request&) const = default;
};

/// What one connection may make the decoder hold. torch's libuv server allows keys of 8 KiB and
/// values of 8 MiB; dtlaunch is a little wider for keys and values, and bounds a whole request.
struct Limits {
  uint64_t max_key = 64 * 1024;
  uint64_t max_value = 64ull << 20;
  uint64_t max_keys = 128 * 1024;        ///< in one check/wait/multi_get/multi_set
  uint64_t max_request = 128ull << 20;   ///< bytes of one request, all fields together
};

struct DecodeError {
  std::string what;
  bool operator==(const DecodeError&) const = default;
};

/// Incremental: feed whatever the socket gave; complete requests come out in order. After an error
/// it stays failed. Holds at most the request in progress (bounded by Limits).
class RequestDecoder {
 public:
  explicit RequestDecoder(Limits limits = {}) : limits_(limits) {}
  std::optional<DecodeError> feed(const uint8_t* data, size_t size, std::vector<Request>& out);
  Dialect dialect() const { return dialect_; }
  /// Bytes of the request in progress kept now (for memory accounting).
  size_t buffered() const;

 private:
  enum class Field : uint8_t { op, first_zero, u32, i64, count, length, body };
  std::optional<DecodeError> fail(std::string what);
  void start_fields();
  bool next_field();  ///< moves to the request's next field; false when it is complete

  Limits limits_;
  Dialect dialect_ = Dialect::unknown;
  Field field_ = Field::op;
  uint8_t scratch_[8] = {};
  size_t have_ = 0;           ///< bytes of scratch_ (or of the body) read
  uint64_t length_ = 0;       ///< the string being read
  bool reading_key_ = true;   ///< the string is a key (else a value)
  int step_ = 0;              ///< position in the op's fixed fields
  uint64_t repeat_left_ = 0;  ///< keys (or key/value pairs) still to read after a count
  uint64_t request_bytes_ = 0;
  Request req_;
  std::string* target_ = nullptr;
  std::optional<DecodeError> error_;
};

/// Replies: a uint64 length then bytes; int64 and uint32 little-endian.
void put_bytes(std::string& out, const std::string& value);
void put_i64(std::string& out, int64_t v);
void put_u32(std::string& out, uint32_t v);

/// Whether a connection's first bytes are a store client's, as opposed to the rendezvous's frames
/// (4-byte big-endian length, at most 64 KiB, then protocol version 1): a v1 op other than SET
/// starts with a non-zero byte; a 2.x client with 00 and the magic; a v1 SET with 00 and a key
/// length whose byte 4 is zero (keys are far below 16 MiB), where a rendezvous frame has its version,
/// 1. Five bytes always decide.
enum class Verdict { store, other, need_more };
Verdict classify(const uint8_t* data, size_t size);

}  // namespace dtl::store
