#include "rendezvous/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "base/posix.h"

namespace dtl::rendezvous {

namespace {

constexpr size_t kMaxTokenFile = 4096;

std::string octal_mode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

Nonce random_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) == 1) return n;
  // OpenSSL's generator failed to seed: the kernel's is what it would have used.
  size_t got = 0;
  while (got < n.size()) {
    ssize_t r = getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw std::runtime_error("no randomness for a rendezvous nonce: " + std::string(std::strerror(errno)));
    got += static_cast<size_t>(r);
  }
  return n;
}

Bytes hmac_sha256(const std::string& key, const uint8_t* data, size_t size) {
  Bytes out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  static const uint8_t kEmpty = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), size ? data : &kEmpty, size, out.data(), &len);
  out.resize(len);
  return out;
}

Bytes proof(const std::string& token, const char* label, const std::string& run_id, const Nonce& first,
            const Nonce& second) {
  if (token.empty()) return {};
  Bytes data(label, label + std::strlen(label));
  data.insert(data.end(), run_id.begin(), run_id.end());
  data.insert(data.end(), first.begin(), first.end());
  data.insert(data.end(), second.begin(), second.end());
  return hmac_sha256(token, data.data(), data.size());
}

bool proof_matches(const Bytes& expected, const Bytes& got) {
  if (expected.empty() || expected.size() != got.size()) return false;
  return CRYPTO_memcmp(expected.data(), got.data(), expected.size()) == 0;
}

namespace {

/// The token in a file (trailing newlines stripped), with a warning when others may read it.
Result<Token> read_token_file(const Given& file) {
  const std::string& path = file.value;
  auto failure = [&](int err) { return fail("cannot read token file " + path + ": " + std::strerror(err)); };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return failure(errno);
  struct stat st {};
  posix::ReadAll read;
  if (::fstat(fd, &st) != 0) {
    read.error = errno;
  } else {
    read = posix::read_all(fd, kMaxTokenFile);
  }
  ::close(fd);
  if (read.error) return failure(read.error);
  if (read.too_large) {
    return fail("token file " + path + " is larger than " + std::to_string(kMaxTokenFile) + " bytes");
  }
  std::string& value = read.text;
  while (!value.empty() && (value.back() == '\n' || value.back() == '\r')) value.pop_back();
  if (value.empty()) return fail("token file " + path + " is empty");

  Token token{value, file.called + " " + path, ""};
  if (st.st_mode & (S_IRGRP | S_IROTH)) {
    token.warning = "token file " + path + " is readable by group or others (mode " + octal_mode(st.st_mode) +
                    "); chmod 600 it";
  }
  return token;
}

/// The failure "--rdzv_token is empty", "PET_RDZV_TOKEN is set but empty".
tl::unexpected<Error> empty(const Given& given) {
  return fail(given.called + (given.on_command_line ? " is empty" : " is set but empty"));
}

}  // namespace

Result<Token> read_token(const TokenSources& sources) {
  if (const auto& given = sources.token) {
    if (given->value.empty()) return empty(*given);
    Token token{given->value, given->called, ""};
    if (given->on_command_line) {
      token.warning = given->called + " on the command line is visible to every user of this machine (ps)" +
                      (sources.safer.empty() ? "" : "; prefer " + sources.safer);
    }
    return token;
  }
  if (!sources.file) return Token{};
  if (sources.file->value.empty()) return empty(*sources.file);
  return read_token_file(*sources.file);
}

}  // namespace dtl::rendezvous
