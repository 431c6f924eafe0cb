// TLS certificate helpers for berth's server and client: a self-signed certificate for a server
// that has none, and SHA-256 certificate fingerprints, which clients pin on first use (`berth
// login` shows the fingerprint; the admin compares it with `berth server fingerprint` output).
//
// Fingerprints are written "sha256:" + 64 lowercase hex digits, the SHA-256 of the certificate's
// DER encoding (what `openssl x509 -noout -fingerprint -sha256` shows, in another spelling).
// Every function is thread-safe; each call works on its own OpenSSL objects.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace berth::net {

// Makes sure `cert_path` and `key_path` hold a certificate and its private key. When both files
// exist they are kept as they are (not even parsed: Start() of the server reports a bad pair).
// Otherwise a new EC P-256 key and a self-signed X.509 v3 certificate are generated (subject
// CN=berth, valid for about 10 years, random serial) whose subjectAltName lists `names`: each one
// that parses as an IPv4/IPv6 address becomes an IP entry, every other one a DNS entry. No names:
// "localhost", "127.0.0.1" and "::1". Both files are written atomically (temp file, fsync,
// rename), the key with mode 0600 from its creation on, the certificate with mode 0644 (less the
// umask); a missing parent directory is created. Errors: a name that is empty or holds characters a
// DNS name cannot (Invalid), a file that cannot be written (Internal), an OpenSSL failure
// (Internal).
Status EnsureSelfSignedCertificate(const std::string& cert_path, const std::string& key_path,
                                   const std::vector<std::string>& names);

// The fingerprint ("sha256:...") of the first certificate in the PEM file at `cert_path`.
// NotFound when the file cannot be read, Invalid when it holds no PEM certificate.
Result<std::string> CertificateFingerprint(const std::string& cert_path);

// The fingerprint ("sha256:...") of a DER-encoded certificate: Sha256Digest of it.
std::string FingerprintOfDer(std::string_view der);
// "sha256:" + the lower-case hex SHA-256 of `data` (certificates' fingerprints, tokens' hashes).
std::string Sha256Digest(std::string_view data);

// Helpers the TLS client and the certificate code share.
// OpenSSL's queued errors as text ("" when none), emptying the queue.
std::string OpenSslErrors();
// Whether `host` is an IPv4 or IPv6 address literal (not a name).
bool IsIpLiteral(const std::string& host);

// Brings a fingerprint to the canonical "sha256:<64 lowercase hex>" form. Accepts upper or lower
// case, an optional "sha256:"/"SHA256:" prefix (or "SHA256 Fingerprint="), and the
// colon-separated pairs that `openssl x509 -fingerprint` prints. Returns "" when `fingerprint`
// is not a SHA-256 fingerprint, so two malformed fingerprints never compare equal by accident:
// compare with FingerprintsEqual.
std::string NormalizeFingerprint(std::string fingerprint);
// True when both are valid fingerprints of the same certificate, whatever their spelling.
bool FingerprintsEqual(const std::string& a, const std::string& b);

}  // namespace berth::net
