// SHA-256 digests through OpenSSL's EVP interface (upload/digest.h).
#include "upload/digest.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/strings.h"

namespace berth::upload {

struct Sha256::State {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~State() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : state_(std::make_unique<State>()) {
  EVP_DigestInit_ex(state_->ctx, EVP_sha256(), nullptr);
}

Sha256::~Sha256() = default;

void Sha256::Update(std::string_view data) {
  EVP_DigestUpdate(state_->ctx, data.data(), data.size());
}

std::string Sha256::Finish() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(state_->ctx, out, &n);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(out), n));
}

bool IsDigest(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string Sha256Hex(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.Finish();
}

Result<std::pair<std::string, int64_t>> Sha256OfFd(int fd, const std::string& what) {
  Sha256 h;
  std::vector<char> buf(1 << 20);
  int64_t total = 0;
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Internal("cannot read " + what + ": " + strerror(errno));
    if (n == 0) break;
    h.Update(std::string_view(buf.data(), static_cast<size_t>(n)));
    total += n;
  }
  return std::make_pair(h.Finish(), total);
}

}  // namespace berth::upload
