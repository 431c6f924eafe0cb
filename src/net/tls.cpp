#include "net/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <memory>
#include <tuple>

#include "common/files.h"
#include "common/sha256.h"
#include "common/strings.h"

namespace berth::net {

namespace {

template <auto Free>
struct Deleter {
  template <class T>
  void operator()(T* p) const {
    Free(p);
  }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509_free>>;
using BioPtr = std::unique_ptr<BIO, Deleter<BIO_free_all>>;
using BnPtr = std::unique_ptr<BIGNUM, Deleter<BN_free>>;
using NamePtr = std::unique_ptr<X509_NAME, Deleter<X509_NAME_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Deleter<X509_EXTENSION_free>>;

Status SslFailure(const std::string& what) {
  std::string why = OpenSslErrors();
  return Status::Internal(what + ": " + (why.empty() ? "unknown OpenSSL error" : why));
}

bool IsDnsName(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '*')
      return false;
  }
  return true;
}

Result<std::string> BioContents(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  if (n < 0) return SslFailure("reading a memory BIO");
  return std::string(data, static_cast<size_t>(n));
}

Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const std::string& value) {
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    return SslFailure(std::string("adding the ") + OBJ_nid2sn(nid) + " extension '" + value + "'");
  return Status::Ok();
}

}  // namespace

Status EnsureSelfSignedCertificate(const std::string& cert_path, const std::string& key_path,
                                   const std::vector<std::string>& names_in) {
  std::error_code ec;
  if (std::filesystem::exists(cert_path, ec) && std::filesystem::exists(key_path, ec))
    return Status::Ok();
  std::vector<std::string> names = names_in;
  if (names.empty()) names = {"localhost", "127.0.0.1", "::1"};
  std::string san;
  for (const auto& name : names) {
    std::string entry;
    if (IsIpLiteral(name)) {
      entry = "IP:" + name;
    } else if (IsDnsName(name)) {
      entry = "DNS:" + name;
    } else {
      return Status::Invalid("'" + name +
                             "' is neither an IP address nor a DNS name, so it cannot be a name "
                             "of the server's TLS certificate");
    }
    san += (san.empty() ? "" : ",") + entry;
  }

  ERR_clear_error();
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return SslFailure("generating an EC P-256 key");

  X509Ptr cert(X509_new());
  if (!cert) return SslFailure("allocating a certificate");
  X509_set_version(cert.get(), X509_VERSION_3);
  BnPtr serial(BN_new());
  // 127 random bits: positive, unique with overwhelming odds, within the 20 octets RFC 5280 allows.
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get()))) {
    return SslFailure("drawing a serial number");
  }
  // A minute of slack for clients whose clocks run a little behind.
  constexpr long kTenYears = 10L * 365 * 24 * 3600 + 3 * 24 * 3600;
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), kTenYears)) {
    return SslFailure("setting the validity period");
  }
  NamePtr subject(X509_NAME_new());
  if (!subject ||
      X509_NAME_add_entry_by_txt(subject.get(), "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>("berth"), -1, -1, 0) != 1 ||
      X509_set_subject_name(cert.get(), subject.get()) != 1 ||
      X509_set_issuer_name(cert.get(), subject.get()) != 1 ||
      X509_set_pubkey(cert.get(), key.get()) != 1) {
    return SslFailure("setting the certificate's names and key");
  }
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  // No keyUsage: a self-signed leaf that is also its own trust anchor (a client given it as
  // ca_file) must be allowed to have signed itself.
  BERTH_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_basic_constraints, "critical,CA:FALSE"));
  BERTH_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_ext_key_usage, "serverAuth"));
  BERTH_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash"));
  BERTH_RETURN_IF_ERROR(AddExtension(cert.get(), &ctx, NID_subject_alt_name, san));
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0)
    return SslFailure("signing the certificate");

  BioPtr key_bio(BIO_new(BIO_s_mem()));
  BioPtr cert_bio(BIO_new(BIO_s_mem()));
  if (!key_bio || !cert_bio ||
      PEM_write_bio_PrivateKey(key_bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) !=
          1 ||
      PEM_write_bio_X509(cert_bio.get(), cert.get()) != 1) {
    return SslFailure("encoding the key and certificate as PEM");
  }
  auto key_pem = BioContents(key_bio.get());
  if (!key_pem.ok()) return key_pem.status();
  auto cert_pem = BioContents(cert_bio.get());
  if (!cert_pem.ok()) return cert_pem.status();

  for (const auto& path : {cert_path, key_path}) {
    auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) {
      std::filesystem::create_directories(parent, ec);
      if (ec) return Status::Internal("cannot create " + parent.string() + ": " + ec.message());
    }
  }
  // The key first: a certificate on disk without its key would be kept by the next call.
  for (const auto& [path, pem, mode] :
       {std::tuple{key_path, *key_pem, 0600}, std::tuple{cert_path, *cert_pem, 0644}}) {
    if (!WriteFileAtomic(path, pem, /*sync=*/true, static_cast<mode_t>(mode))) {
      return Status::Internal("cannot write " + path + ": " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

Result<std::string> CertificateFingerprint(const std::string& cert_path) {
  ERR_clear_error();
  BioPtr bio(BIO_new_file(cert_path.c_str(), "r"));
  if (!bio) {
    ERR_clear_error();
    return Status::NotFound("cannot read the certificate " + cert_path + ": " +
                            std::strerror(errno));
  }
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) {
    std::string why = OpenSslErrors();
    return Status::Invalid(cert_path + " holds no PEM certificate" +
                           (why.empty() ? "" : " (" + why + ")"));
  }
  unsigned char* der = nullptr;
  int n = i2d_X509(cert.get(), &der);
  if (n <= 0) return SslFailure("encoding the certificate " + cert_path);
  std::string out = FingerprintOfDer(std::string_view(reinterpret_cast<char*>(der), n));
  OPENSSL_free(der);
  return out;
}

std::string FingerprintOfDer(std::string_view der) { return Sha256Digest(der); }

std::string Sha256Digest(std::string_view data) { return "sha256:" + Sha256Hex(data); }

std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

std::string NormalizeFingerprint(std::string fingerprint) {
  std::string s;
  for (char c : fingerprint) {
    if (!std::isspace(static_cast<unsigned char>(c)))
      s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  for (const std::string prefix : {"sha256fingerprint=", "sha256:", "sha256="}) {
    if (s.rfind(prefix, 0) == 0) {
      s = s.substr(prefix.size());
      break;
    }
  }
  std::string hex;
  for (char c : s) {
    if (c == ':') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) return "";
    hex += c;
  }
  if (hex.size() != 2 * SHA256_DIGEST_LENGTH) return "";
  return "sha256:" + hex;
}

bool FingerprintsEqual(const std::string& a, const std::string& b) {
  std::string na = NormalizeFingerprint(a);
  return !na.empty() && na == NormalizeFingerprint(b);
}

}  // namespace berth::net
