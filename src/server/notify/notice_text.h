// NoticeText: what a notice says — its e-mail (subject and plain-text body), its webhook body
// (berth's event JSON, or a Slack-compatible one that also carries it) and the signature header
// (docs/notifications.md).
//
// Signature: `X-Berth-Signature: t=UNIX,v1=HEX`, HEX = lowercase hex HMAC-SHA256(secret,
// "UNIX." + body), as Stripe's: the receiver recomputes it, compares in constant time, and refuses
// a timestamp too old (a replayed body).
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>

#include "common/json_util.h"
#include "common/status.h"
#include "net/smtp_client.h"
#include "store/store.h"

namespace berth {

// A group's failures by cause, "exit 1: 2, oom: 1" ("" when none failed), from its jobs' rows.
std::string FailureBreakdown(const std::vector<JobRow>& jobs);
// "100 jobs: 97 succeeded, 3 failed (exit 1: 2, oom: 1)" from a summary's counts by status.
std::string SummaryLine(const json::object& counts, int64_t size, const std::string& breakdown);

// The one-line text of `event` (a notice's payload): the mail's subject, Slack's text.
std::string NoticeHeadline(const json::object& event);
// The mail of `event` to `to`.
net::MailMessage NoticeMail(const json::object& event, const std::string& to);
// The webhook body: the event as it is ("json"), or with Slack's "text" added ("slack").
std::string WebhookBody(const json::object& event, const std::string& format);
// The X-Berth-Signature header's value for `body` sent at `unix_seconds`.
std::string SignatureHeader(const std::string& secret, int64_t unix_seconds,
                            const std::string& body);

}  // namespace berth
