// TLS: a generated self-signed certificate, the server speaking TLS with it, and the client's two
// ways of trusting it (a pinned fingerprint, or a CA file with a hostname/IP check), with the
// failures a user would hit spelled out.
#include "net/tls.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "common/files.h"
#include "net/http_client.h"
#include "net/http_server.h"
#include "net_testing.h"

namespace berth::net {
namespace {

using testing::DescribingHandler;
using testing::RawSocket;
using testing::TempDir;

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

// A temp dir with a self-signed certificate for localhost/127.0.0.1/::1, and a server speaking
// TLS with it on 127.0.0.1.
class TlsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cert_ = dir_.File("tls/cert.pem");
    key_ = dir_.File("tls/key.pem");
    Status st = EnsureSelfSignedCertificate(cert_, key_, {"localhost", "127.0.0.1", "::1"});
    ASSERT_TRUE(st.ok()) << st.message();
    auto fp = CertificateFingerprint(cert_);
    ASSERT_TRUE(fp.ok()) << fp.status().message();
    fingerprint_ = *fp;
    HttpServerOptions o;
    o.tls_cert_file = cert_;
    o.tls_key_file = key_;
    o.threads = 2;
    server_ = std::make_unique<HttpServer>(o, DescribingHandler());
    st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  std::string Url(const std::string& host = "127.0.0.1") const {
    return "https://" + host + ":" + std::to_string(server_->port());
  }

