#include "rendezvous/protocol.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string_view>
#include <type_traits>

namespace dtl::rendezvous {

namespace {

constexpr size_t kHeader = 4;            // big-endian body length
constexpr size_t kBodyPrefix = 2;        // version, type
constexpr size_t kFailureFixed = 44;     // 4 i32 + 2 i64 + 3 string lengths
constexpr size_t kKeepCapacity = 4096;   // a decoder keeps this much between frames, frees the rest
constexpr size_t kWholeText = kMaxFrameBody - kBodyPrefix - 4;  // a Refused's or Stop's reason
static_assert(kMaxStacksText == kWholeText - 4);  // after a u32

bool continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Cuts `s` to at most `cap` bytes keeping its head and (longer) tail, since a traceback's last
// lines name the error; cut points never split a UTF-8 sequence.
std::string shorten(std::string_view s, size_t cap) {
  if (s.size() <= cap) return std::string(s);
  std::string marker = "\n[... " + std::to_string(s.size()) + " bytes cut ...]\n";
  if (cap < marker.size() + 16) {
    size_t end = cap;
    while (end > 0 && continuation(s[end])) --end;
    return std::string(s.substr(0, end));
  }
  size_t keep = cap - marker.size();
  size_t head = keep / 3;
  size_t tail_start = s.size() - (keep - head);
  while (head > 0 && continuation(s[head])) --head;
  while (tail_start < s.size() && continuation(s[tail_start])) ++tail_start;
  marker = "\n[... " + std::to_string(tail_start - head) + " bytes cut ...]\n";
  std::string out;
  out.reserve(head + marker.size() + (s.size() - tail_start));
  out.append(s.substr(0, head)).append(marker).append(s.substr(tail_start));
  return out;
}

// Shares `budget` bytes among texts of these lengths: short ones stay whole, long ones get equal
// shares of the rest. Nothing is cut when everything fits, so a decoded message re-encodes as it was.
std::vector<size_t> share_budget(const std::vector<size_t>& lengths, size_t budget) {
  if (std::accumulate(lengths.begin(), lengths.end(), size_t{0}) <= budget) return lengths;
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lengths[a] < lengths[b]; });
  std::vector<size_t> caps(lengths.size());
  size_t left = budget;
  for (size_t i = 0; i < order.size(); ++i) {
    size_t share = left / (order.size() - i);
    caps[order[i]] = std::min(lengths[order[i]], share);
    left -= caps[order[i]];
  }
  return caps;
}

