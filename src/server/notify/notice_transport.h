// NoticeTransport: how a notice leaves the server — a mail through the SMTP relay, a POST to a
// webhook. The sender (notice_sender.h) goes through this interface; RelayTransport is the real
// one, tests use tests/fakes/fake_notice_transport.h.
//
// Errors: Unavailable (or any error but the two below) is worth a retry; Infeasible and
// Invalid are final (a relay's 5xx, a receiver's 4xx other than 408/429).
//
// Thread-safety: RelayTransport is reentrant (each call opens its own connection).
#pragma once

#include <string>

#include "common/status.h"
#include "net/http_client.h"
#include "net/smtp_client.h"

namespace berth {

class NoticeTransport {
 public:
  virtual ~NoticeTransport() = default;
  // Infeasible when no relay is configured.
  virtual Status SendMail(const net::MailMessage& mail) = 0;
  virtual Status Post(const std::string& url, const std::string& body,
                      const net::HttpHeaders& headers) = 0;
};

struct RelayOptions {
  net::SmtpOptions smtp;        // smtp.host "": no relay (mails fail, saying so)
  std::string webhook_ca_file;  // PEM CAs for https webhooks instead of the system's
  DurationMs timeout_ms = 10'000;
};

class RelayTransport : public NoticeTransport {
 public:
  explicit RelayTransport(RelayOptions options) : options_(std::move(options)) {}
  Status SendMail(const net::MailMessage& mail) override;
  Status Post(const std::string& url, const std::string& body,
              const net::HttpHeaders& headers) override;

 private:
  const RelayOptions options_;
};

}  // namespace berth