  TempDir dir_;
  std::string cert_, key_, fingerprint_;
  std::unique_ptr<HttpServer> server_;
};

TEST(Certificate, GeneratedKeyIs0600AndCertificateIs0644AndBothAreKept) {
  TempDir dir;
  std::string cert = dir.File("cert.pem"), key = dir.File("key.pem");
  ::umask(0);  // even with no umask to help, the key is never readable by others
  Status st = EnsureSelfSignedCertificate(cert, key, {"berth.example.org", "10.0.0.7"});
  ::umask(022);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(ModeOf(key), 0600u);
  EXPECT_EQ(ModeOf(cert), 0644u);
  auto fp = CertificateFingerprint(cert);
  ASSERT_TRUE(fp.ok()) << fp.status().message();
  EXPECT_EQ(fp->size(), 7u + 64u);
  EXPECT_EQ(fp->rfind("sha256:", 0), 0u);
  EXPECT_EQ(NormalizeFingerprint(*fp), *fp);
  std::string pem = ReadFileOr(cert);
  EXPECT_NE(pem.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_NE(ReadFileOr(key).find("BEGIN PRIVATE KEY"), std::string::npos);

  // A second call keeps the pair (same fingerprint); no temp files are left around.
  ASSERT_TRUE(EnsureSelfSignedCertificate(cert, key, {"other"}).ok());
  EXPECT_EQ(*CertificateFingerprint(cert), *fp);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 2u);

  // With only one of the two left, a new pair is made.
  std::filesystem::remove(key);
  ASSERT_TRUE(EnsureSelfSignedCertificate(cert, key, {}).ok());
  EXPECT_NE(*CertificateFingerprint(cert), *fp);
  EXPECT_EQ(ModeOf(key), 0600u);
}

TEST(Certificate, RejectsNamesThatAreNeitherAddressesNorDnsNames) {
  TempDir dir;
  Status st =
      EnsureSelfSignedCertificate(dir.File("c.pem"), dir.File("k.pem"), {"ok.example", "a,b"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'a,b' is neither an IP address nor a DNS name"), std::string::npos)
      << st.message();
  EXPECT_FALSE(std::filesystem::exists(dir.File("k.pem")));
}

TEST(Certificate, FingerprintOfAFileWithoutCertificateIsAClearError) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomic(dir.File("junk.pem"), "not a certificate\n"));
  auto fp = CertificateFingerprint(dir.File("junk.pem"));
  ASSERT_FALSE(fp.ok());
  EXPECT_NE(fp.status().message().find("holds no PEM certificate"), std::string::npos);
  EXPECT_EQ(CertificateFingerprint(dir.File("missing.pem")).status().code(), Code::kNotFound);
}

TEST(Fingerprint, NormalizesCaseColonsAndPrefix) {
  std::string hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  std::string canonical = "sha256:" + hex;
  std::string colons;
  for (size_t i = 0; i < hex.size(); i += 2) {
    if (i) colons += ':';
    colons += static_cast<char>(toupper(hex[i]));
    colons += static_cast<char>(toupper(hex[i + 1]));
  }
  EXPECT_EQ(NormalizeFingerprint(canonical), canonical);
  EXPECT_EQ(NormalizeFingerprint(hex), canonical);
  EXPECT_EQ(NormalizeFingerprint("SHA256:" + colons), canonical);
  EXPECT_EQ(NormalizeFingerprint("sha256 Fingerprint=" + colons), canonical);
  EXPECT_EQ(NormalizeFingerprint("  " + colons + "\n"), canonical);
  EXPECT_EQ(NormalizeFingerprint("sha256:abcd"), "");
  EXPECT_EQ(NormalizeFingerprint("sha256:" + hex.substr(1) + "g"), "");
  EXPECT_TRUE(FingerprintsEqual(colons, canonical));
  EXPECT_FALSE(FingerprintsEqual("junk", "junk"));
}

TEST_F(TlsServerTest, RoundTripWithThePinnedFingerprint) {
  HttpClient client(Url(), HttpClientOptions{.tls_fingerprint = fingerprint_});
  auto res = client.Request("GET", "/who");
  ASSERT_TRUE(res.ok()) << res.status().message();
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("transport=tls uid=- gid=- pid=0 remote=127.0.0.1:"), std::string::npos)
      << res->body;
  auto echo = client.Request("POST", "/echo", std::string(100'000, 'e'));  // several TLS records
  ASSERT_TRUE(echo.ok()) << echo.status().message();
  EXPECT_EQ(echo->body, std::string(100'000, 'e'));

  // The pin in another spelling (upper case, colons) is the same pin.
  std::string hex = fingerprint_.substr(7), colons;
  for (size_t i = 0; i < hex.size(); i += 2) {
    colons += (i ? ":" : "") + hex.substr(i, 2);
  }
  for (auto& c : colons) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  HttpClient upper(Url(), HttpClientOptions{.tls_fingerprint = colons});
  auto again = upper.Request("GET", "/who");
  ASSERT_TRUE(again.ok()) << again.status().message();
}

TEST_F(TlsServerTest, WrongPinIsRefusedNamingBothFingerprints) {
  std::string wrong = "sha256:" + std::string(64, 'a');
  HttpClient client(Url(), HttpClientOptions{.token = "secret", .tls_fingerprint = wrong});
  auto res = client.Request("GET", "/who");
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), Code::kUnauthorized);
  EXPECT_NE(res.status().message().find("TLS certificate fingerprint mismatch for " + Url() +
                                        ": expected " + wrong + ", got " + fingerprint_),
            std::string::npos)
      << res.status().message();
}

TEST_F(TlsServerTest, FetchServerFingerprintMatchesTheCertificateFile) {
  auto fp = FetchServerFingerprint(Url(), 5'000);
  ASSERT_TRUE(fp.ok()) << fp.status().message();
  EXPECT_EQ(*fp, fingerprint_);
  auto not_https = FetchServerFingerprint("http://127.0.0.1:1", 1'000);
  EXPECT_EQ(not_https.status().code(), Code::kInvalidArgument);
}

TEST_F(TlsServerTest, CaFileVerificationChecksTheHostNameOrAddress) {
  // The certificate as its own CA: 127.0.0.1 (an IP SAN) and localhost (a DNS SAN) pass.
  for (const std::string host : {"127.0.0.1", "localhost"}) {
    HttpClient client(Url(host), HttpClientOptions{.ca_file = cert_});
    auto res = client.Request("GET", "/who");
    ASSERT_TRUE(res.ok()) << host << ": " << res.status().message();
    EXPECT_EQ(res->status, 200);
  }
  // The system CAs do not know a self-signed certificate.
  HttpClient system_cas(Url(), HttpClientOptions{});
  auto untrusted = system_cas.Request("GET", "/who");
  ASSERT_FALSE(untrusted.ok());
  EXPECT_EQ(untrusted.status().code(), Code::kUnauthorized);
  EXPECT_NE(untrusted.status().message().find("is not trusted"), std::string::npos)
      << untrusted.status().message();

  // A certificate trusted as a CA but naming another host is refused.
  TempDir other;
  ASSERT_TRUE(
      EnsureSelfSignedCertificate(other.File("c.pem"), other.File("k.pem"), {"berth.example.org"})
          .ok());
  HttpServerOptions o;
  o.tls_cert_file = other.File("c.pem");
  o.tls_key_file = other.File("k.pem");
  HttpServer misnamed(o, DescribingHandler());
  ASSERT_TRUE(misnamed.Start().ok());
  HttpClient client("https://127.0.0.1:" + std::to_string(misnamed.port()),
                    HttpClientOptions{.ca_file = other.File("c.pem")});
  auto res = client.Request("GET", "/who");
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), Code::kUnauthorized);
  EXPECT_NE(res.status().message().find("mismatch"), std::string::npos) << res.status().message();
}

// A plain-HTTP client on the TLS port gets a clear answer at once, not a hang.
TEST_F(TlsServerTest, PlainHttpClientOnTheTlsPortFailsCleanly) {
  HttpClient client("http://127.0.0.1:" + std::to_string(server_->port()), "");
  int64_t start = MonotonicMs();
  auto res = client.Request("GET", "/who", "", 5'000);
  int64_t elapsed = MonotonicMs() - start;
  EXPECT_LT(elapsed, 4'000) << "the plain client waited for its timeout";
  if (res.ok()) {
    EXPECT_EQ(res->status, 400);
    EXPECT_NE(res->body.find("this port speaks HTTPS only"), std::string::npos) << res->body;
  } else {
    std::printf("plain client on TLS port: %s\n", res.status().message().c_str());
  }
}

// And a TLS client on a plain port fails its handshake with a message, not a hang.
TEST(TlsClient, HttpsClientOnAPlainPortFailsCleanly) {
  HttpServer plain(HttpServerOptions{}, DescribingHandler());
  ASSERT_TRUE(plain.Start().ok());
  HttpClient client("https://127.0.0.1:" + std::to_string(plain.port()),
                    HttpClientOptions{.tls_fingerprint = "sha256:" + std::string(64, '0')});
  int64_t start = MonotonicMs();
  auto res = client.Request("GET", "/who", "", 5'000);
  EXPECT_LT(MonotonicMs() - start, 4'000);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), Code::kUnavailable);
  EXPECT_NE(res.status().message().find("TLS handshake with https://127.0.0.1:"), std::string::npos)
      << res.status().message();
}

// Streams (chunked, the server writing while it watches for the peer hanging up) work over TLS.
TEST(TlsServer, ChunkedStreamOverTls) {
  TempDir dir;
  ASSERT_TRUE(EnsureSelfSignedCertificate(dir.File("c.pem"), dir.File("k.pem"), {}).ok());
  HttpServerOptions o;
  o.tls_cert_file = dir.File("c.pem");
  o.tls_key_file = dir.File("k.pem");
  HttpServer* server_ptr = nullptr;
  HttpServer server(o, [&](HttpRequest&&, std::shared_ptr<Responder> res) {
    res->StartStream(200, "text/plain");
    for (int i = 1; i <= 5; ++i) {
      server_ptr->RunAfter(20 * i, [res, i] {
        res->Write(std::to_string(i) + ";");
        if (i == 5) res->End();
      });
    }
  });
  server_ptr = &server;
  ASSERT_TRUE(server.Start().ok());
  HttpClient client(
      "https://127.0.0.1:" + std::to_string(server.port()),
      HttpClientOptions{.tls_fingerprint = *CertificateFingerprint(dir.File("c.pem"))});
  std::string got;
  int code = 0;
  Status st = client.Stream(
      "GET", "/watch", "", 5'000,
      [&](std::string_view d) {
        got += d;
        return true;
      },
      &code);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(code, 200);
  EXPECT_EQ(got, "1;2;3;4;5;");
}

// Abort() from another thread ends a TLS stream that is waiting for data at once (the agent
// stops its watch streams this way).
TEST(TlsClient, AbortEndsAWaitingStream) {
  TempDir dir;
  ASSERT_TRUE(EnsureSelfSignedCertificate(dir.File("c.pem"), dir.File("k.pem"), {}).ok());
  HttpServerOptions o;
  o.tls_cert_file = dir.File("c.pem");
  o.tls_key_file = dir.File("k.pem");
  HttpServer server(o, [](HttpRequest&&, std::shared_ptr<Responder> res) {
    res->StartStream(200, "text/plain");
    res->Write("hello;");  // and then nothing, for ever
  });
  ASSERT_TRUE(server.Start().ok());
  HttpClient client(
      "https://127.0.0.1:" + std::to_string(server.port()),
      HttpClientOptions{.tls_fingerprint = *CertificateFingerprint(dir.File("c.pem"))});
  std::atomic<bool> got_hello{false};
  std::thread aborter([&] {
    for (int i = 0; i < 500 && !got_hello; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    client.Abort();
  });
  int64_t start = MonotonicMs();
  int code = 0;
  Status st = client.Stream(
      "GET", "/watch", "", 30'000,
      [&](std::string_view d) {
        if (d.find("hello;") != std::string_view::npos) got_hello = true;
        return true;
      },
      &code);
  int64_t elapsed = MonotonicMs() - start;
  aborter.join();
  EXPECT_TRUE(got_hello);
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.message();
  EXPECT_LT(elapsed, 10'000);
  EXPECT_EQ(client.Request("GET", "/").status().code(), Code::kUnavailable);
}

// The TLS handshake runs under the header deadline: a connection to the TLS port that never
// starts one is closed after header_timeout_ms (300 ms here), not the 10 s idle timeout.
TEST(TlsServer, SilentConnectionIsClosedAtTheHandshakeDeadline) {
  TempDir dir;
  ASSERT_TRUE(EnsureSelfSignedCertificate(dir.File("c.pem"), dir.File("k.pem"), {}).ok());
  HttpServerOptions o;
  o.tls_cert_file = dir.File("c.pem");
  o.tls_key_file = dir.File("k.pem");
  o.idle_timeout_ms = 10'000;
  o.header_timeout_ms = 300;
  HttpServer server(o, DescribingHandler());
  ASSERT_TRUE(server.Start().ok());
  RawSocket s = RawSocket::Tcp("127.0.0.1", server.port());
  ASSERT_TRUE(s.ok());
  auto r = s.ReadUntilClosed(5'000);
  EXPECT_TRUE(r.closed);
  EXPECT_GE(r.elapsed_ms, 250);
}

TEST(TlsServer, BadCertificateOrKeyMakesStartFail) {
  TempDir dir;
  ASSERT_TRUE(EnsureSelfSignedCertificate(dir.File("a.pem"), dir.File("a.key"), {}).ok());
  ASSERT_TRUE(EnsureSelfSignedCertificate(dir.File("b.pem"), dir.File("b.key"), {}).ok());
  ASSERT_TRUE(WriteFileAtomic(dir.File("junk.pem"), "junk\n"));
  struct Case {
    std::string cert, key, expect;
  } cases[] = {
      {dir.File("junk.pem"), dir.File("a.key"), "cannot load the TLS certificate"},
      {dir.File("a.pem"), dir.File("b.key"), "cannot use the TLS key"},
      {dir.File("a.pem"), dir.File("missing.key"), "cannot read TLS file"},
      {dir.File("a.pem"), "", "needs both a certificate file and a key file"},
  };
  for (const auto& c : cases) {
    HttpServerOptions o;
    o.tls_cert_file = c.cert;
    o.tls_key_file = c.key;
    HttpServer server(o, DescribingHandler());
    Status st = server.Start();
    ASSERT_FALSE(st.ok()) << c.cert << " " << c.key;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace berth::net
