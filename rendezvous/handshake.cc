#include "rendezvous/handshake.h"

#include "rendezvous/auth.h"
#include "rendezvous/printable.h"
#include "base/printable.h"

namespace dtl::rendezvous {

namespace {

/// `told` goes to a peer that has not proven the token, so it names nothing of the job (its run
/// id, the token's source); `logged` is the host's own line, which may.
ServerStep refuse(const ServerHandshake& state, std::string told, std::string logged) {
  ServerStep step;
  step.next = state;
  step.send.push_back(Refused{std::move(told)});
  step.refused = std::move(logged);
  return step;
}

ServerStep drop(const ServerHandshake& state, std::string why) {
  ServerStep step;
  step.next = state;
  step.dropped = std::move(why);
  return step;
}

ClientStep refused(const ClientHandshake& state, std::string why) {
  ClientStep step;
  step.next = state;
  step.refused = std::move(why);
  return step;
}

ClientStep failed(const ClientHandshake& state, const Message& m) {
  ClientStep step;
  step.next = state;
  step.failed = std::string("unexpected ") + message_name(m) + " from the rendezvous server";
  return step;
}

}  // namespace

ServerStep server_step(const Credentials& server, const ServerHandshake& state, const Message& m,
                       const Nonce& fresh) {
  using Phase = ServerHandshake::Phase;
  ServerStep step;
  step.next = state;
  if (state.phase == Phase::hello) {
    auto* hello = std::get_if<Hello>(&m);
    if (!hello) return drop(state, std::string("expected hello, got ") + message_name(m));
    if (hello->run_id != server.run_id) {
      const std::string theirs = "run id '" + printable(hello->run_id) + "' does not match the job's";
      return refuse(state, theirs + " run id", theirs + " '" + server.run_id + "'");
    }
    step.next = {Phase::challenged, hello->nonce, fresh};
    step.send.push_back(Challenge{fresh, proof(server.token, "server", server.run_id, hello->nonce, fresh)});
    return step;
  }
  if (state.phase == Phase::joined) return drop(state, std::string("unexpected ") + message_name(m));

  auto* join = std::get_if<Join>(&m);
  if (!join) return drop(state, std::string("expected join, got ") + message_name(m));
  const std::string& name = server.token_name;
  if (server.token.empty() && !join->proof.empty()) {
    return refuse(state, "this node has a token but the rendezvous has none",
                  "this node has a " + name + " but the rendezvous has none");
  }
  if (!server.token.empty() &&
      !proof_matches(proof(server.token, "client", server.run_id, state.server_nonce, state.client_nonce),
                     join->proof)) {
    return join->proof.empty()
               ? refuse(state, "authentication required: this node has no token",
                        "authentication required: this node has no " + name)
               : refuse(state, "authentication failed: wrong token", "authentication failed: wrong " + name);
  }
  step.next.phase = Phase::joined;
  step.joined = *join;
  return step;
}

std::optional<std::string> server_hangup(const Credentials& server, const ServerHandshake& state) {
  if (state.phase != ServerHandshake::Phase::challenged) return std::nullopt;
  return "hung up after the challenge: its " + server.token_name + " differs or is missing (or it was stopped)";
}

ClientStep client_start(const Credentials& client, const Nonce& nonce) {
  ClientStep step;
  step.next = {ClientHandshake::Phase::hello_sent, nonce};
  step.send.push_back(Hello{client.run_id, nonce});
  return step;
}

ClientStep client_step(const Credentials& client, const ClientHandshake& state, const Message& m, const Join& join) {
  // Before the server's proof, anyone may have answered: its reason is printed made harmless.
  if (auto* refusal = std::get_if<Refused>(&m)) return refused(state, printable(refusal->reason, kMaxRefusal));
  const bool session = std::holds_alternative<Round>(m) || std::holds_alternative<Stop>(m) ||
                       std::holds_alternative<Exit>(m) || std::holds_alternative<Heartbeat>(m) ||
                       std::holds_alternative<StacksAsk>(m) || std::holds_alternative<StacksPart>(m) ||
                       std::holds_alternative<StacksEnd>(m) || std::holds_alternative<HangVerdict>(m);
  ClientStep step;
  step.next = state;
  if (state.phase == ClientHandshake::Phase::joined) {
    if (!session) return failed(state, m);
    step.forward = true;
    return step;
  }
  auto* challenge = std::get_if<Challenge>(&m);
  if (!challenge) return failed(state, m);
  if (!client.token.empty()) {
    if (challenge->proof.empty()) return refused(state, "the rendezvous server has no token but this node has one");
    if (!proof_matches(proof(client.token, "server", client.run_id, state.nonce, challenge->nonce), challenge->proof)) {
      return refused(state, "the rendezvous server failed authentication: its " + client.token_name + " differs");
    }
  }
  Join signed_join = join;
  signed_join.proof = proof(client.token, "client", client.run_id, challenge->nonce, state.nonce);
  step.next.phase = ClientHandshake::Phase::joined;
  step.send.push_back(std::move(signed_join));
  return step;
}

}  // namespace dtl::rendezvous
