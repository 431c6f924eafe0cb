// SmtpClient: one message through an SMTP relay, over a blocking socket with timeouts.
#include "net/smtp_client.h"

#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <string_view>

#include "common/strings.h"
#include "net/tls.h"

namespace berth::net {

namespace {

class SmtpSession {
 public:
  explicit SmtpSession(const SmtpOptions& options) : options_(options) {}
  ~SmtpSession() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (ctx_ != nullptr) SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
  }
  SmtpSession(const SmtpSession&) = delete;
  SmtpSession& operator=(const SmtpSession&) = delete;

  Status Connect() {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(options_.port);
    if (int rc = getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      return Status::Unavailable("smtp: cannot resolve " + options_.host + ": " + gai_strerror(rc));
    }
    std::string why = "no address";
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      timeval tv{static_cast<time_t>(options_.timeout_ms / 1000),
                 static_cast<suseconds_t>((options_.timeout_ms % 1000) * 1000)};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        fd_ = fd;
        break;
      }
      why = std::strerror(errno);
      ::close(fd);
    }
    freeaddrinfo(found);
    if (fd_ < 0) {
      return Status::Unavailable("smtp: cannot connect to " + Relay() + ": " + why);
    }
    return Expect(220, "greeting");
  }

  // Sends `line` (CRLF added) and waits for a reply with code `want`.
  Status Command(const std::string& line, int want, std::string* reply = nullptr) {
    BERTH_RETURN_IF_ERROR(Write(line + "\r\n"));
    return Expect(want, line.substr(0, line.find(' ')), reply);
  }

  Status StartTls() {
    BERTH_RETURN_IF_ERROR(Command("STARTTLS", 220));
    ERR_clear_error();
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (ctx_ == nullptr) return Status::Internal("smtp: no TLS context: " + OpenSslErrors());
    SSL_CTX_set_min_proto_version(ctx_, TLS1_2_VERSION);
    const int loaded = options_.ca_file.empty()
                           ? SSL_CTX_set_default_verify_paths(ctx_)
                           : SSL_CTX_load_verify_locations(ctx_, options_.ca_file.c_str(), nullptr);
    if (loaded != 1) return Status::Invalid("smtp: cannot load the CAs: " + OpenSslErrors());
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    SSL_set_verify(ssl_, SSL_VERIFY_PEER, nullptr);
    if (IsIpLiteral(options_.host)) {
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), options_.host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl_, options_.host.c_str());
      SSL_set1_host(ssl_, options_.host.c_str());
    }
    if (SSL_connect(ssl_) != 1) {
      std::string why = OpenSslErrors();
      if (SSL_get_verify_result(ssl_) != X509_V_OK) {
        why = X509_verify_cert_error_string(SSL_get_verify_result(ssl_));
      }
      return Status::Unavailable("smtp: TLS with " + Relay() + " failed: " + why);
    }
    buffer_.clear();
    return Status::Ok();
  }

  Status Write(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ssl_ != nullptr
                            ? SSL_write(ssl_, data.data(), static_cast<int>(data.size()))
                            : ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) {
        if (ssl_ == nullptr && errno == EINTR) continue;
        return Status::Unavailable("smtp: " + Relay() + " stopped reading");
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return Status::Ok();
  }

  std::string Relay() const { return options_.host + ":" + std::to_string(options_.port); }

  // Reads one reply (its continuation lines "250-..." too); its code must be `want`.
  Status Expect(int want, const std::string& after, std::string* reply = nullptr) {
    std::string text;
    int code = 0;
    for (;;) {
      Result<std::string> line = ReadLine();
      if (!line.ok()) return line.status();
      if (line->size() < 3) return Status::Unavailable("smtp: a malformed reply: " + *line);
      code = std::atoi(line->substr(0, 3).c_str());
      text += (text.empty() ? "" : "\n") + *line;
      if (line->size() == 3 || (*line)[3] != '-') break;
    }
    if (reply != nullptr) *reply = text;
    if (code == want) return Status::Ok();
    const std::string why = "smtp: " + Relay() + " answered " + after + " with: " + text;
    return code >= 500 ? Status::Infeasible(why) : Status::Unavailable(why);
  }

 private:
  Result<std::string> ReadLine() {
    for (;;) {
      if (size_t eol = buffer_.find('\n'); eol != std::string::npos) {
        std::string line = buffer_.substr(0, eol);
        buffer_.erase(0, eol + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return line;
      }
      if (buffer_.size() > 64 * 1024) return Status::Unavailable("smtp: a reply line too long");
      char chunk[4096];
      const ssize_t n = ssl_ != nullptr ? SSL_read(ssl_, chunk, sizeof chunk)
                                        : ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) {
        if (ssl_ == nullptr && n < 0 && errno == EINTR) continue;
        const bool timeout = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        return Status::Unavailable(
            "smtp: " + Relay() + (timeout ? " did not answer in time" : " closed the connection"));
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  const SmtpOptions& options_;
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  std::string buffer_;
};

bool OneLine(const std::string& v) { return v.find_first_of("\r\n") == std::string::npos; }

// The message as DATA sends it: headers, a blank line, the body with CRLF line ends and every
// line that starts with a dot doubled (RFC 5321 4.5.2), then the lone dot.
std::string DataOf(const SmtpOptions& options, const MailMessage& m) {
  char date[64];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S +0000", &tm);
  std::string out = "From: " + options.from + "\r\nTo: " + m.to + "\r\nSubject: " + m.subject +
                    "\r\nDate: " + date + "\r\n";
  if (!m.message_id.empty()) out += "Message-ID: " + m.message_id + "\r\n";
  out +=
      "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
      "Content-Transfer-Encoding: 8bit\r\n\r\n";
  for (const std::string& raw : Split(m.body, '\n')) {
    std::string line = raw;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line[0] == '.') line.insert(0, ".");
    out += line + "\r\n";
  }
  return out + ".\r\n";
}

}  // namespace