class Writer {
 public:
  explicit Writer(Bytes& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out_.push_back(static_cast<uint8_t>(v >> shift));
  }
  void i32(int32_t v) { u32(static_cast<uint32_t>(v)); }
  void u64(uint64_t v) {
    for (int shift = 56; shift >= 0; shift -= 8) out_.push_back(static_cast<uint8_t>(v >> shift));
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void raw(const uint8_t* data, size_t size) {
    u32(static_cast<uint32_t>(size));
    out_.insert(out_.end(), data, data + size);
  }
  void bytes(const Bytes& b, size_t cap) { raw(b.data(), std::min(b.size(), cap)); }
  void nonce(const Nonce& n) { raw(n.data(), n.size()); }
  void str(const std::string& s, size_t cap) {
    if (s.size() <= cap) return raw(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    std::string cut = shorten(s, cap);
    raw(reinterpret_cast<const uint8_t*>(cut.data()), cut.size());
  }

  // Named as the Reader's are, so that one field list (fields, report_fields) serves both.
  void u32(const char*, uint32_t v) { u32(v); }
  void i32(const char*, int32_t v) { i32(v); }
  void u64(const char*, uint64_t v) { u64(v); }
  void i64(const char*, int64_t v) { i64(v); }
  void nonce(const char*, const Nonce& n) { nonce(n); }
  void proof(const char*, const Bytes& b) { bytes(b, kMaxProof); }
  void name(const char*, const std::string& s) { str(s, kMaxName); }
  void str(const char*, const std::string& s, size_t cap) { str(s, cap); }
  void text(const char*, const std::string& s) { str(s, kWholeText); }
  /// Failures, after Exit's reason when there is one: see write_failures.
  void failures(const std::vector<FailureReport>& failures, const std::string* reason, size_t fixed);

 private:
  Bytes& out_;
};

// One failure report's fields, in wire order, for both directions (`io` a Writer or a Reader).
template <class IO, class Report>
void report_fields(IO& io, Report& f, size_t message_cap) {
  io.i32("rank", f.rank);
  io.i32("local_rank", f.local_rank);
  io.i32("pid", f.pid);
  io.i32("exitcode", f.exitcode);
  io.i64("observed_ns", f.observed_ns);
  io.i64("timestamp_s", f.timestamp_s);
  io.str("host", f.host, kMaxName);
  io.str("error_file", f.error_file, kMaxName);
  io.str("message", f.message, message_cap);
}

constexpr size_t kTextKept = 512;        // of each failure's message, before more failures are kept

size_t failure_fixed_size(const FailureReport& f) {
  return kFailureFixed + std::min(f.host.size(), kMaxName) + std::min(f.error_file.size(), kMaxName);
}

// What a failure needs at least: its fixed fields and the start of its message.
size_t failure_cost(const FailureReport& f) { return failure_fixed_size(f) + std::min(f.message.size(), kTextKept); }

// Failures (and Exit's reason) sized to what the frame has left after `fixed` payload bytes. When
// they cannot all keep kTextKept of their message, the latest observed are dropped: fewer failures
// that each say what happened beat many that say nothing, and the root cause is always kept.
void write_failures(Writer& w, const std::vector<FailureReport>& failures, const std::string* reason,
                    size_t fixed) {
  size_t budget = kMaxFrameBody - kBodyPrefix - fixed;
  size_t limit = budget - (reason ? std::min(reason->size(), kTextKept) : 0);
  size_t all_cost = 0;
  for (const auto& f : failures) all_cost += failure_cost(f);

  std::vector<const FailureReport*> kept;
  if (all_cost <= limit) {
    for (const auto& f : failures) kept.push_back(&f);
  } else {
    std::vector<size_t> order(failures.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return observed_before(failures[a], failures[b]);
    });
    std::vector<bool> keep(failures.size());
    size_t used = 0;
    for (size_t i : order) {
      if (used + failure_cost(failures[i]) > limit) break;
      used += failure_cost(failures[i]);
      keep[i] = true;
    }
    for (size_t i = 0; i < failures.size(); ++i)
      if (keep[i]) kept.push_back(&failures[i]);
  }
  size_t kept_fixed = 0;
  for (const auto* f : kept) kept_fixed += failure_fixed_size(*f);

  std::vector<size_t> lengths;
  if (reason) lengths.push_back(reason->size());
  for (const auto* f : kept) lengths.push_back(f->message.size());
  std::vector<size_t> caps = share_budget(lengths, budget - kept_fixed);

  size_t next = 0;
  if (reason) w.str(*reason, caps[next++]);
  w.u32(static_cast<uint32_t>(kept.size()));
  for (const auto* f : kept) report_fields(w, *f, caps[next++]);
}

void Writer::failures(const std::vector<FailureReport>& failures, const std::string* reason, size_t fixed) {
  write_failures(*this, failures, reason, fixed);
}

// Each message's fields, in wire order, once for both directions: `io` is a Writer (the message
// const) or a Reader (the message filled in). Heartbeat, Stopped and Done have none.
template <class IO, class M>
void fields(IO& io, M& v) {
  using T = std::remove_const_t<M>;
  if constexpr (std::is_same_v<T, Hello>) {
    io.name("run_id", v.run_id);
    io.nonce("nonce", v.nonce);
  } else if constexpr (std::is_same_v<T, Challenge>) {
    io.nonce("nonce", v.nonce);
    io.proof("proof", v.proof);
  } else if constexpr (std::is_same_v<T, Join>) {
    io.proof("proof", v.proof);
    io.name("host", v.host);
    io.name("addr", v.addr);
    io.i32("nproc", v.nproc);
    io.i32("node_rank", v.node_rank);
    io.i32("worker_port", v.worker_port);
    io.i32("max_restarts", v.max_restarts);
    io.i32("min_nodes", v.min_nodes);
    io.i32("max_nodes", v.max_nodes);
    io.u64("agent_id", v.agent_id);
  } else if constexpr (std::is_same_v<T, Refused> || std::is_same_v<T, Stop> || std::is_same_v<T, Leaving>) {
    io.text("reason", v.reason);
  } else if constexpr (std::is_same_v<T, Round>) {
    io.u32("round", v.round);
    io.i32("group_rank", v.group_rank);
    io.i32("group_world_size", v.group_world_size);
    io.i32("base_rank", v.base_rank);
    io.i32("world_size", v.world_size);
    io.name("master_addr", v.master_addr);
    io.i32("master_port", v.master_port);
    io.i32("restart_count", v.restart_count);
  } else if constexpr (std::is_same_v<T, Failed>) {
    io.failures(v.failures, nullptr, 4);
  } else if constexpr (std::is_same_v<T, Exit>) {
    io.i32("code", v.code);
    io.failures(v.failures, &v.reason, 4 + 4 + 4);
  } else if constexpr (std::is_same_v<T, StacksWanted>) {
    io.u32("id", v.id);
    io.u32("kind", v.kind);
  } else if constexpr (std::is_same_v<T, StacksAsk>) {
    io.u32("id", v.id);
    io.u32("kind", v.kind);
  } else if constexpr (std::is_same_v<T, StacksPart>) {
    io.u32("id", v.id);
    io.str("part", v.part, kMaxStacksText);
  } else if constexpr (std::is_same_v<T, StacksEnd>) {
    io.u32("id", v.id);
    io.str("missing", v.missing, kMaxStacksText);
  } else if constexpr (std::is_same_v<T, HangVerdict>) {
    io.i32("rank", v.rank);
    io.str("message", v.message, kMaxStacksText);
  }
}

void write_payload(Writer& w, const Message& m) {
  std::visit([&](const auto& v) { fields(w, v); }, m);
}

// Bounds-checked reads over one message's payload. The first problem is kept and later reads
// return zeros, so a decoder reads its fields straight through and checks once.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const char* message) : p_(data), left_(size), message_(message) {}

