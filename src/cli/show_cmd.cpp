// berth show: one job as text (its request, where it runs or why it waits, its attempts and
// history).
#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "cli/arguments.h"
#include "cli/command_context.h"
#include "cli/commands.h"
#include "cli/interrupts.h"
#include "cli/table.h"
#include "cli/upload.h"
#include "common/clock.h"
#include "common/job_status.h"
#include "common/strings.h"
#include "net/http.h"
#include "spec/job_spec.h"

namespace berth::cli {

namespace {

std::string NumText(const json::value* v) {
  if (v == nullptr || v->is_null()) return "-";
  if (v->is_double()) {
    const double d = v->as_double();
    if (d == static_cast<double>(static_cast<int64_t>(d))) return std::to_string(int64_t(d));
    return fmt::format("{:.2f}", d);
  }
  if (v->is_string()) return std::string(v->as_string());
  return SerializeJson(*v);
}

// "412 MiB", "1.5 GiB"; "-" when not measured.
std::string MemoryText(const json::value& bytes) {
  auto n = bytes.is_null() ? std::nullopt : AsInt(bytes);
  if (!n) return "-";
  const double mib = static_cast<double>(*n) / (1024 * 1024);
  return mib >= 1024 ? fmt::format("{:.1f} GiB", mib / 1024) : fmt::format("{:.0f} MiB", mib);
}

std::string CpuText(const json::value& seconds) {
  if (!seconds.is_number()) return "-";
  return fmt::format("{:.1f} s", seconds.to_number<double>());
}

// `berth show`'s "gpu use" line for a running job (docs/idle.md): "mean 37% SM (p95 81%), peak
// 40.2 GiB; idle 12m in all, idle now for 5m", or "utilisation unknown" where a node's sampling
// failed.
void PrintGpuUse(const json::object& use) {
  const int64_t peak_mib = AsInt(use.at("peak_memory_mib")).value_or(0);
  std::string text =
      fmt::format("mean {:.0f}% SM (p95 {}%), peak {}", use.at("mean_sm").to_number<double>(),
                  SerializeJson(use.at("p95_sm")), MemoryText(json::value(peak_mib * 1024 * 1024)));
  const int64_t idle = AsInt(use.at("idle_seconds")).value_or(0);
  const int64_t idle_for = AsInt(use.at("idle_for_seconds")).value_or(0);
  if (idle > 0) text += "; idle " + FormatDuration(idle * 1000) + " in all";
  if (idle_for > 0) text += ", idle now for " + FormatDuration(idle_for * 1000);
  if (!use.at("known").as_bool()) text += "; utilisation unknown now (sampling failed)";
  fmt::print("  gpu use:    {}\n", text);
}

// `berth show`'s "used" line: what the last ended attempt used against its request (like seff).
void PrintUsed(const json::object& a, const json::object& job) {
  if (a.at("peak_memory_bytes").is_null() && a.at("cpu_seconds").is_null()) return;
  auto percent = [](const json::value& v) {
    return v.is_number() ? fmt::format(" ({:.0f}%)", v.to_number<double>() * 100) : std::string();
  };
  const json::object& r = job.at("resources").as_object();
  const std::string asked_memory =
      r.at("memory").is_number() && r.at("memory").to_number<double>() > 0
          ? " of " + SerializeJson(r.at("memory")) + " GiB asked"
          : " (no memory asked: the node's default limit)";
  // CPU time, and what it makes on average of the CPUs asked (efficiency x CPUs asked).
  std::string cpus = "CPU time " + CpuText(a.at("cpu_seconds"));
  const json::value& eff = a.at("cpu_efficiency");
  if (eff.is_number() && r.at("cpus").is_number()) {
    cpus += fmt::format(", {:.2g} of {} CPUs busy on average{}",
                        eff.to_number<double>() * r.at("cpus").to_number<double>(),
                        SerializeJson(r.at("cpus")), percent(eff));
  }
  fmt::print("  used:       peak memory {}{}{}, {}\n", MemoryText(a.at("peak_memory_bytes")),
             asked_memory, percent(a.at("memory_efficiency")), cpus);
}

// `berth show`'s "why pending" block, from the job JSON's `waiting` object (docs/fair-share.md).
void PrintWaiting(int64_t id, const json::object& w) {
  const json::value* position = w.if_contains("position");
  if (position == nullptr) return;
  const std::string team =
      NumText(w.if_contains("team")) == "-" ? "(default)" : NumText(w.if_contains("team"));
  // One team (no teams configured): its scores, quota and name are internals that say nothing.
  const json::value* teams = w.if_contains("teams");
  const bool one_team = teams != nullptr && AsInt(*teams).value_or(0) <= 1;
  if (one_team) {
    fmt::print("  in line:    #{} of the waiting jobs\n", NumText(position));
    const json::object& f = w.at("fair_share").as_object();
    fmt::print("  fair share: user score {} (recent usage; the lowest goes first)\n",
               NumText(f.if_contains("user_score")));
    if (const json::value* first = f.if_contains("first_waiting"); first && first->is_object()) {
      const json::object& o = first->as_object();
      if (AsInt(o.at("job")).value_or(0) != id) {
        fmt::print("  next up:    job {} (user score {})\n", NumText(o.if_contains("job")),
                   NumText(o.if_contains("user_score")));
      }
    }
  } else {
    fmt::print("  in line:    #{} of the waiting jobs, #{} in team {}\n", NumText(position),
               NumText(w.if_contains("team_position")), team);
  }
  const json::object& q = w.at("quota").as_object();
  if (!one_team && NumText(q.if_contains("state")) != "no GPU") {
    fmt::print(
        "  quota:      {}: team {} uses {} of quota {} (may borrow {} more); this job needs {}\n",
        NumText(q.if_contains("state")), team, NumText(q.if_contains("team_uses")),
        NumText(q.if_contains("quota")),
        NumText(q.if_contains("borrow_limit")) == "-" ? "without limit"
                                                      : NumText(q.if_contains("borrow_limit")),
        NumText(q.if_contains("job_needs")));
  }
  const json::object& f = w.at("fair_share").as_object();
  if (!one_team) {
    fmt::print("  fair share: user score {}, team score {} (team usage {} / weight {})\n",
               NumText(f.if_contains("user_score")), NumText(f.if_contains("team_score")),
               NumText(f.if_contains("team_usage")), NumText(f.if_contains("team_weight")));
  }
  if (const json::value* first = f.if_contains("first_waiting");
      !one_team && first && first->is_object()) {
    const json::object& o = first->as_object();
    fmt::print("  next up:    job {} (team {}, user score {}, team score {})\n",
               NumText(o.if_contains("job")),
               NumText(o.if_contains("team")) == "-" ? "(default)" : NumText(o.if_contains("team")),
               NumText(o.if_contains("user_score")), NumText(o.if_contains("team_score")));
  }
  if (const json::value* b = w.if_contains("blocking"); b && b->is_object()) {
    const json::object& o = b->as_object();
    fmt::print("  blocking:   {} {} on {} node(s); {} node(s) have that free; most free: {}{}\n",
               NumText(o.if_contains("needed")), NumText(o.if_contains("resource")),
               NumText(o.if_contains("nodes_needed")), NumText(o.if_contains("nodes_with_enough")),
               NumText(o.if_contains("most_free")),
               NumText(o.if_contains("most_free_node")) == "-"
                   ? ""
                   : " on " + NumText(o.if_contains("most_free_node")));
  }
  if (const json::value* b = w.if_contains("blocking"); b && b->is_object()) {
    if (const json::value* held = b->as_object().if_contains("held_by"); held && held->is_array()) {
      std::vector<std::string> who;
      for (const auto& h : held->as_array()) {
        const json::object& o = h.as_object();
        const std::string gpus = NumText(o.if_contains("gpus"));
        const std::string held = gpus + (gpus == "1" ? " GPU" : " GPUs");
        who.push_back(one_team ? fmt::format("{} ({})", NumText(o.if_contains("user")), held)
                               : fmt::format("{} (team {}) {}", NumText(o.if_contains("user")),
                                             NumText(o.if_contains("team")) == "-"
                                                 ? "(default)"
                                                 : NumText(o.if_contains("team")),
                                             held));
      }
      if (!who.empty()) fmt::print("  held by:    {}\n", Join(who, ", "));
    }
  }
  if (const json::value* r = w.if_contains("reservation"); r && r->is_object()) {
    const json::object& o = r->as_object();
    std::vector<std::string> nodes;
    for (const auto& n : o.at("nodes").as_array()) nodes.push_back(std::string(n.as_string()));
    fmt::print(
        "  reserved:   {} until {}\n", Join(nodes, ", "),
        NumText(o.if_contains("until")) == "-" ? "unknown" : NumText(o.if_contains("until")));
  }
}

// A script of several lines under its label: each line after the first indented as far as the
// first (`show`'s values start at column 14), without the last newline.
std::string Indented(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += std::string(14, ' ');
  }
  return out;
}

// A field as `show` prints it: "-" for null, a string as itself, anything else as JSON.
std::string ShownValue(const json::value& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return std::string(v.as_string());
  return SerializeJson(v);
}

void PrintAttempts(const json::array& attempts) {
  fmt::print("Attempts:\n");
  Table t({"  ATTEMPT", "NODES", "GPUS", "PLACED", "ENDED", "OUTCOME", "EXIT", "PEAK MEM", "CPU",
           "REASON"});
  for (const auto& av : attempts) {
    const json::object& a = av.as_object();
    std::vector<std::string> nodes;
    std::vector<std::string> gpus;
    for (const auto& p : a.at("placement").as_array()) {
      nodes.emplace_back(p.as_object().at("node").as_string());
      std::vector<std::string> d;
      for (const auto& x : p.as_object().at("gpus").as_array())
        d.push_back(std::to_string(AsInt(x).value_or(0)));
      gpus.push_back(d.empty() ? "-" : Join(d, ","));
    }
    auto s = [&](const char* k) { return ShownValue(a.at(k)); };
    t.Add({"  " + s("attempt"), Join(nodes, " "), Join(gpus, " "), s("placed_at"), s("ended_at"),
           a.at("outcome").is_null()   ? "(current)"
           : s("outcome") == "PENDING" ? "REQUEUED"
                                       : s("outcome"),
           s("exit_code"), MemoryText(a.at("peak_memory_bytes")), CpuText(a.at("cpu_seconds")),
           s("reason")});
  }
  fmt::print("{}", t.Render());
}

void PrintEvents(const json::array& events) {
  fmt::print("Events:\n");
  Table t({"  AT", "STATUS", "ATTEMPT", "BY", "REASON"});
  for (const auto& ev : events) {
    const json::object& e = ev.as_object();
    const json::value* by = e.if_contains("by");
    t.Add({"  " + std::string(e.at("at").as_string()), std::string(e.at("status").as_string()),
           std::to_string(AsInt(e.at("attempt")).value_or(0)),
           by && by->is_string() ? std::string(by->as_string()) : "-",
           std::string(e.at("reason").as_string())});
  }
  fmt::print("{}", t.Render());
}

// Its notifications (docs/notifications.md): what was sent where, and what failed.
void PrintNotifications(const json::array& notices) {
  fmt::print("Notifications:\n");
  Table t({"  EVENT", "SINK", "STATE", "TRIES", "LAST ERROR"});
  for (const auto& nv : notices) {
    const json::object& n = nv.as_object();
    t.Add({"  " + std::string(n.at("id").as_string()), std::string(n.at("sink").as_string()),
           std::string(n.at("state").as_string()),
           std::to_string(AsInt(n.at("attempts")).value_or(0)),
           n.at("last_error").as_string().empty() ? "-"
                                                  : std::string(n.at("last_error").as_string())});
  }
  fmt::print("{}", t.Render());
}

}  // namespace

