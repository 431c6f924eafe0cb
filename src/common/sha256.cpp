#include "common/sha256.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/strings.h"

namespace berth {

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

std::string Sha256Hex(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.Finish();
}

std::string HmacSha256Hex(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &size);
  return HexEncode(std::string_view(reinterpret_cast<const char*>(mac), size));
}

}  // namespace berth
