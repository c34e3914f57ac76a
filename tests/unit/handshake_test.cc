#include <catch2/catch.hpp>

#include "rendezvous/auth.h"
#include "rendezvous/handshake.h"

using namespace dtl::rendezvous;

namespace {

using Phase = ServerHandshake::Phase;

Nonce filled(uint8_t v) {
  Nonce n;
  n.fill(v);
  return n;
}

Credentials with_token(const std::string& token, const std::string& run_id = "job42") {
  return {run_id, token, "--rdzv_token"};
}

Join sample_join() {
  Join j;
  j.host = "node-a";
  j.addr = "10.0.0.7";
  j.nproc = 4;
  j.node_rank = 1;
  j.min_nodes = j.max_nodes = 2;
  j.agent_id = 77;
  return j;
}

template <class T>
const T& only(const std::vector<Message>& sent) {
  REQUIRE(sent.size() == 1);
  REQUIRE(std::holds_alternative<T>(sent[0]));
  return std::get<T>(sent[0]);
}

/// One client meeting one server, nonce by nonce: what each side sent and decided.
struct Meeting {
  ClientStep hello, join;
  ServerStep challenge, verdict;
};

Meeting meet(const Credentials& client, const Credentials& server, Nonce client_nonce = filled(1),
             Nonce server_nonce = filled(2)) {
  Meeting m;
  m.hello = client_start(client, client_nonce);
  m.challenge = server_step(server, {}, only<Hello>(m.hello.send), server_nonce);
  if (m.challenge.send.empty() || !std::holds_alternative<Challenge>(m.challenge.send[0])) return m;
  m.join = client_step(client, m.hello.next, m.challenge.send[0], sample_join());
  if (m.join.send.empty()) return m;
  m.verdict = server_step(server, m.challenge.next, m.join.send[0], filled(9));
  return m;
}

/// The server's state after it challenged a hello with these nonces.
ServerHandshake challenged(Nonce client_nonce = filled(1), Nonce server_nonce = filled(2)) {
  return {Phase::challenged, client_nonce, server_nonce};
}

}  // namespace

TEST_CASE("a client and a server with the same token meet: hello, challenge with proof, join with proof") {
  Meeting m = meet(with_token("s3cret"), with_token("s3cret"));
  CHECK(only<Hello>(m.hello.send) == Hello{"job42", filled(1)});
  const auto& challenge = only<Challenge>(m.challenge.send);
  CHECK(challenge.nonce == filled(2));
  CHECK(challenge.proof == proof("s3cret", "server", "job42", filled(1), filled(2)));
  CHECK(m.challenge.next.phase == Phase::challenged);
  CHECK(m.join.next.phase == ClientHandshake::Phase::joined);
  CHECK(only<Join>(m.join.send).proof == proof("s3cret", "client", "job42", filled(2), filled(1)));
  REQUIRE(m.verdict.joined);
  Join expected = sample_join();
  expected.proof = only<Join>(m.join.send).proof;
  CHECK(*m.verdict.joined == expected);
  CHECK(m.verdict.next.phase == Phase::joined);
  CHECK(m.verdict.send.empty());
  CHECK_FALSE(m.verdict.refused);
  CHECK_FALSE(m.verdict.dropped);
}

TEST_CASE("without a token on either side the nodes meet unauthenticated, with empty proofs") {
  Meeting m = meet(with_token(""), with_token(""));
  CHECK(only<Challenge>(m.challenge.send).proof.empty());
  CHECK(only<Join>(m.join.send).proof.empty());
  REQUIRE(m.verdict.joined);
  CHECK(m.verdict.joined->host == "node-a");
}

TEST_CASE("a hello with another run id is refused without the job's run id, which only the host's log names") {
  Meeting m = meet(with_token("s3cret", "other"), with_token("s3cret"));
  CHECK(m.challenge.refused == "run id 'other' does not match the job's 'job42'");
  CHECK(only<Refused>(m.challenge.send).reason == "run id 'other' does not match the job's run id");
  CHECK(m.challenge.next.phase == Phase::hello);
}

