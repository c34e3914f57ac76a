// Challenge-response with a shared token (HMAC-SHA256, OpenSSL's libcrypto): each side proves it
// knows the token without ever sending it, and a node of another run id cannot join.
#pragma once

#include <optional>
#include <string>

#include "base/error.h"
#include "rendezvous/protocol.h"

namespace dtl::rendezvous {

/// Fresh randomness for each connection, so a recorded proof is worthless later.
Nonce random_nonce();

/// HMAC-SHA256 (32 bytes); exposed so tests can check it against RFC 4231.
Bytes hmac_sha256(const std::string& key, const uint8_t* data, size_t size);

/// HMAC-SHA256(token, label || run_id || first || second); label is "server" or "client" so a proof
/// can't be replayed the other way. Empty when the token is empty (no token: nothing to prove).
Bytes proof(const std::string& token, const char* label, const std::string& run_id, const Nonce& first,
            const Nonce& second);

/// Constant time (CRYPTO_memcmp). False on size mismatch and when `expected` is empty, so a side
/// without a token must skip the check rather than call this (fail closed).
bool proof_matches(const Bytes& expected, const Bytes& got);

/// A setting as the caller got it, and what the caller calls it: rendezvous/ names no flag, so
/// its messages use `called` ("--rdzv_token", "PET_RDZV_TOKEN", "cfg.yaml:3:1: rdzv_token").
struct Given {
  std::string value;
  std::string called;
  bool on_command_line = false;  ///< typed as a flag: visible to every user of this machine (ps)
};

/// The token in use and where it came from, for the log line that says so.
struct Token {
  std::string value;    ///< empty: no token, the rendezvous is unauthenticated
  std::string source;   ///< what the token was called, or the file's name and path; empty if none
  std::string warning;  ///< one line when the token is exposed (on the command line, a file others read)
};

/// Where a token can come from. `safer` names the ways to give it unseen, for the warning about a
/// token on the command line ("--rdzv_token_file or DTLAUNCH_RDZV_TOKEN").
struct TokenSources {
  std::optional<Given> token;  ///< the token itself, when given
  std::optional<Given> file;   ///< a file that holds it, when given (its value is the path)
  std::string safer;
};

/// The token itself, else the file's contents (trailing newlines stripped). A source that is given
/// but empty (a token, or a file's path) is an error naming it, not a quiet "no token"; only a
/// token on the command line is warned about.
Result<Token> read_token(const TokenSources& sources);

}  // namespace dtl::rendezvous
