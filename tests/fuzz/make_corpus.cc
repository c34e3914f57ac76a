// Writes the fuzzer's seed corpus: one frame of each message type from encode(), and a stream of
// all of them, so the seeds follow the protocol as it changes.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "rendezvous/protocol.h"

using namespace dtl::rendezvous;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);

  Nonce nonce{};
  for (size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<uint8_t>(i * 7);
  std::vector<FailureReport> failures{
      {3, 1, 4242, -11, 1700000000123456789, 1700000000, "node-b", "<N/A>", "Signal 11 (SIGSEGV) received by PID 4242"},
      {4, 0, 4243, 1, 1700000000223456789, 1700000001, "node-c", "/tmp/logs/0/error.json",
       "Traceback (most recent call last):\nValueError: bad"}};
  std::vector<Message> messages{
      Hello{"job42", nonce},
      Challenge{nonce, Bytes(32, 0xab)},
      Join{Bytes(32, 0x5c), "node-a", "10.0.0.7", 4, 1, 29501, 2, 2, 4, 0x0123456789abcdefULL},
      Refused{"node_rank 1 is already taken"},
      Round{3, 1, 2, 4, 8, "10.0.0.1", 29500, 1},
      Heartbeat{},
      Failed{failures},
      Stop{"worker 3 on node-b failed"},
      Stopped{},
      Done{},
      Exit{139, "no restarts left", failures},
      Leaving{"it received SIGTERM"},
      StacksWanted{7, 1},
      StacksAsk{3, kGatherRanks},
      StacksPart{3, R"({"host": "node-b", "ranks": [{"rank": 3, "stack": ["thread MainThread"]}]})"},
      StacksEnd{7, "node-c (10.0.0.9)"},
      HangVerdict{3, "hang: no rank printed for 600 s (suspect: blocked)"},
  };
  std::ofstream stream(dir / "stream", std::ios::binary);
  for (const auto& m : messages) {
    Bytes frame = encode(m);
    std::ofstream(dir / message_name(m), std::ios::binary)
        .write(reinterpret_cast<const char*>(frame.data()), static_cast<std::streamsize>(frame.size()));
    // The body alone too, for the decode_body half of the target.
    std::ofstream(dir / (std::string(message_name(m)) + ".body"), std::ios::binary)
        .write(reinterpret_cast<const char*>(frame.data() + 4), static_cast<std::streamsize>(frame.size() - 4));
    stream.write(reinterpret_cast<const char*>(frame.data()), static_cast<std::streamsize>(frame.size()));
  }
  return 0;
}
