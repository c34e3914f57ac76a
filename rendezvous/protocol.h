// The rendezvous wire protocol, separate from sockets: length-prefixed, versioned frames whose
// decoder trusts nothing the peer sends, so the server and client are tested without TCP.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <iterator>
#include <variant>
#include <vector>

#include "base/failure.h"

namespace dtl::rendezvous {

inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr uint32_t kMaxFrameBody = 64 * 1024;  ///< bytes after the 4-byte big-endian length
inline constexpr size_t kMaxProof = 64;               ///< an HMAC-SHA256 is 32; room for a larger MAC
inline constexpr size_t kMaxName = 4096;              ///< run_id, host, addr, master_addr, error_file
inline constexpr int32_t kMaxNproc = 65536;
/// A StacksPart's part, a StacksEnd's missing, a HangVerdict's message: what a frame holds after
/// its version, type, id and length. A longer text is cut in the middle.
inline constexpr size_t kMaxStacksText = kMaxFrameBody - 2 - 4 - 4;
using Nonce = std::array<uint8_t, 32>;
using Bytes = std::vector<uint8_t>;

/// Both sides send a heartbeat when they have been quiet for an interval; a peer quiet for
/// `misses` intervals is lost.
struct Liveness {
  std::chrono::milliseconds interval{500};
  int misses = 3;
  std::chrono::milliseconds silence_limit() const { return interval * misses; }
};

struct Hello {  ///< client -> server, first
  std::string run_id;
  Nonce nonce{};
  bool operator==(const Hello&) const = default;
};
struct Challenge {  ///< server -> client; proof empty when the server has no token
  Nonce nonce{};
  Bytes proof;
  bool operator==(const Challenge&) const = default;
};
struct Join {  ///< client -> server, once authenticated
  Bytes proof;              ///< empty when the client has no token
  std::string host;         ///< hostname, for summaries
  std::string addr;         ///< where this node's workers are reached; empty: the peer address
  int32_t nproc = 1;
  int32_t node_rank = -1;   ///< static backend: the node's rank; -1 for dynamic
  int32_t worker_port = 0;  ///< free on this node, for MASTER_PORT if it becomes group rank 0
  int32_t max_restarts = 0;
  int32_t min_nodes = 1, max_nodes = 1;
  uint64_t agent_id = 0;    ///< random per agent process, for deterministic ordering and logs
  bool operator==(const Join&) const = default;
};
struct Refused {  ///< server -> client, then close
  std::string reason;
  bool operator==(const Refused&) const = default;
};
struct Round {  ///< server -> client: a round completed
  uint32_t round = 0;
  int32_t group_rank = 0, group_world_size = 1, base_rank = 0, world_size = 1;
  std::string master_addr;
  int32_t master_port = 0;
  int32_t restart_count = 0;
  bool operator==(const Round&) const = default;
};
struct Heartbeat {
  bool operator==(const Heartbeat&) const = default;
};
using FailureReport = Failure;  ///< on the wire: base/failure.h
struct Failed {  ///< client -> server: local workers failed
  std::vector<FailureReport> failures;
  bool operator==(const Failed&) const = default;
};
struct Stop {  ///< server -> clients: stop your workers
  std::string reason;
  bool operator==(const Stop&) const = default;
};
struct Stopped {  ///< client -> server: my workers are stopped
  bool operator==(const Stopped&) const = default;
};
struct Done {  ///< client -> server: my workers all succeeded
  bool operator==(const Done&) const = default;
};
struct Exit {  ///< server -> clients: leave
  int32_t code = 0;
  std::string reason;
  std::vector<FailureReport> failures;
  bool operator==(const Exit&) const = default;
};
struct Leaving {  ///< client -> server: this node leaves the job now (a signal stopped it), then hangs up
  std::string reason;  ///< "it received SIGTERM"
  bool operator==(const Leaving&) const = default;
};
// Every rank's stack across nodes (the launcher's hang report and `dtlaunch stacks`), or every rank's
// figures (`dtlaunch top`, the metrics): a node asks the server to gather them; the server asks every
// node, relays each node's part (the launcher's own text, opaque here) and says when all are in. A
// hang's parts go to the hosting agent instead, which may answer with a verdict for every node.
enum Gather : uint32_t {
  kGatherStacks = 0,  ///< every rank's stack now, for the asker
  kGatherHang = 1,    ///< every rank's stack for a hang's report, for the hosting agent
  kGatherRanks = 2,   ///< every rank's figures from /proc and NVML, for the asker: no stack is read
};
struct StacksWanted {  ///< client -> server: gather every node's part for me
  uint32_t id = 0;     ///< the asker's, echoed in the parts and the end
  uint32_t kind = kGatherStacks;  ///< a Gather
  bool operator==(const StacksWanted&) const = default;
};
struct StacksAsk {  ///< server -> client: send your part
  uint32_t id = 0;  ///< the server's, to echo in the StacksPart
  uint32_t kind = kGatherStacks;  ///< the StacksWanted's
  bool operator==(const StacksAsk&) const = default;
};
struct StacksPart {  ///< client -> server (the server's id), and server -> asker (the asker's id)
  uint32_t id = 0;
  std::string part;  ///< one node's ranks, as the launcher writes them
  bool operator==(const StacksPart&) const = default;
};
struct StacksEnd {  ///< server -> asker: every node's part came, or the time is up
  uint32_t id = 0;
  std::string missing;  ///< the nodes that did not answer, "" when none
  bool operator==(const StacksEnd&) const = default;
};
struct HangVerdict {  ///< server -> clients: the job hangs; the node running `rank` fails it (--on_hang=fail)
  int32_t rank = 0;
  std::string message;  ///< the failure's message
  bool operator==(const HangVerdict&) const = default;
};
using Message = std::variant<Hello, Challenge, Join, Refused, Round, Heartbeat, Failed, Stop, Stopped, Done, Exit,
                             Leaving, StacksWanted, StacksAsk, StacksPart, StacksEnd, HangVerdict>;

/// Each message's type byte on the wire, and its name for logs, by its index in Message. The codes
/// are the wire's and never change: a new message takes a new code, wherever it sits in Message.
struct WireType {
  uint8_t code;
  const char* name;
};
inline constexpr WireType kWireTypes[] = {
    {1, "hello"},  {2, "challenge"}, {3, "join"},    {4, "refused"}, {5, "round"}, {6, "heartbeat"},
    {7, "failed"}, {8, "stop"},      {9, "stopped"}, {10, "done"},   {11, "exit"}, {12, "leaving"},
    {13, "stacks_wanted"}, {14, "stacks_ask"}, {15, "stacks_part"}, {16, "stacks_end"}, {17, "hang_verdict"},
};
static_assert(std::size(kWireTypes) == std::variant_size_v<Message>);

/// The type byte `m` is sent with.
uint8_t type_code(const Message& m);

/// The whole frame: 4-byte big-endian body length, then version, type, payload. Never over
/// kMaxFrameBody: names are cut at kMaxName, proofs at kMaxProof; reasons and failure messages share
/// what is left (head and tail kept, the middle marked as cut); failures that cannot fit at all are
/// dropped latest-observed first, so the root cause always travels.
Bytes encode(const Message& m);

/// Why a peer's bytes were rejected (one line, for the log). The connection is dropped after one.
struct DecodeError {
  std::string what;
  bool operator==(const DecodeError&) const = default;
};

/// Incremental: feed whatever the socket gave; complete messages come out in order. After an error
/// it stays failed. Never holds more than the declared (bounded) body size, growing as bytes arrive.
class FrameDecoder {
 public:
  /// Appends decoded messages to `out`; returns an error on the first malformed frame.
  std::optional<DecodeError> feed(const uint8_t* data, size_t size, std::vector<Message>& out);
  /// Bytes of an incomplete frame held now (for memory accounting).
  size_t buffered() const { return header_size_ + body_.size(); }

 private:
  std::array<uint8_t, 4> header_{};
  size_t header_size_ = 0;
  uint32_t body_size_ = 0;
  Bytes body_;
  std::optional<DecodeError> error_;
};

/// One frame body (version, type, payload), for tests and the fuzzer.
std::variant<Message, DecodeError> decode_body(const uint8_t* data, size_t size);

/// Name of the message type, for logs ("hello", "join", ...).
const char* message_name(const Message& m);

}  // namespace dtl::rendezvous