int Show(const GlobalFlags& g, int64_t id, bool as_json) {
  Connection conn(g.server, g.token, g.self_exe);
  Status st = conn.Connect();
  if (!st.ok()) return Fail(st);
  auto res = conn.Call("GET", fmt::format("/v1/jobs/{}", id));
  if (!res.ok()) return Fail(res.status());
  const json::object& j = res->as_object();
  if (as_json) {
    fmt::print("{}\n", SerializeJson(j));
    return 0;
  }
  auto str = [&](const char* key) { return ShownValue(j.at(key)); };
  const json::object& r = j.at("resources").as_object();
  fmt::print("Job {} ({}) by {}\n", id, str("name"), str("user"));
  // `attempt` is the attempt that runs now, or ran last: a job back in the queue keeps its number
  // until the next attempt is placed (docs/user-guide.md, "Attempts").
  const int64_t attempt = AsInt(j.at("attempt")).value_or(0);
  if (str("status") == "PENDING" && attempt > 0) {
    fmt::print("  status:     PENDING   attempt {} ended; attempt {} starts when placed\n", attempt,
               attempt + 1);
  } else {
    fmt::print("  status:     {}   attempt {}\n", str("status"), attempt);
  }
  fmt::print("  reason:     {}\n", str("reason"));
  auto count = [&](const char* key) {
    const json::value* v = j.if_contains(key);
    return v ? AsInt(*v).value_or(0) : 0;
  };
  if (count("restarts") + count("preemptions") + count("requeues") > 0) {
    fmt::print(
        "  requeued:   {} restart(s) after failures, {} preemption(s), {} other requeue(s)\n",
        count("restarts"), count("preemptions"), count("requeues"));
  }
  if (const json::value* nb = j.if_contains("not_before"); nb && nb->is_string()) {
    fmt::print("  backoff:    not placed before {}\n", std::string(nb->as_string()));
  }
  if (const json::value* deps = j.if_contains("depends_on");
      deps && deps->is_array() && !deps->as_array().empty()) {
    std::vector<std::string> texts;
    for (const auto& d : deps->as_array()) {
      if (d.is_string()) texts.emplace_back(d.as_string());
    }
    fmt::print("  depends on: {} (all must hold)\n", Join(texts, "  "));
  }
  if (const json::value* w = j.if_contains("waiting"); w != nullptr && w->is_object()) {
    PrintWaiting(id, w->as_object());
  }
  const bool memory_asked = r.at("memory").is_number() && r.at("memory").to_number<double>() > 0;
  fmt::print("  resources:  {} node(s) x [gpus {}, cpus {}, memory {}]   priority {}\n",
             str("num_nodes"), GpusOf(j), SerializeJson(r.at("cpus")),
             memory_asked ? SerializeJson(r.at("memory")) + " GiB" : std::string("-"),
             str("priority"));
  if (const json::value* d = j.if_contains("memory_default"); d && d->is_object()) {
    for (const auto& [node, gib] : d->as_object()) {
      fmt::print("  memory:     none asked: limited to {} on {} (its default for such jobs)\n",
                 gib.is_number() ? fmt::format("{:.3g} GiB", gib.to_number<double>())
                                 : std::string("nothing"),
                 std::string(node));
    }
  }
  if (!j.at("group").is_null()) fmt::print("  group:      {} rank {}\n", str("group"), str("rank"));
  fmt::print("  submitted:  {}\n  started:    {}\n  ended:      {}\n  exit code:  {}\n",
             str("submitted_at"), str("started_at"), str("ended_at"), str("exit_code"));
  for (const auto& p : j.at("placement").as_array()) {
    const json::object& po = p.as_object();
    std::vector<std::string> gpus;
    for (const auto& d : po.at("gpus").as_array())
      gpus.push_back(std::to_string(AsInt(d).value_or(0)));
    fmt::print("  placement:  rank {} on {}  CUDA_VISIBLE_DEVICES={}\n",
               AsInt(po.at("rank")).value_or(0), std::string(po.at("node").as_string()),
               gpus.empty() ? "(none)" : Join(gpus, ","));
  }
  // Where in the cluster's topology levels it runs (docs/topology.md): "rack r2 (4 nodes); switch
  // r2/s1 (2), r2/s2 (2)".
  if (const auto* topology = j.if_contains("topology"); topology && topology->is_object()) {
    std::vector<std::string> levels;
    for (const auto& [level, domains] : topology->as_object()) {
      std::vector<std::string> parts;
      for (const auto& [domain, count] : domains.as_object()) {
        parts.push_back(fmt::format("{} ({})", std::string(domain), SerializeJson(count)));
      }
      levels.push_back(std::string(level) + " " + Join(parts, ", "));
    }
    fmt::print("  topology:   {}\n", Join(levels, "; "));
  }
  if (const auto* use = j.if_contains("gpu_usage"); use && use->is_object())
    PrintGpuUse(use->as_object());
  if (const auto* spec = j.if_contains("spec"); spec && spec->is_object()) {
    const json::object& s = spec->as_object();
    if (s.contains("workdir"))
      fmt::print("  workdir:    {}\n", std::string(s.at("workdir").as_string()));
    if (s.contains("setup") && !s.at("setup").as_string().empty()) {
      fmt::print("  setup:      {}\n", Indented(std::string(s.at("setup").as_string())));
    }
    if (s.contains("run")) {
      fmt::print("  run:        {}\n", Indented(std::string(s.at("run").as_string())));
    }
  }
  if (const auto* attempts = j.if_contains("attempts"); attempts && !attempts->as_array().empty()) {
    PrintUsed(attempts->as_array().back().as_object(), j);
    PrintAttempts(attempts->as_array());
  }
  if (const auto* events = j.if_contains("events"); events) PrintEvents(events->as_array());
  if (const auto* notices = j.if_contains("notifications");
      notices && notices->is_array() && !notices->as_array().empty()) {
    PrintNotifications(notices->as_array());
  }
  return 0;
}

void AddShowCommand(CommandContext& c) {
  auto& show_id = c.Keep<int64_t>(0);
  auto& show_json = c.Keep<bool>(false);
  auto* show = c.app.add_subcommand(
      "show", "One job in full: spec, placement, attempts, events, why pending");
  show->add_option("id", show_id, "Job id")->required();
  show->add_flag("--json", show_json, "Print the job object");
  c.AddGlobal(show);
  show->callback([&] { c.rc = Show(c.g, show_id, show_json); });
}

}  // namespace berth::cli
