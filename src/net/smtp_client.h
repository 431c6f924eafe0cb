// SmtpClient: sends one e-mail through an SMTP relay (RFC 5321) — what the server's notifications
// use (docs/notifications.md, `berth server --smtp HOST:PORT --smtp-from ADDR`).
//
// One blocking exchange per message: connect, EHLO, STARTTLS when the relay offers it (or always,
// or never: SmtpOptions::starttls), EHLO again, MAIL FROM, RCPT TO, DATA (dot-stuffed, CRLF line
// ends), QUIT. Every wait is bounded by `timeout_ms`. TLS is verified against `ca_file` or the
// system's CAs, and the certificate must name the relay's host.
//
// Errors: Unavailable when the relay cannot be reached, times out or answers 4xx (worth a retry);
// Infeasible when it refuses with 5xx (a retry would be refused again), with its reply;
// Invalid for a message that cannot be sent (a header with a line break).
//
// Thread-safety: SendMail is reentrant; each call has its own connection.
#pragma once

#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace berth::net {

struct SmtpOptions {
  std::string host;
  int port = 25;
  std::string from;               // the envelope and header sender
  std::string starttls = "auto";  // "auto" (when offered), "require", "off"
  std::string ca_file;            // PEM CAs for STARTTLS instead of the system's
  std::string helo = "berth";
  DurationMs timeout_ms = 10'000;
};

struct MailMessage {
  std::string to;
  std::string subject;
  std::string body;        // plain text; lines end in \n or \r\n
  std::string message_id;  // "<id@berth>"; none when empty
};

// Parses "HOST:PORT" (IPv6 in brackets) into options.host and options.port.
Status ParseSmtpRelay(const std::string& relay, SmtpOptions* options);

Status SendMail(const SmtpOptions& options, const MailMessage& message);

}  // namespace berth::net