  bool failed() const { return error_.has_value(); }
  void fail(const std::string& what) {
    if (!error_) error_ = DecodeError{std::string(message_) + " message: " + what};
  }

  uint32_t u32(const char* field) {
    uint8_t b[4]{};
    take(field, b, 4);
    return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
  }
  int32_t i32(const char* field) { return static_cast<int32_t>(u32(field)); }
  uint64_t u64(const char* field) {
    uint64_t hi = u32(field);
    return hi << 32 | u32(field);
  }
  int64_t i64(const char* field) { return static_cast<int64_t>(u64(field)); }

  /// A length-prefixed byte string of at most `cap` bytes.
  std::string_view raw(const char* field, size_t cap) {
    uint32_t size = u32(field);
    if (failed()) return {};
    if (size > left_) {
      fail(std::string(field) + " of " + std::to_string(size) + " bytes exceeds the " + std::to_string(left_) +
           " bytes left");
      return {};
    }
    if (size > cap) {
      fail(std::string(field) + " of " + std::to_string(size) + " bytes exceeds the " + std::to_string(cap) +
           "-byte limit");
      return {};
    }
    std::string_view out(reinterpret_cast<const char*>(p_), size);
    p_ += size;
    left_ -= size;
    return out;
  }
  std::string str(const char* field, size_t cap) { return std::string(raw(field, cap)); }
  /// A run id, host or address: it ends up in C strings (resolver, environment), where a NUL would
  /// quietly cut it.
  std::string name(const char* field) {
    std::string_view s = raw(field, kMaxName);
    if (s.find('\0') != std::string_view::npos) fail(std::string(field) + " contains a NUL byte");
    return std::string(s);
  }
  Bytes bytes(const char* field, size_t cap) {
    std::string_view s = raw(field, cap);
    return Bytes(s.begin(), s.end());
  }
  Nonce nonce(const char* field) {
    Nonce n{};
    uint32_t size = u32(field);
    if (failed()) return n;
    if (size != n.size()) {
      fail(std::string(field) + " must be " + std::to_string(n.size()) + " bytes (got " + std::to_string(size) + ")");
      return n;
    }
    take(field, n.data(), n.size());
    return n;
  }
  /// A count of items of at least `min_item` bytes each: refused when they could not fit, so a
  /// peer's count never sizes an allocation.
  uint32_t count(const char* field, size_t min_item) {
    uint32_t n = u32(field);
    if (!failed() && n > left_ / min_item) {
      fail(std::to_string(n) + " " + field + " need at least " + std::to_string(size_t{n} * min_item) +
           " bytes, " + std::to_string(left_) + " left");
      return 0;
    }
    return failed() ? 0 : n;
  }

