// berth notify set|unset|ls|test: a user's notification sinks and what was sent
// (docs/notifications.md).
#include <fmt/format.h>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/files.h"
#include "common/strings.h"
#include "net/http.h"

namespace berth::cli {
namespace {

struct NotifySetFlags {
  std::string email;
  std::string webhook;
  std::string secret_file;
  std::string format = "json";
  std::optional<std::string> events;
};

struct NotifyLsFlags {
  int limit = 20;
  bool as_json = false;
};

std::string Field(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return "-";
  if (v->is_string()) return v->as_string().empty() ? "-" : std::string(v->as_string());
  return SerializeJson(*v);
}

// The body of one sink: an e-mail address, or a webhook with its secret read from a file.
Result<json::object> SinkBody(const NotifySetFlags& f, bool webhook) {
  json::object body{{"kind", webhook ? "webhook" : "email"},
                    {"target", webhook ? f.webhook : f.email}};
  if (f.events) body["events"] = *f.events;
  if (!webhook) return body;
  if (f.secret_file.empty()) {
    return Status::Invalid(
        "--webhook needs --secret-file FILE: a secret of 16 to 512 characters that signs each "
        "delivery (e.g. `openssl rand -hex 32 > FILE`)");
  }
  std::optional<std::string> secret = ReadFile(f.secret_file);
  if (!secret) return Status::Invalid("--secret-file: cannot read " + f.secret_file);
  body["secret"] = Trim(*secret);
  body["format"] = f.format;
  return body;
}

int NotifySet(const GlobalFlags& g, const NotifySetFlags& f) {
  if (f.email.empty() && f.webhook.empty()) {
    return Fail(
        Status::Invalid("say where to: --email ADDR and/or --webhook URL --secret-file FILE"));
  }
  for (bool webhook : {false, true}) {
    if ((webhook ? f.webhook : f.email).empty()) continue;
    Result<json::object> body = SinkBody(f, webhook);
    if (!body.ok()) return Fail(body.status());
    auto res = CallServer(g, "POST", "/v1/notify/sinks", SerializeJson(*body));
    if (!res.ok()) return Fail(res.status());
    const json::object& o = res->as_object();
    const std::string events = Field(o, "events");
    fmt::print(
        "{} {}{}\n", Field(o, "kind"), Field(o, "target"),
        events == "-" ? " (for jobs that ask with --notify)" : " (default events: " + events + ")");
  }
  return 0;
}

int NotifyUnset(const GlobalFlags& g, bool email, bool webhook) {
  if (!email && !webhook) return Fail(Status::Invalid("say which: --email and/or --webhook"));
  for (const char* kind : {"email", "webhook"}) {
    if ((std::string(kind) == "email" ? email : webhook) == false) continue;
    auto res = CallServer(g, "DELETE", std::string("/v1/notify/sinks/") + kind);
    if (!res.ok()) return Fail(res.status());
    fmt::print("removed your {}\n", kind);
  }
  return 0;
}

int NotifyLs(const GlobalFlags& g, const NotifyLsFlags& f) {
  auto res = CallServer(g, "GET", fmt::format("/v1/notify?limit={}", f.limit));
  if (!res.ok()) return Fail(res.status());
  const json::object& o = res->as_object();
  if (f.as_json) {
    fmt::print("{}\n", SerializeJson(o));
    return 0;
  }
  const json::array& sinks = o.at("sinks").as_array();
  if (sinks.empty()) {
    fmt::print(
        "No sinks: add one with `berth notify set --email ADDR` or `berth notify set "
        "--webhook URL --secret-file FILE`.\n");
  } else {
    Table t({"SINK", "TARGET", "FORMAT", "DEFAULT EVENTS"});
    for (const auto& v : sinks) {
      const json::object& s = v.as_object();
      t.Add({Field(s, "kind"), Field(s, "target"), Field(s, "format"), Field(s, "events")});
    }
    fmt::print("{}", t.Render());
  }
  const json::array& notices = o.at("notices").as_array();
  if (notices.empty()) return 0;
  fmt::print("\n");
  Table t({"EVENT", "TYPE", "SINK", "STATE", "TRIES", "CREATED", "LAST ERROR"});
  for (const auto& v : notices) {
    const json::object& n = v.as_object();
    t.Add({Field(n, "id"), Field(n, "type"), Field(n, "sink"), Field(n, "state"),
           Field(n, "attempts"), Field(n, "created_at"), Field(n, "last_error")});
  }
  fmt::print("{}", t.Render());
  return 0;
}

int NotifyTest(const GlobalFlags& g) {
  auto res = CallServer(g, "POST", "/v1/notify/test");
  if (!res.ok()) return Fail(res.status());
  fmt::print("sent {} to your sinks; `berth notify ls` shows how it went\n",
             Field(res->as_object(), "id"));
  return 0;
}

}  // namespace

// --- command line: the registration of each command (cli/command_context.h) ---

void AddNotifyCommand(CommandContext& c) {
  auto* notify = c.app.add_subcommand(
      "notify", "Where your notifications go (e-mail, a signed webhook) and what was sent");
  notify->require_subcommand(1);
  auto& set_flags = c.Keep<NotifySetFlags>();
  auto* set = notify->add_subcommand(
      "set", "Set your e-mail address and/or webhook (each replaces the one you had)");
  set->add_option("--email", set_flags.email, "Mail notifications to this address");
  set->add_option("--webhook", set_flags.webhook,
                  "POST notifications to this https URL (http only to this machine's loopback), "
                  "signed in X-Berth-Signature");
  set->add_option("--secret-file", set_flags.secret_file,
                  "The webhook's signing secret (16 to 512 characters), read from this file; "
                  "never shown again (set it again to rotate)");
  set->add_option("--format", set_flags.format,
                  "The webhook's body: json (berth's event) or slack (the event with Slack's "
                  "text)")
      ->check(CLI::IsMember({"json", "slack"}))
      ->capture_default_str();
  set->add_option("--events", set_flags.events,
                  "Events of your jobs that have no --notify of their own, e.g. end,fail "
                  "(default: none, only jobs that ask); operators may add nodes (a node drained, "
                  "faulted or down)");
  c.AddGlobal(set);
  set->callback([&] { c.rc = NotifySet(c.g, set_flags); });

  auto& unset_email = c.Keep<bool>();
  auto& unset_webhook = c.Keep<bool>();
  auto* unset = notify->add_subcommand("unset", "Remove your e-mail address and/or webhook");
  unset->add_flag("--email", unset_email, "Remove your e-mail address");
  unset->add_flag("--webhook", unset_webhook, "Remove your webhook");
  c.AddGlobal(unset);
  unset->callback([&] { c.rc = NotifyUnset(c.g, unset_email, unset_webhook); });

  auto& ls_flags = c.Keep<NotifyLsFlags>();
  auto* ls = notify->add_subcommand("ls", "Your sinks and your latest notifications, newest first");
  ls->add_option("--limit", ls_flags.limit, "Notifications to list")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  ls->add_flag("--json", ls_flags.as_json, "Machine-readable output");
  c.AddGlobal(ls);
  ls->callback([&] { c.rc = NotifyLs(c.g, ls_flags); });

  auto* test = notify->add_subcommand("test", "Send a test notification to each of your sinks");
  c.AddGlobal(test);
  test->callback([&] { c.rc = NotifyTest(c.g); });
}

}  // namespace berth::cli
