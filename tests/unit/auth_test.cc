#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "rendezvous/auth.h"

using namespace dtl::rendezvous;
using dtl::Error;

namespace {

std::string hex(const Bytes& b) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t c : b) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

Bytes hmac_of(const std::string& key, const std::string& data) {
  return hmac_sha256(key, reinterpret_cast<const uint8_t*>(data.data()), data.size());
}

Nonce filled(uint8_t v) {
  Nonce n;
  n.fill(v);
  return n;
}

// A token file in a fresh temporary directory, removed at the end of the test.
struct TokenFile {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("dtl_auth_test_" + std::to_string(::getpid()));
  std::filesystem::path path = dir / "token";
  TokenFile(const std::string& contents, mode_t mode) {
    std::filesystem::create_directories(dir);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
    ::chmod(path.c_str(), mode);
  }
  ~TokenFile() { std::filesystem::remove_all(dir); }
};

Token token_of(const dtl::Result<Token>& r) {
  if (!r) FAIL("unexpected token error: " << r.error().message);
  return *r;
}

const std::string kSafer = "--rdzv_token_file or DTLAUNCH_RDZV_TOKEN";

/// No token, only the file at `path`, named as the launcher names it.
TokenSources from_file(const std::string& path) { return {std::nullopt, Given{path, "--rdzv_token_file", true}, kSafer}; }

std::string error_of(const dtl::Result<Token>& r) {
  if (!r) return r.error().message;
  return "(token '" + r->value + "')";
}

}  // namespace

TEST_CASE("hmac_sha256 matches the RFC 4231 test vectors") {
  CHECK(hex(hmac_of("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(hex(hmac_of(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  CHECK(hex(hmac_of("", "")) == "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

TEST_CASE("a proof is the HMAC of label, run id and both nonces, in that order") {
  Nonce a = filled(1), b = filled(2);
  std::string data = "server" + std::string("job42") + std::string(32, '\1') + std::string(32, '\2');
  CHECK(proof("s3cret", "server", "job42", a, b) == hmac_of("s3cret", data));
  CHECK(proof("s3cret", "server", "job42", a, b).size() == 32);
}

TEST_CASE("proofs differ by label, nonce order, run id and token") {
  Nonce a = filled(1), b = filled(2);
  Bytes base = proof("s3cret", "server", "job42", a, b);
  CHECK(proof("s3cret", "server", "job42", a, b) == base);
  CHECK(proof("s3cret", "client", "job42", a, b) != base);
  CHECK(proof("s3cret", "server", "job42", b, a) != base);
  CHECK(proof("s3cret", "server", "job43", a, b) != base);
  CHECK(proof("s3creT", "server", "job42", a, b) != base);
  CHECK(proof("s3cret", "server", "job42", a, filled(3)) != base);
}

TEST_CASE("without a token there is no proof") { CHECK(proof("", "client", "job42", filled(1), filled(2)).empty()); }

TEST_CASE("proof_matches compares whole proofs and fails closed") {
  Bytes p = proof("s3cret", "client", "job42", filled(1), filled(2));
  CHECK(proof_matches(p, p));
  Bytes first = p, last = p;
  first.front() ^= 1;
  last.back() ^= 0x80;
  CHECK_FALSE(proof_matches(p, first));
  CHECK_FALSE(proof_matches(p, last));
  CHECK_FALSE(proof_matches(p, Bytes(p.begin(), p.end() - 1)));  // a prefix is not enough
  Bytes longer = p;
  longer.push_back(0);
  CHECK_FALSE(proof_matches(p, longer));
  CHECK_FALSE(proof_matches(p, {}));
  CHECK_FALSE(proof_matches({}, {}));  // no expected proof: nothing can match
  CHECK_FALSE(proof_matches({}, p));
}

TEST_CASE("nonces are random") {
  Nonce a = random_nonce(), b = random_nonce();
  CHECK(a != b);
  CHECK(a != Nonce{});
}

TEST_CASE("a token given wins over the token file, and only one typed on the command line is warned about") {
  TokenFile file("from-file\n", 0600);
  const Given path{file.path.string(), "--rdzv_token_file", true};
  Token t = token_of(read_token({Given{"from-flag", "--rdzv_token", true}, path, kSafer}));
  CHECK(t.value == "from-flag");
  CHECK(t.source == "--rdzv_token");
  CHECK_THAT(t.warning, Catch::Contains("visible to every user"));
  CHECK(t.warning == "--rdzv_token on the command line is visible to every user of this machine (ps); "
                     "prefer --rdzv_token_file or DTLAUNCH_RDZV_TOKEN");

  t = token_of(read_token({Given{"from-env", "DTLAUNCH_RDZV_TOKEN", false}, path, kSafer}));
  CHECK(t.value == "from-env");
  CHECK(t.source == "DTLAUNCH_RDZV_TOKEN");
  CHECK(t.warning.empty());

  t = token_of(read_token({Given{"from-config", "cfg.yaml:3:13: rdzv_token", false}, path, kSafer}));
  CHECK(t.source == "cfg.yaml:3:13: rdzv_token");
  CHECK(t.warning.empty());

  t = token_of(read_token({std::nullopt, path, kSafer}));
  CHECK(t.value == "from-file");
  CHECK(t.source == "--rdzv_token_file " + file.path.string());
  CHECK(t.warning.empty());
}

TEST_CASE("no token anywhere means an unauthenticated rendezvous, not an error") {
  Token t = token_of(read_token({}));
  CHECK(t.value.empty());
  CHECK(t.source.empty());
}

TEST_CASE("a token file keeps inner whitespace and loses only its trailing newlines") {
  TokenFile file("  tok en\r\n\n", 0400);
  CHECK(token_of(read_token(from_file(file.path.string()))).value == "  tok en");
}

TEST_CASE("a token file others can read is used with a warning") {
  TokenFile file("tok\n", 0644);
  Token t = token_of(read_token(from_file(file.path.string())));
  CHECK(t.value == "tok");
  CHECK(t.warning == "token file " + file.path.string() + " is readable by group or others (mode 0644); chmod 600 it");
}

TEST_CASE("empty, missing, oversized and unreadable tokens are errors") {
  CHECK(error_of(read_token({Given{"", "--rdzv_token", true}, std::nullopt, kSafer})) == "--rdzv_token is empty");
  CHECK(error_of(read_token({Given{"", "DTLAUNCH_RDZV_TOKEN", false}, std::nullopt, kSafer})) ==
        "DTLAUNCH_RDZV_TOKEN is set but empty");
  CHECK(error_of(read_token(from_file("/nonexistent/token"))) ==
        "cannot read token file /nonexistent/token: No such file or directory");
  {
    TokenFile empty("\n", 0600);
    CHECK(error_of(read_token(from_file(empty.path.string()))) == "token file " + empty.path.string() + " is empty");
  }
  {
    TokenFile big(std::string(5000, 'k'), 0600);
    CHECK(error_of(read_token(from_file(big.path.string()))) ==
          "token file " + big.path.string() + " is larger than 4096 bytes");
  }
  {
    TokenFile file("x", 0600);
    CHECK(error_of(read_token(from_file(file.dir.string()))) ==
          "cannot read token file " + file.dir.string() + ": Is a directory");
  }
}