  // Named as the Writer's are, so that one field list (fields, report_fields) serves both.
  void u32(const char* field, uint32_t& v) { v = u32(field); }
  void i32(const char* field, int32_t& v) { v = i32(field); }
  void u64(const char* field, uint64_t& v) { v = u64(field); }
  void i64(const char* field, int64_t& v) { v = i64(field); }
  void nonce(const char* field, Nonce& n) { n = nonce(field); }
  void proof(const char* field, Bytes& b) { b = bytes(field, kMaxProof); }
  void name(const char* field, std::string& s) { s = name(field); }
  void str(const char* field, std::string& s, size_t cap) { s = str(field, cap); }
  void text(const char* field, std::string& s) { s = str(field, kMaxFrameBody); }
  /// Exit's reason when there is one, then the failures.
  void failures(std::vector<FailureReport>& out, std::string* reason, size_t fixed);

  void at_least(const char* field, int64_t value, int64_t lo) {
    if (value < lo) fail(std::string(field) + " must be >= " + std::to_string(lo) + " (got " + std::to_string(value) + ")");
  }
  void in_range(const char* field, int64_t value, int64_t lo, int64_t hi) {
    if (value < lo || value > hi) {
      fail(std::string(field) + " must be in " + std::to_string(lo) + ".." + std::to_string(hi) + " (got " +
           std::to_string(value) + ")");
    }
  }

  std::optional<DecodeError> finish() {
    if (!error_ && left_ > 0) {
      error_ = DecodeError{std::string(message_) + " message has " + std::to_string(left_) +
                           (left_ == 1 ? " trailing byte" : " trailing bytes")};
    }
    return error_;
  }

 private:
  void take(const char* field, uint8_t* out, size_t n) {
    if (failed()) return;
    if (left_ < n) {
      error_ = DecodeError{std::string(message_) + " message truncated: " + field + " needs " + std::to_string(n) +
                           " bytes, " + std::to_string(left_) + " left"};
      return;
    }
    std::memcpy(out, p_, n);
    p_ += n;
    left_ -= n;
  }

  const uint8_t* p_;
  size_t left_;
  const char* message_;
  std::optional<DecodeError> error_;
};

void Reader::failures(std::vector<FailureReport>& out, std::string* reason, size_t) {
  if (reason) text("reason", *reason);
  out.resize(count("failures", kFailureFixed));
  for (auto& f : out) {
    report_fields(*this, f, kMaxFrameBody);
    if (failed()) break;
  }
}

// The fields, then what no field says alone: ranges, and MIN <= MAX.
template <typename T>
void read_payload(Reader& r, T& v) {
  fields(r, v);
  if (r.failed()) return;
  if constexpr (std::is_same_v<T, Join>) {
    r.in_range("nproc", v.nproc, 1, kMaxNproc);
    r.at_least("node_rank", v.node_rank, -1);
    r.in_range("worker_port", v.worker_port, 0, 65535);
    r.at_least("max_restarts", v.max_restarts, 0);
    r.at_least("min_nodes", v.min_nodes, 1);
    if (v.max_nodes < v.min_nodes) {
      r.fail("max_nodes (" + std::to_string(v.max_nodes) + ") must be >= min_nodes (" +
             std::to_string(v.min_nodes) + ")");
    }
  } else if constexpr (std::is_same_v<T, Round>) {
    r.at_least("group_world_size", v.group_world_size, 1);
    r.in_range("group_rank", v.group_rank, 0, int64_t{v.group_world_size} - 1);
    r.at_least("world_size", v.world_size, 1);
    r.in_range("base_rank", v.base_rank, 0, int64_t{v.world_size} - 1);
    r.in_range("master_port", v.master_port, 0, 65535);
    r.at_least("restart_count", v.restart_count, 0);
  } else if constexpr (std::is_same_v<T, StacksWanted> || std::is_same_v<T, StacksAsk>) {
    r.in_range("kind", v.kind, kGatherStacks, kGatherRanks);
  } else if constexpr (std::is_same_v<T, HangVerdict>) {
    r.at_least("rank", v.rank, 0);
  }
}