Status ParseSmtpRelay(const std::string& relay, SmtpOptions* options) {
  const size_t colon = relay.rfind(':');
  int port = 0;
  const char* end = relay.data() + relay.size();
  const bool number =
      colon != std::string::npos && std::from_chars(relay.data() + colon + 1, end, port) ==
                                        std::from_chars_result{end, std::errc()};
  if (colon == 0 || !number || port <= 0 || port > 65535) {
    return Status::Invalid("--smtp: expected HOST:PORT, e.g. mail.example.com:587, not '" + relay +
                           "'");
  }
  std::string host = relay.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  options->host = host;
  options->port = port;
  return Status::Ok();
}

Status SendMail(const SmtpOptions& options, const MailMessage& message) {
  if (!OneLine(message.to) || !OneLine(message.subject) || !OneLine(options.from) ||
      !OneLine(message.message_id)) {
    return Status::Invalid("smtp: a header holds a line break");
  }
  SmtpSession smtp(options);
  BERTH_RETURN_IF_ERROR(smtp.Connect());
  std::string ehlo;
  BERTH_RETURN_IF_ERROR(smtp.Command("EHLO " + options.helo, 250, &ehlo));
  const bool offered = ehlo.find("STARTTLS") != std::string::npos;
  if (options.starttls == "require" && !offered) {
    return Status::Infeasible("smtp: " + smtp.Relay() +
                              " does not offer STARTTLS, which --smtp-starttls requires");
  }
  if (options.starttls != "off" && offered) {
    BERTH_RETURN_IF_ERROR(smtp.StartTls());
    BERTH_RETURN_IF_ERROR(smtp.Command("EHLO " + options.helo, 250));
  }
  BERTH_RETURN_IF_ERROR(smtp.Command("MAIL FROM:<" + options.from + ">", 250));
  BERTH_RETURN_IF_ERROR(smtp.Command("RCPT TO:<" + message.to + ">", 250));
  BERTH_RETURN_IF_ERROR(smtp.Command("DATA", 354));
  BERTH_RETURN_IF_ERROR(smtp.Write(DataOf(options, message)));
  BERTH_RETURN_IF_ERROR(smtp.Expect(250, "the message"));
  (void)smtp.Command("QUIT", 221);  // the message is accepted; a rude close changes nothing
  return Status::Ok();
}

}  // namespace berth::net