TEST_CASE("a run id that would forge a log line or drive the terminal is escaped in the refusal and the log") {
  Meeting m = meet(with_token("s3cret", "x\ndtlaunch: info: forged\x1b[2J"), with_token("s3cret"));
  CHECK(m.challenge.refused == "run id 'x\\ndtlaunch: info: forged\\e[2J' does not match the job's 'job42'");
  CHECK(only<Refused>(m.challenge.send).reason ==
        "run id 'x\\ndtlaunch: info: forged\\e[2J' does not match the job's run id");
}

TEST_CASE("what a peer that has not proven the token is told names neither the job's run id nor the token's source") {
  Credentials server{"secret-run-7", "s3cret", "--rdzv_token_file /home/alice/.dtl/token"};
  Join join = sample_join();
  for (const Bytes& proof_sent : {Bytes{}, Bytes(32, 7)}) {
    join.proof = proof_sent;
    ServerStep step = server_step(server, challenged(), join, filled(9));
    REQUIRE(step.refused);
    CHECK(step.refused->find("/home/alice") != std::string::npos);  // the host's log says which token
    const std::string told = only<Refused>(step.send).reason;
    CHECK(told.find("/home/alice") == std::string::npos);
    CHECK(told.find("secret-run-7") == std::string::npos);
  }
  ServerStep other = server_step(server, {}, Hello{"guess", filled(1)}, filled(2));
  CHECK(only<Refused>(other.send).reason.find("secret-run-7") == std::string::npos);
}

TEST_CASE("a client whose token differs finds the server's proof wrong and never sends its join") {
  Meeting m = meet(with_token("guess"), with_token("s3cret"));
  CHECK(m.join.refused == "the rendezvous server failed authentication: its --rdzv_token differs");
  CHECK(m.join.send.empty());
  CHECK(m.join.next.phase == ClientHandshake::Phase::hello_sent);
}

TEST_CASE("a join whose proof was made with another token is refused: authentication failed") {
  Join join = sample_join();
  join.proof = proof("guess", "client", "job42", filled(2), filled(1));
  ServerStep step = server_step(with_token("s3cret"), challenged(), join, filled(9));
  CHECK(step.refused == "authentication failed: wrong --rdzv_token");
  CHECK(only<Refused>(step.send).reason == "authentication failed: wrong token");
  CHECK_FALSE(step.joined);
}

TEST_CASE("a node without a token is refused by a server that has one: authentication required") {
  Meeting m = meet(with_token(""), with_token("s3cret"));
  CHECK(only<Join>(m.join.send).proof.empty());  // without a token the client cannot check the server
  CHECK(m.verdict.refused == "authentication required: this node has no --rdzv_token");
  CHECK(only<Refused>(m.verdict.send).reason == "authentication required: this node has no token");
  CHECK_FALSE(m.verdict.joined);
}

TEST_CASE("a node with a token refuses a server without one, and such a server refuses a proof it cannot check") {
  Meeting m = meet(with_token("s3cret"), with_token(""));
  CHECK(m.join.refused == "the rendezvous server has no token but this node has one");
  CHECK(m.join.send.empty());

  Join join = sample_join();
  join.proof = proof("s3cret", "client", "job42", filled(2), filled(1));
  ServerStep step = server_step(with_token(""), challenged(), join, filled(9));
  CHECK(step.refused == "this node has a --rdzv_token but the rendezvous has none");
  CHECK(only<Refused>(step.send).reason == "this node has a token but the rendezvous has none");
}

TEST_CASE("a join recorded on one connection is refused on another (replay)") {
  Meeting first = meet(with_token("s3cret"), with_token("s3cret"));
  REQUIRE(first.verdict.joined);
  const Message recorded = first.join.send[0];
  // Same hello (same client nonce), but the server's fresh nonce differs: the proof does not hold.
  ServerStep step = server_step(with_token("s3cret"), challenged(filled(1), filled(3)), recorded, filled(9));
  CHECK(step.refused == "authentication failed: wrong --rdzv_token");
  CHECK_FALSE(step.joined);
}

TEST_CASE("the server's proof sent back as a join's is refused (reflection)") {
  Join join = sample_join();
  join.proof = proof("s3cret", "server", "job42", filled(1), filled(2));
  ServerStep step = server_step(with_token("s3cret"), challenged(), join, filled(9));
  CHECK(step.refused == "authentication failed: wrong --rdzv_token");
}

