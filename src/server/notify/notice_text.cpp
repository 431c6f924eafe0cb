// NoticeText: the words and bytes of a notice.
#include "server/notify/notice_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "common/sha256.h"
#include "common/strings.h"

namespace berth {

namespace {

std::string Str(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return "";
  if (v->is_string()) return std::string(v->as_string());
  return SerializeJson(*v);
}

int64_t Count(const json::object& counts, const char* status) {
  const json::value* v = counts.if_contains(status);
  return v != nullptr && v->is_int64() ? v->as_int64() : 0;
}

std::string JobName(const json::object& e) {
  std::string name = Str(e, "name");
  return "job " + Str(e, "job") + (name.empty() ? "" : " (" + name + ")");
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

std::string FailureBreakdown(const std::vector<JobRow>& jobs) {
  std::map<std::string, int> causes;
  for (const JobRow& job : jobs) {
    if (job.status != JobStatus::kFailed && job.status != JobStatus::kFailedSetup &&
        job.status != JobStatus::kLost) {
      continue;
    }
    if (IsOutOfMemory(job.reason)) {
      ++causes["oom"];
    } else if (job.exit_code) {
      ++causes[fmt::format("exit {}", *job.exit_code)];
    } else {
      ++causes[Lower(std::string(JobStatusName(job.status)))];
    }
  }
  std::vector<std::pair<std::string, int>> sorted(causes.begin(), causes.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [cause, n] : sorted)
    out += fmt::format("{}{}: {}", out.empty() ? "" : ", ", cause, n);
  return out;
}

std::string SummaryLine(const json::object& counts, int64_t size, const std::string& breakdown) {
  const int64_t failed =
      Count(counts, "FAILED") + Count(counts, "FAILED_SETUP") + Count(counts, "LOST");
  std::string out = fmt::format("{} job{}: {} succeeded, {} failed", size, size == 1 ? "" : "s",
                                Count(counts, "SUCCEEDED"), failed);
  if (!breakdown.empty()) out += " (" + breakdown + ")";
  if (int64_t n = Count(counts, "CANCELLED"); n > 0) out += fmt::format(", {} cancelled", n);
  if (int64_t n = Count(counts, "PREEMPTED"); n > 0) out += fmt::format(", {} preempted", n);
  return out;
}

std::string NoticeHeadline(const json::object& e) {
  const std::string type = Str(e, "type");
  if (type == "summary") {
    const json::value* counts = e.if_contains("counts");
    const std::string line =
        counts != nullptr && counts->is_object()
            ? SummaryLine(counts->as_object(),
                          e.contains("group_size") ? e.at("group_size").to_number<int64_t>() : 0,
                          Str(e, "failures"))
            : Str(e, "status");
    return fmt::format("berth: group {} ({}): {}", Str(e, "group"), Str(e, "name"), line);
  }
  if (type == "test") return "berth: a test notification for " + Str(e, "user");
  if (type.starts_with("node_")) {
    return "berth: node " + Str(e, "node") + " " + Str(e, "status") + ": " + Str(e, "reason");
  }
  std::string what;
  if (type == "started") {
    what = Str(e, "id").starts_with("group-") ? "started (its group's first job)" : "started";
  } else if (type == "pending") {
    what = Str(e, "id").starts_with("group-") ? "(and its group) is still pending: "
                                              : "is still pending: ";
    what += Str(e, "reason");
  } else if (type == "preempted") {
    what = Str(e, "requeued") == "true" ? "was preempted and is queued again" : "was preempted";
  } else if (type == "idle") {
    what = "has idle GPUs: " + Str(e, "reason");
  } else if (type == "oom") {
    what =
        Str(e, "requeued") == "true" ? "ran out of memory and is restarted" : "ran out of memory";
  } else {
    what = Str(e, "status");
    if (const std::string code = Str(e, "exit_code"); !code.empty() && what != "SUCCEEDED") {
      what += " (exit " + code + ")";
    }
  }
  return "berth: " + JobName(e) + " " + what;
}

net::MailMessage NoticeMail(const json::object& e, const std::string& to) {
  net::MailMessage mail;
  mail.to = to;
  mail.subject = NoticeHeadline(e);
  mail.message_id = "<" + Str(e, "id") + "@berth>";
  std::string body = mail.subject.substr(7) + "\n\n";
  auto line = [&body, &e](const char* label, const char* key) {
    if (const std::string v = Str(e, key); !v.empty()) body += fmt::format("{:<10} {}\n", label, v);
  };
  line("Node:", "node");
  line("Job:", "job");
  line("Name:", "name");
  line("Group:", "group");
  line("User:", "user");
  line("Status:", "status");
  line("Reason:", "reason");
  line("Exit code:", "exit_code");
  line("Attempt:", "attempt");
  line("Event:", "id");
  if (const json::value* nodes = e.if_contains("nodes"); nodes != nullptr && nodes->is_array()) {
    std::string list;
    for (const auto& n : nodes->as_array()) {
      list += (list.empty() ? "" : ", ") + std::string(n.as_string());
    }
    body += fmt::format("{:<10} {}\n", "Nodes:", list);
  }
  const std::string job = Str(e, "job");
  if (!Str(e, "node").empty()) {
    body += "\nberth nodes " + Str(e, "node") + "\n";
  } else if (Str(e, "type") == "summary") {
    body += "\nberth queue --group " + Str(e, "group") + "\n";
  } else if (!job.empty() && job != "0") {
    body += "\nberth show " + job + "\nberth logs " + job + "\n";
  }
  mail.body = body;
  return mail;
}

std::string WebhookBody(const json::object& event, const std::string& format) {
  if (format != "slack") return SerializeJson(event);
  json::object slack = event;
  slack["text"] = NoticeHeadline(event);
  return SerializeJson(slack);
}

std::string SignatureHeader(const std::string& secret, int64_t unix_seconds,
                            const std::string& body) {
  const std::string t = std::to_string(unix_seconds);
  return "t=" + t + ",v1=" + HmacSha256Hex(secret, t + "." + body);
}

}  // namespace berth