// Builds the alternative with this index, so the type byte picks the payload reader at run time.
template <size_t I = 0>
std::variant<Message, DecodeError> decode_type(size_t index, const uint8_t* data, size_t size) {
  if constexpr (I < std::variant_size_v<Message>) {
    if (index != I) return decode_type<I + 1>(index, data, size);
    std::variant_alternative_t<I, Message> value;
    Reader reader(data, size, kWireTypes[I].name);
    read_payload(reader, value);
    if (auto error = reader.finish()) return *error;
    return Message(std::in_place_index<I>, std::move(value));
  } else {
    return DecodeError{"no message at index " + std::to_string(index)};
  }
}

DecodeError bad_length(uint32_t size) {
  if (size == 0) return DecodeError{"empty frame (body length 0)"};
  return DecodeError{"frame body of " + std::to_string(size) + " bytes exceeds the " +
                     std::to_string(kMaxFrameBody) + "-byte limit"};
}

}  // namespace

const char* message_name(const Message& m) { return kWireTypes[m.index()].name; }

uint8_t type_code(const Message& m) { return kWireTypes[m.index()].code; }

Bytes encode(const Message& m) {
  Bytes out(kHeader);
  out.reserve(64);
  Writer w(out);
  w.u8(kProtocolVersion);
  w.u8(type_code(m));
  write_payload(w, m);
  uint32_t body = static_cast<uint32_t>(out.size() - kHeader);
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(body >> (24 - 8 * i));
  return out;
}

std::variant<Message, DecodeError> decode_body(const uint8_t* data, size_t size) {
  if (size == 0 || size > kMaxFrameBody) return bad_length(static_cast<uint32_t>(std::min<size_t>(size, UINT32_MAX)));
  if (data[0] != kProtocolVersion) return DecodeError{"unsupported protocol version " + std::to_string(data[0])};
  if (size < kBodyPrefix) return DecodeError{"frame body of 1 byte has no message type"};
  const auto* type = std::find_if(std::begin(kWireTypes), std::end(kWireTypes),
                                  [&](const WireType& t) { return t.code == data[1]; });
  if (type == std::end(kWireTypes)) return DecodeError{"unknown message type " + std::to_string(data[1])};
  return decode_type(static_cast<size_t>(type - std::begin(kWireTypes)), data + kBodyPrefix, size - kBodyPrefix);
}

std::optional<DecodeError> FrameDecoder::feed(const uint8_t* data, size_t size, std::vector<Message>& out) {
  if (error_) return error_;
  auto deliver = [&](const uint8_t* body, size_t n) {
    auto result = decode_body(body, n);
    if (auto* error = std::get_if<DecodeError>(&result)) {
      error_ = std::move(*error);
      return false;
    }
    out.push_back(std::move(std::get<Message>(result)));
    header_size_ = 0;
    body_.clear();
    if (body_.capacity() > kKeepCapacity) Bytes().swap(body_);
    return true;
  };

  while (size > 0) {
    if (header_size_ < kHeader) {
      size_t take = std::min(kHeader - header_size_, size);
      std::memcpy(header_.data() + header_size_, data, take);
      header_size_ += take;
      data += take;
      size -= take;
      if (header_size_ < kHeader) break;
      body_size_ = uint32_t{header_[0]} << 24 | uint32_t{header_[1]} << 16 | uint32_t{header_[2]} << 8 | header_[3];
      if (body_size_ == 0 || body_size_ > kMaxFrameBody) {
        error_ = bad_length(body_size_);
        return error_;
      }
      continue;
    }
    size_t need = body_size_ - body_.size();
    if (body_.empty() && size >= need) {  // the whole body is in this read: decode it in place
      if (!deliver(data, need)) return error_;
      data += need;
      size -= need;
      continue;
    }
    size_t take = std::min(need, size);
    if (body_.capacity() < body_.size() + take) {
      body_.reserve(std::min<size_t>(body_size_, std::max(2 * body_.capacity(), body_.size() + take)));
    }
    body_.insert(body_.end(), data, data + take);
    data += take;
    size -= take;
    if (body_.size() == body_size_ && !deliver(body_.data(), body_.size())) return error_;
  }
  return std::nullopt;
}

}  // namespace dtl::rendezvous
