// berth reserve create|list|show|update|delete: operators' reservations and maintenance windows
// (docs/reservations.md).
#include <fmt/format.h>

#include "cli/command_context.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/strings.h"
#include "net/http.h"

namespace berth::cli {
namespace {

struct ReserveFlags {
  std::string name;
  std::optional<std::string> start;
  std::optional<std::string> duration;
  std::optional<std::string> nodes;
  std::optional<std::string> gpus;
  std::optional<std::string> pool;
  bool all = false;
  std::optional<std::string> users;
  std::optional<std::string> team;
  bool maintenance = false;
  bool no_maintenance = false;
  bool evict = false;
  bool no_evict = false;
  std::optional<std::string> repeat;
  std::optional<std::string> release_unused;
  bool as_json = false;
};

std::string Text(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return "-";
  if (v->is_string()) return v->as_string().empty() ? "-" : std::string(v->as_string());
  return SerializeJson(*v);
}

std::string ListText(const json::object& o, const char* key) {
  std::vector<std::string> out;
  if (const json::value* v = o.if_contains(key); v != nullptr && v->is_array()) {
    for (const json::value& e : v->as_array()) out.emplace_back(e.as_string());
  }
  return out.empty() ? "-" : Join(out, ",");
}

std::string Where(const json::object& r) {
  if (r.at("all_nodes").as_bool()) return "all nodes";
  const std::string gpus = Text(r, "gpus");
  return (gpus == "-" ? "" : gpus + " on ") + ListText(r, "nodes");
}

std::string Who(const json::object& r) {
  if (r.at("maintenance").as_bool()) return "maintenance";
  if (Text(r, "team") != "-") return "team " + Text(r, "team");
  return ListText(r, "users") == "-" ? std::string("anyone naming it") : ListText(r, "users");
}

std::string WindowText(const json::object& r) {
  const json::value& w = r.at("window");
  if (w.is_null()) return "over";
  const json::object& o = w.as_object();
  return (r.at("active").as_bool() ? "now, until " + Text(o, "end")
                                   : Text(o, "start") + " to " + Text(o, "end"));
}

json::object Body(const ReserveFlags& f, bool create) {
  json::object b;
  if (create) b["name"] = f.name;
  auto put = [&](const char* key, const std::optional<std::string>& v) {
    if (v) b[key] = *v;
  };
  put("start", f.start);
  put("duration", f.duration);
  put("repeat", f.repeat);
  put("gpus", f.gpus);
  put("pool", f.pool);
  put("team", f.team);
  put("release_unused", f.release_unused);
  if (f.nodes) b["nodes"] = *f.nodes;
  if (f.users) b["users"] = *f.users;
  if (f.all) b["all"] = true;
  if (f.maintenance) b["maintenance"] = true;
  if (f.no_maintenance) b["maintenance"] = false;
  if (f.evict) b["evict"] = true;
  if (f.no_evict) b["evict"] = false;
  return b;
}

void PrintOne(const json::object& r) {
  fmt::print("name:        {}\n", Text(r, "name"));
  fmt::print("window:      {}\n", WindowText(r));
  fmt::print("first start: {} for {}s{}\n", Text(r, "start"), Text(r, "duration_s"),
             Text(r, "repeat") == "-" ? "" : ", repeating " + Text(r, "repeat"));
  fmt::print("where:       {}\n", Where(r));
  fmt::print("for:         {}\n", Who(r));
  if (r.at("evict").as_bool()) fmt::print("at start:    evicts jobs that do not belong\n");
  if (Text(r, "release_unused_s") != "0") {
    fmt::print("released:    when unused for {}s\n", Text(r, "release_unused_s"));
  }
  fmt::print("created:     {} by {}\n", Text(r, "created_at"), Text(r, "created_by"));
}

// One reservation the server answered with, as JSON or in words.
int PrintAnswer(const Result<json::value>& res, bool as_json) {
  if (!res.ok()) return Fail(res.status());
  if (as_json) {
    fmt::print("{}\n", SerializeJson(*res));
    return 0;
  }
  PrintOne(res->as_object());
  return 0;
}

int Create(const GlobalFlags& g, const ReserveFlags& f) {
  return PrintAnswer(CallServer(g, "POST", "/v1/reservations", SerializeJson(Body(f, true))),
                     f.as_json);
}

int Update(const GlobalFlags& g, const ReserveFlags& f) {
  return PrintAnswer(
      CallServer(g, "PATCH", "/v1/reservations/" + f.name, SerializeJson(Body(f, false))),
      f.as_json);
}

int List(const GlobalFlags& g, bool as_json) {
  auto res = CallServer(g, "GET", "/v1/reservations");
  if (!res.ok()) return Fail(res.status());
  if (as_json) {
    fmt::print("{}\n", SerializeJson(*res));
    return 0;
  }
  const json::array& list = res->as_object().at("reservations").as_array();
  if (list.empty()) {
    fmt::print("No reservations.\n");
    return 0;
  }
  Table t({"NAME", "WINDOW", "REPEAT", "WHERE", "FOR", "BY"});
  for (const json::value& v : list) {
    const json::object& r = v.as_object();
    t.Add({Text(r, "name"), WindowText(r), Text(r, "repeat"), Where(r), Who(r),
           Text(r, "created_by")});
  }
  fmt::print("{}", t.Render());
  return 0;
}

int Show(const GlobalFlags& g, const std::string& name, bool as_json) {
  return PrintAnswer(CallServer(g, "GET", "/v1/reservations/" + name), as_json);
}

int Delete(const GlobalFlags& g, const std::string& name) {
  auto res = CallServer(g, "DELETE", "/v1/reservations/" + name);
  if (!res.ok()) return Fail(res.status());
  fmt::print("deleted reservation {} (jobs running in it keep running)\n", name);
  return 0;
}

void AddWhenWhereWho(CLI::App* cmd, ReserveFlags& f) {
  cmd->add_option("--start", f.start, "When it starts: RFC 3339 (2026-12-24T09:00:00Z) or now+2h");
  cmd->add_option("--duration", f.duration, "How long each window lasts: 90m, 2h, 1d");
  cmd->add_option("--nodes", f.nodes, "These nodes, comma-separated");
  cmd->add_option("--gpus", f.gpus,
                  "TYPE:COUNT GPUs, as whole nodes picked by berth (within one topology domain "
                  "where one holds them)");
  cmd->add_option("--pool", f.pool, "With --gpus: pick nodes of this pool");
  cmd->add_flag("--all", f.all, "Every node of the cluster");
  cmd->add_option("--users", f.users,
                  "Users whose jobs may run in it (with --reservation NAME), comma-separated");
  cmd->add_option("--team", f.team,
                  "A team whose users' jobs run in it (with or without --reservation)");
  cmd->add_option("--repeat", f.repeat,
                  "Repeat daily, weekly, or on a 5-field cron expression in UTC ('0 9 * * 1-5')");
  cmd->add_option("--release-unused", f.release_unused,
                  "End a window early once its nodes have run none of its jobs for this long "
                  "(30m)");
  cmd->add_flag("--evict", f.evict,
                "At each window's start, preempt the jobs running on its nodes that do not belong "
                "(requeued); without it they run on (a maintenance window always evicts)");
  cmd->add_flag("--json", f.as_json, "Machine-readable output");
}

}  // namespace

// --- command line: the registration of each command (cli/command_context.h) ---

void AddReserveCommand(CommandContext& c) {
  auto* reserve = c.app.add_subcommand(
      "reserve", "Reservations and maintenance windows: nodes promised to some users for a time");
  reserve->require_subcommand(1);

  auto& create_flags = c.Keep<ReserveFlags>();
  auto* create = reserve->add_subcommand(
      "create", "Reserve nodes for a time (operators): only its users' jobs run there then");
  create->add_option("--name", create_flags.name, "Its name")->required();
  AddWhenWhereWho(create, create_flags);
  create->add_flag("--maintenance", create_flags.maintenance,
                   "A maintenance window: the nodes drain ahead, run no jobs in it, and come "
                   "back when it ends");
  c.AddGlobal(create);
  create->callback([&] { c.rc = Create(c.g, create_flags); });

  auto& update_flags = c.Keep<ReserveFlags>();
  auto* update = reserve->add_subcommand(
      "update", "Change a reservation (yours, or any as an admin); what you give replaces");
  update->add_option("name", update_flags.name, "The reservation")->required();
  AddWhenWhereWho(update, update_flags);
  update->add_flag("--maintenance", update_flags.maintenance, "Make it a maintenance window");
  update->add_flag("--no-maintenance", update_flags.no_maintenance,
                   "Make it an ordinary reservation again");
  update->add_flag("--no-evict", update_flags.no_evict, "Let running jobs run on at its start");
  c.AddGlobal(update);
  update->callback([&] { c.rc = Update(c.g, update_flags); });

  auto& list_json = c.Keep<bool>();
  auto* list = reserve->add_subcommand("list", "Every reservation and its window now or next");
  list->add_flag("--json", list_json, "Machine-readable output");
  c.AddGlobal(list);
  list->callback([&] { c.rc = List(c.g, list_json); });

  auto& show_name = c.Keep<std::string>();
  auto& show_json = c.Keep<bool>();
  auto* show = reserve->add_subcommand("show", "One reservation");
  show->add_option("name", show_name, "The reservation")->required();
  show->add_flag("--json", show_json, "Machine-readable output");
  c.AddGlobal(show);
  show->callback([&] { c.rc = Show(c.g, show_name, show_json); });

  auto& delete_name = c.Keep<std::string>();
  auto* del = reserve->add_subcommand(
      "delete", "Delete a reservation (yours, or any as an admin); its running jobs keep running");
  del->add_option("name", delete_name, "The reservation")->required();
  c.AddGlobal(del);
  del->callback([&] { c.rc = Delete(c.g, delete_name); });
}

}  // namespace berth::cli