TEST_CASE("a challenge recorded from another connection fails the server's proof (a server impostor)") {
  Meeting first = meet(with_token("s3cret"), with_token("s3cret"), filled(1), filled(2));
  ClientStep hello = client_start(with_token("s3cret"), filled(5));
  ClientStep step = client_step(with_token("s3cret"), hello.next, first.challenge.send[0], sample_join());
  CHECK(step.refused == "the rendezvous server failed authentication: its --rdzv_token differs");
  CHECK(step.send.empty());
}

TEST_CASE("a peer that skips the hello, or says it twice, is dropped without a word") {
  ServerStep step = server_step(with_token("s3cret"), {}, sample_join(), filled(2));
  CHECK(step.dropped == "expected hello, got join");
  CHECK(step.send.empty());
  step = server_step(with_token("s3cret"), challenged(), Hello{"job42", filled(1)}, filled(2));
  CHECK(step.dropped == "expected join, got hello");
  CHECK(step.send.empty());
  step = server_step(with_token("s3cret"), challenged(), Heartbeat{}, filled(2));
  CHECK(step.dropped == "expected join, got heartbeat");
}

TEST_CASE("a hello in another protocol version is refused by the decoder before the handshake sees it") {
  Bytes frame = encode(Hello{"job42", filled(1)});
  frame[4] = kProtocolVersion + 1;  // the version byte follows the 4-byte length
  FrameDecoder decoder;
  std::vector<Message> out;
  auto error = decoder.feed(frame.data(), frame.size(), out);
  REQUIRE(error);
  CHECK(error->what == "unsupported protocol version " + std::to_string(kProtocolVersion + 1));
  CHECK(out.empty());
}

TEST_CASE("a server names the likely cause when a peer hangs up after the challenge, and only then") {
  CHECK(server_hangup(with_token("s3cret"), challenged()) ==
        "hung up after the challenge: its --rdzv_token differs or is missing (or it was stopped)");
  CHECK_FALSE(server_hangup(with_token("s3cret"), {}));
  CHECK_FALSE(server_hangup(with_token("s3cret"), {Phase::joined, filled(1), filled(2)}));
}

TEST_CASE("a refusal ends the client in any phase; once joined, the session's messages pass through") {
  ClientStep hello = client_start(with_token("s3cret"), filled(1));
  CHECK(client_step(with_token("s3cret"), hello.next, Refused{"no"}, sample_join()).refused == "no");
  ClientStep step = client_step(with_token("s3cret"), hello.next, Round{}, sample_join());
  CHECK(step.failed == "unexpected round from the rendezvous server");
  CHECK_FALSE(step.forward);

  const ClientHandshake joined{ClientHandshake::Phase::joined, filled(1)};
  CHECK(client_step(with_token("s3cret"), joined, Refused{"--node_rank=1 is already taken"}, sample_join()).refused ==
        "--node_rank=1 is already taken");
  for (const Message& m : {Message{Round{}}, Message{Stop{}}, Message{Exit{}}, Message{Heartbeat{}}}) {
    step = client_step(with_token("s3cret"), joined, m, sample_join());
    CHECK(step.forward);
    CHECK(step.send.empty());
  }
  // Whoever answered (the server's proof is not checked yet) cannot write into this node's console.
  CHECK(client_step(with_token("s3cret"), hello.next, Refused{"no\n\x1b[2J"}, sample_join()).refused == "no\\n\\e[2J");
  // A second challenge would make a naive client join twice.
  step = client_step(with_token("s3cret"), joined, Challenge{filled(2), {}}, sample_join());
  CHECK(step.failed == "unexpected challenge from the rendezvous server");
  CHECK(step.send.empty());
}

TEST_CASE("without the caller's name for it, messages call the token a token") {
  Credentials server{"job42", "s3cret"};
  CHECK(server_step(server, challenged(), sample_join(), filled(9)).refused ==
        "authentication required: this node has no token");
  CHECK(server_hangup(server, challenged()) ==
        "hung up after the challenge: its token differs or is missing (or it was stopped)");
}
