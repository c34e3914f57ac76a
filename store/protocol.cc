#include "store/protocol.h"

#include <algorithm>
#include <cstring>

namespace dtl::store {
namespace {

constexpr const char* kOpNames[] = {"validate", "set",       "compare_set", "get",        "add",      "check",
                                    "wait",     "num_keys",  "delete_key",  "append",     "multi_get", "multi_set",
                                    "cancel_wait", "ping",   "queue_push",  "queue_pop",  "queue_len",
                                    "list_keys", "barrier"};
static_assert(std::size(kOpNames) == static_cast<size_t>(Op::barrier) + 1);

// torch 1.13's QueryType: SET, COMPARE_SET, GET, ADD, CHECK, WAIT, GETNUMKEYS, WATCH_KEY, DELETE_KEY.
constexpr Op kV1[] = {Op::set, Op::compare_set, Op::get, Op::add, Op::check, Op::wait, Op::num_keys};
constexpr uint8_t kV1WatchKey = 7, kV1DeleteKey = 8;

/// An op's fields after its code: k key, v value, u uint32, i int64; c a count then that many keys,
/// C a count then that many key/value pairs.
const char* fields(Op op) {
  switch (op) {
    case Op::validate: case Op::ping: return "u";
    case Op::set: case Op::append: case Op::queue_push: return "kv";
    case Op::compare_set: return "kvv";
    case Op::get: case Op::delete_key: case Op::queue_pop: case Op::queue_len: return "k";
    case Op::add: case Op::barrier: return "ki";
    case Op::check: case Op::wait: case Op::multi_get: return "c";
    case Op::multi_set: return "C";
    case Op::num_keys: case Op::cancel_wait: case Op::list_keys: return "";
  }
  return "";
}

uint64_t little_endian(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

const char* op_name(Op op) { return kOpNames[static_cast<size_t>(op)]; }

std::optional<Op> op_for(Dialect d, uint8_t code) {
  if (d == Dialect::v2) {
    if (code <= static_cast<uint8_t>(Op::barrier)) return static_cast<Op>(code);
    return std::nullopt;
  }
  if (code < std::size(kV1)) return kV1[code];
  if (code == kV1DeleteKey) return Op::delete_key;
  return std::nullopt;
}

size_t RequestDecoder::buffered() const {
  size_t n = field_ == Field::body ? 0 : have_;  // a body's bytes are in req_ already
  for (const auto& k : req_.keys) n += k.size();
  for (const auto& v : req_.values) n += v.size();
  return n;
}

std::optional<DecodeError> RequestDecoder::fail(std::string what) {
  error_ = DecodeError{std::move(what)};
  req_ = {};
  have_ = 0;
  field_ = Field::op;
  return error_;
}

void RequestDecoder::start_fields() {
  step_ = 0;
  repeat_left_ = 0;
}

// Sets field_ (and target_) for the next field of req_; false once the request is whole.
bool RequestDecoder::next_field() {
  have_ = 0;
  const char* f = fields(req_.op);
  // a counted run: keys, or key/value pairs for C
  if (f[0] == 'C' && req_.values.size() < req_.keys.size()) {
    reading_key_ = false;
    field_ = Field::length;
    return true;
  }
  if (repeat_left_ > 0) {
    --repeat_left_;
    reading_key_ = true;
    field_ = Field::length;
    return true;
  }
  const char c = f[step_];
  if (c == '\0') return false;
  ++step_;
  switch (c) {
    case 'k': reading_key_ = true; field_ = Field::length; break;
    case 'v': reading_key_ = false; field_ = Field::length; break;
    case 'u': field_ = Field::u32; break;
    case 'i': field_ = Field::i64; break;
    default: field_ = Field::count; break;
  }
  return true;
}

std::optional<DecodeError> RequestDecoder::feed(const uint8_t* data, size_t size, std::vector<Request>& out) {
  if (error_) return error_;
  size_t at = 0;
  // A request is complete: out it goes, and the next starts with its op code.
  auto complete = [&] {
    out.push_back(std::move(req_));
    req_ = {};
    field_ = Field::op;
    have_ = 0;
    request_bytes_ = 0;
  };
  // After a field: the next one, or the request is whole.
  auto advance = [&] {
    if (!next_field()) complete();
  };
  // Reads into scratch_ up to n bytes; true when it holds n.
  auto fill = [&](size_t n) {
    size_t take = std::min(n - have_, size - at);
    std::memcpy(scratch_ + have_, data + at, take);
    have_ += take;
    at += take;
    request_bytes_ += take;
    return have_ == n;
  };
  while (at < size) {
    switch (field_) {
      case Field::op: {
        const uint8_t code = data[at++];
        request_bytes_ = 1;
        if (dialect_ == Dialect::unknown && code == 0) {
          // 2.x's VALIDATE, or 1.13's SET: the next four bytes say which
          field_ = Field::first_zero;
          have_ = 0;
          break;
        }
        if (dialect_ == Dialect::unknown) dialect_ = Dialect::v1;
        if (dialect_ == Dialect::v1 && code == kV1WatchKey) return fail("watch_key (torch 1.x) is not supported");
        auto op = op_for(dialect_, code);
        if (!op) return fail("unknown query type " + std::to_string(code));
        req_ = {};
        req_.op = *op;
        start_fields();
        advance();
        break;
      }
      case Field::first_zero: {
        if (!fill(4)) break;
        if (little_endian(scratch_, 4) == kValidationMagic) {
          dialect_ = Dialect::v2;
          req_ = {};
          req_.op = Op::validate;
          req_.number = kValidationMagic;
          complete();
        } else {
          // 1.13's SET: these are the low four bytes of the key's length
          dialect_ = Dialect::v1;
          req_ = {};
          req_.op = Op::set;
          start_fields();
          next_field();
          have_ = 4;  // scratch_ keeps them; field_ is now the key's length
        }
        break;
      }
      case Field::u32: {
        if (!fill(4)) break;
        req_.number = static_cast<int64_t>(little_endian(scratch_, 4));
        if (req_.op == Op::validate && req_.number != kValidationMagic) return fail("wrong validation magic number");
        advance();
        break;
      }
      case Field::i64: {
        if (!fill(8)) break;
        req_.number = static_cast<int64_t>(little_endian(scratch_, 8));
        advance();
        break;
      }
      case Field::count: {
        if (!fill(8)) break;
        const uint64_t n = little_endian(scratch_, 8);
        if (n > limits_.max_keys) {
          return fail(std::string(op_name(req_.op)) + " of " + std::to_string(n) + " keys (at most " +
                      std::to_string(limits_.max_keys) + ")");
        }
        repeat_left_ = n;
        advance();
        break;
      }
      case Field::length: {
        if (!fill(8)) break;
        length_ = little_endian(scratch_, 8);
        const uint64_t max = reading_key_ ? limits_.max_key : limits_.max_value;
        if (length_ > max) {
          return fail(std::string(reading_key_ ? "key" : "value") + " of " + std::to_string(length_) +
                      " bytes in " + op_name(req_.op) + " (at most " + std::to_string(max) + ")");
        }
        if (length_ > limits_.max_request - std::min(request_bytes_, limits_.max_request)) {
          return fail(std::string(op_name(req_.op)) + " request over " + std::to_string(limits_.max_request) +
                      " bytes");
        }
        auto& list = reading_key_ ? req_.keys : req_.values;
        list.emplace_back();
        target_ = &list.back();
        have_ = 0;
        if (length_ == 0) {
          advance();
        } else {
          field_ = Field::body;
        }
        break;
      }
      case Field::body: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(length_ - have_, size - at));
        target_->append(reinterpret_cast<const char*>(data + at), take);
        at += take;
        have_ += take;
        request_bytes_ += take;
        if (have_ == length_) {
          have_ = 0;
          advance();
        }
        break;
      }
    }
  }
  return std::nullopt;
}

void put_bytes(std::string& out, const std::string& value) {
  put_i64(out, static_cast<int64_t>(value.size()));
  out.append(value);
}

void put_i64(std::string& out, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(u >> (8 * i)));
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

Verdict classify(const uint8_t* data, size_t size) {
  if (size == 0) return Verdict::need_more;
  if (data[0] != 0) return Verdict::store;
  if (size < 5) return Verdict::need_more;
  if (little_endian(data + 1, 4) == kValidationMagic) return Verdict::store;
  return data[4] == 0 ? Verdict::store : Verdict::other;
}

}  // namespace dtl::store
