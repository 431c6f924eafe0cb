#include "net/ws_frames.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

namespace berth::net {

void AppendWsFrame(std::string* out, WsOpcode opcode, std::string_view payload, bool fin,
                   const std::optional<std::array<uint8_t, 4>>& mask) {
  out->push_back(static_cast<char>((fin ? 0x80 : 0x00) | static_cast<uint8_t>(opcode)));
  const uint8_t mask_bit = mask ? 0x80 : 0x00;
  const uint64_t n = payload.size();
  if (n < 126) {
    out->push_back(static_cast<char>(mask_bit | n));
  } else if (n <= 0xFFFF) {
    out->push_back(static_cast<char>(mask_bit | 126));
    out->push_back(static_cast<char>(n >> 8));
    out->push_back(static_cast<char>(n & 0xFF));
  } else {
    out->push_back(static_cast<char>(mask_bit | 127));
    for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(n >> shift));
  }
  if (!mask) {
    out->append(payload);
    return;
  }
  out->append(reinterpret_cast<const char*>(mask->data()), 4);
  const size_t start = out->size();
  out->append(payload);
  char* p = out->data() + start;
  for (size_t i = 0; i < payload.size(); ++i) p[i] = static_cast<char>(p[i] ^ (*mask)[i % 4]);
}

Result<std::optional<WsFrame>> TakeWsFrame(std::string_view in, size_t max_payload, size_t* used) {
  *used = 0;
  if (in.size() < 2) return std::optional<WsFrame>();
  const auto* b = reinterpret_cast<const uint8_t*>(in.data());
  if (b[0] & 0x70) return Status::Invalid("WebSocket frame with reserved bits set");
  WsFrame frame;
  frame.fin = (b[0] & 0x80) != 0;
  const uint8_t op = b[0] & 0x0F;
  if (op > 0x2 && op < 0x8) return Status::Invalid("WebSocket frame with reserved opcode");
  if (op > 0xA) return Status::Invalid("WebSocket frame with reserved opcode");
  frame.opcode = static_cast<WsOpcode>(op);
  const bool control = op >= 0x8;
  const bool masked = (b[1] & 0x80) != 0;
  uint64_t n = b[1] & 0x7F;
  size_t header = 2;
  if (n == 126) {
    if (in.size() < 4) return std::optional<WsFrame>();
    n = (uint64_t{b[2]} << 8) | b[3];
    header = 4;
  } else if (n == 127) {
    if (in.size() < 10) return std::optional<WsFrame>();
    n = 0;
    for (int i = 0; i < 8; ++i) n = (n << 8) | b[2 + i];
    header = 10;
  }
  if (control && (!frame.fin || n > 125)) {
    return Status::Invalid("WebSocket control frame fragmented or over 125 bytes");
  }
  if (n > max_payload) {
    return Status::TooLarge("WebSocket message of " + std::to_string(n) +
                            " bytes, over the limit of " + std::to_string(max_payload));
  }
  const size_t key_bytes = masked ? 4 : 0;
  if (in.size() < header + key_bytes + n) return std::optional<WsFrame>();
  frame.payload.assign(in.substr(header + key_bytes, n));
  if (masked) {
    const uint8_t* key = b + header;
    for (size_t i = 0; i < frame.payload.size(); ++i) {
      frame.payload[i] = static_cast<char>(frame.payload[i] ^ key[i % 4]);
    }
  }
  *used = header + key_bytes + n;
  return std::optional<WsFrame>(std::move(frame));
}

namespace {
std::string Base64(const unsigned char* data, size_t n) {
  std::string out(4 * ((n + 2) / 3), '\0');
  int len =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), data, static_cast<int>(n));
  out.resize(static_cast<size_t>(len));
  return out;
}
}  // namespace

std::string WsAcceptKey(std::string_view key) {
  std::string text(key);
  text += "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";  // RFC 6455's GUID
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  return Base64(digest, sizeof(digest));
}

std::string NewWsKey() {
  unsigned char raw[16];
  RAND_bytes(raw, sizeof(raw));
  return Base64(raw, sizeof(raw));
}

std::string WsClosePayload(int code, std::string_view reason) {
  std::string out;
  out.push_back(static_cast<char>((code >> 8) & 0xFF));
  out.push_back(static_cast<char>(code & 0xFF));
  out.append(reason.substr(0, 123));
  return out;
}

}  // namespace berth::net
