// SHA-256 through OpenSSL: the one helper for every digest berth computes — uploaded content's
// names (upload/digest.h), image-tag cache keys, token hashes, certificate fingerprints and
// submission fingerprints — and HMAC-SHA256, which signs webhooks. A digest is 64 lowercase hex
// characters.
//
// Thread-safety: the functions are thread-safe; one Sha256 object is used by one thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace berth {

// The digest of `data`, in hex.
std::string Sha256Hex(std::string_view data);

// HMAC-SHA256 of `data` under `key` (RFC 2104), in hex: what signs a webhook's body
// (docs/notifications.md).
std::string HmacSha256Hex(std::string_view key, std::string_view data);

// A digest computed over bytes given in pieces.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::string_view data);
  // The digest of everything given, in hex; the object is spent.
  std::string Finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace berth
