// ParseUrl: the three kinds of server URL, and clear errors for the rest.
#include <gtest/gtest.h>

#include "net/http_client.h"

namespace berth::net {
namespace {

TEST(ParseUrl, Http) {
  auto u = ParseUrl("http://berth.example.org:8080/api/");
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_EQ(u->scheme, "http");
  EXPECT_EQ(u->host, "berth.example.org");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->base_path, "/api");
  auto bare = ParseUrl("127.0.0.1:7070");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->scheme, "http");
  EXPECT_EQ(bare->port, 7070);
  EXPECT_EQ(ParseUrl("http://h")->port, 80);
}

TEST(ParseUrl, HttpsAndIpv6) {
  auto u = ParseUrl("https://[::1]:8443");
  ASSERT_TRUE(u.ok()) << u.status().message();
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 8443);
  EXPECT_EQ(ParseUrl("HTTPS://h")->port, 443);
}

TEST(ParseUrl, UnixSocket) {
  for (const std::string url : {"unix:/run/berth/berth.sock", "unix:///run/berth/berth.sock"}) {
    auto u = ParseUrl(url);
    ASSERT_TRUE(u.ok()) << url << ": " << u.status().message();
    EXPECT_EQ(u->scheme, "unix");
    EXPECT_EQ(u->socket_path, "/run/berth/berth.sock");
    EXPECT_EQ(u->port, 0);
  }
  EXPECT_NE(ParseUrl("unix:relative.sock").status().message().find("absolute path"),
            std::string::npos);
  EXPECT_NE(ParseUrl("unix:/" + std::string(200, 'x')).status().message().find("longer than"),
            std::string::npos);
}

TEST(ParseUrl, ClearErrors) {
  auto ftp = ParseUrl("ftp://h:21");
  ASSERT_FALSE(ftp.ok());
  EXPECT_EQ(ftp.status().message(),
            "unknown scheme 'ftp' in server URL 'ftp://h:21' (expected http://HOST:PORT, "
            "https://HOST:PORT or unix:/path/to/socket)");
  EXPECT_NE(ParseUrl("http://h:port").status().message().find("bad port"), std::string::npos);
  EXPECT_NE(ParseUrl("http://h:99999").status().message().find("bad server URL"),
            std::string::npos);
  EXPECT_FALSE(ParseUrl("http://:80").ok());
  EXPECT_FALSE(ParseUrl("http://[::1:80").ok());
}

// A client with a bad URL or a malformed pin fails every call with the reason, never connects.
TEST(HttpClient, BadUrlOrPinFailsEveryCall) {
  HttpClient bad_url("gopher://h:70", "");
  EXPECT_EQ(bad_url.Request("GET", "/").status().code(), Code::kInvalidArgument);
  HttpClient bad_pin("https://127.0.0.1:1", HttpClientOptions{.tls_fingerprint = "sha256:xyz"});
  auto r = bad_pin.Request("GET", "/");
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("bad TLS fingerprint"), std::string::npos);
}

TEST(HttpClient, UnixSocketThatIsNotThereIsUnavailable) {
  HttpClient c("unix:/nonexistent/berth.sock", "");
  auto r = c.Request("GET", "/", "", 1'000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("cannot connect to berth server at "
                                      "unix:/nonexistent/berth.sock"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace berth::net
