// The shared schemas of the HTTP API (components/schemas of the OpenAPI description): the objects
// several routes answer with, as server/http/job_json.cpp and the handlers build them.
#include "server/http/api_docs.h"

namespace berth {

namespace schema {

json::value Obj(std::initializer_list<std::pair<const char*, json::value>> props,
                std::initializer_list<const char*> required) {
  json::object properties;
  for (const auto& [name, s] : props) properties[name] = s;
  json::object o{{"type", "object"}, {"properties", std::move(properties)}};
  if (required.size() > 0) {
    json::array r;
    for (const char* name : required) r.emplace_back(name);
    o["required"] = std::move(r);
  }
  return o;
}

json::value Closed(json::value object_schema) {
  object_schema.as_object()["additionalProperties"] = false;
  return object_schema;
}

}  // namespace schema

namespace api_docs {

using namespace schema;

namespace {

json::value JobStatus() {
  return Enum({"PENDING", "STARTING", "SETTING_UP", "RUNNING", "SUCCEEDED", "FAILED",
               "FAILED_SETUP", "CANCELLED", "LOST", "PREEMPTED"});
}

// GPUs by type: whole counts, or fractions where a job holds a share (docs/gpus.md).
json::value GpuCounts() { return Map(Num()); }

json::value Resources() {
  return Obj({{"accelerators", Nullable(GpuCounts())}, {"cpus", Num()}, {"memory", Num()}},
             {"accelerators", "cpus", "memory"});
}

json::value PlacementItem() {
  return Obj({{"node", Str()}, {"rank", Int()}, {"gpus", Arr(Int())}, {"gpu_shares", Arr(Num())}},
             {"node", "rank", "gpus", "gpu_shares"});
}

json::value Job() {
  return Described(Obj({{"id", Int()},
                        {"name", Str()},
                        {"user", Str()},
                        {"status", JobStatus()},
                        {"priority", Int()},
                        {"group", Nullable(Int())},
                        {"rank", Nullable(Int())},
                        {"num_nodes", Int()},
                        {"resources", Resources()},
                        {"submitted_at", Nullable(Time())},
                        {"started_at", Nullable(Time())},
                        {"ended_at", Nullable(Time())},
                        {"exit_code", Nullable(Int())},
                        {"attempt", Int()},
                        {"restarts", Int()},
                        {"preemptions", Int()},
                        {"requeues", Int()},
                        {"not_before", Nullable(Time())},
                        {"earlier_run_seconds", Num()},
                        {"placement", Arr(PlacementItem())},
                        {"reason", Str()},
                        {"reason_code", Nullable(Enum({"oom"}))}},
                       {"id", "name", "user", "status", "priority", "group", "rank", "num_nodes",
                        "resources", "submitted_at", "started_at", "ended_at", "exit_code",
                        "attempt", "placement", "reason", "reason_code"}),
                   "A job (docs/api.md \"List\"): what `berth queue --json` prints per job.");
}

json::value Attempt() {
  return Obj({{"attempt", Int()},
              {"placement", Arr(PlacementItem())},
              {"placed_at", Nullable(Time())},
              {"ended_at", Nullable(Time())},
              {"outcome", Nullable(JobStatus())},
              {"reason", Str()},
              {"exit_code", Nullable(Int())},
              {"peak_memory_bytes", Nullable(Int())},
              {"cpu_seconds", Nullable(Num())},
              {"memory_efficiency", Nullable(Num())},
              {"cpu_efficiency", Nullable(Num())}},
             {"attempt", "placement", "outcome", "exit_code"});
}

json::value GpuUsage() {
  return Obj({{"known", Bool()},
              {"ranks", Int()},
              {"samples", Int()},
              {"mean_sm", Num()},
              {"p95_sm", Num()},
              {"peak_memory_mib", Int()},
              {"idle_seconds", Int()},
              {"idle_for_seconds", Int()}},
             {"known"});
}

json::value JobDetail() {
  json::value detail = Obj({{"spec", Nullable(Map(Any()))},
                            {"events", Arr(Obj({{"at", Time()},
                                                {"status", JobStatus()},
                                                {"attempt", Int()},
                                                {"reason", Str()},
                                                {"by", Nullable(Str())}},
                                               {"at", "status"}))},
                            {"attempts", Arr(Attempt())},
                            {"memory_default", Map(Nullable(Num()))},
                            {"depends_on", Arr(Str())},
                            {"waiting", Nullable(Map(Any()))},
                            {"gpu_usage", Nullable(GpuUsage())},
                            {"topology", Map(Map(Int()))},
                            {"notifications", Arr(Ref("Notice"))}},
                           {"spec", "events", "attempts", "depends_on"});
  return Described(
      json::object{{"allOf", json::array{Ref("Job"), std::move(detail)}}},
      "A job with its spec, events and attempts (docs/api.md \"Show\"): `berth show --json`.");
}

json::value Notice() {
  return Described(
      Obj({{"id", Str()},
           {"type", Enum({"started", "end", "fail", "oom", "preempted", "idle", "pending",
                          "summary", "test", "node_drained", "node_fault", "node_down"})},
           {"sink", Enum({"email", "webhook"})},
           {"job", Int()},
           {"group", Nullable(Int())},
           {"state", Enum({"pending", "sent", "failed"})},
           {"attempts", Int()},
           {"created_at", Time()},
           {"sent_at", Nullable(Time())},
           {"next_at", Nullable(Time())},
           {"last_error", Str()}},
          {"id", "type", "sink", "job", "state", "attempts", "created_at"}),
      "A notification to one sink, and how its delivery went (docs/notifications.md).");
}

json::value NotifySink() {
  return Described(Obj({{"kind", Enum({"email", "webhook"})},
                        {"target", Str()},
                        {"format", Enum({"json", "slack"})},
                        {"events", Str()},
                        {"updated_at", Time()}},
                       {"kind", "target", "events"}),
                   "A user's e-mail address or webhook; a webhook's secret is never shown.");
}

json::value Device() {
  return Obj({{"index", Int()},
              {"type", Str()},
              {"free", Num()},
              {"gpu", Int()},
              {"nvlink", Int()},
              {"pcie", Int()},
              {"numa", Int()},
              {"fault", Str()},
              {"sm", Int()},
              {"memory_used_mib", Int()},
              {"jobs", Arr(Obj({{"id", Int()}, {"user", Str()}}, {"id", "user"}))}},
             {"index", "type", "free"});
}

json::value NodeHealth() {
  return Obj(
      {{"state", Enum({"ok", "degraded", "drained"})},
       {"reason", Nullable(Str())},
       {"since", Nullable(Time())},
       {"gpus", Arr(Obj({{"index", Int()}, {"reason", Str()}, {"since", Nullable(Time())}}))},
       {"faults", Arr(Obj({{"probe", Str()},
                           {"gpu", Nullable(Int())},
                           {"reason", Str()},
                           {"since", Nullable(Time())},
                           {"cleared_by", Enum({"clean probes", "operator"})}}))},
       {"probes", Arr(Obj({{"name", Str()},
                           {"ok", Bool()},
                           {"timed_out", Bool()},
                           {"reason", Str()},
                           {"at", Nullable(Time())},
                           {"duration_ms", Int()},
                           {"failures", Int()},
                           {"timeouts", Int()}}))}},
      {"state", "reason", "since", "gpus", "faults", "probes"});
}

json::value Node() {
  json::value amounts =
      Obj({{"cpus", Num()}, {"memory", Num()}, {"gpus", GpuCounts()}}, {"cpus", "memory", "gpus"});
  return Described(
      Obj({{"name", Str()},
           {"state", Enum({"UP", "DRAINING", "DOWN"})},
           {"pool", Str()},
           {"labels", Map(Str())},
           {"isolation", Str()},
           {"sharing", Str()},
           {"mig", Map(Any())},
           {"job_memory_default", Nullable(Num())},
           {"address", Str()},
           {"capacity", amounts},
           {"free", amounts},
           {"devices", Arr(Device())},
           {"last_seen", Nullable(Time())},
           {"down_since", Nullable(Time())},
           {"drained_by_operator", Bool()},
           {"health", NodeHealth()},
           {"topology", Map(Nullable(Str()))},
           {"reservation", Obj({{"name", Str()},
                                {"start", Time()},
                                {"end", Time()},
                                {"active", Bool()},
                                {"maintenance", Bool()}},
                               {"name", "start", "end", "active", "maintenance"})},
           {"maintenance_hold", Str()}},
          {"name", "state", "pool", "labels", "capacity", "free", "devices", "health"}),
      "A node (docs/api.md \"Nodes\"): `berth nodes --json` prints a list of them.");
}

json::value Token() {
  return Obj({{"name", Str()},
              {"user", Str()},
              {"state", Enum({"active", "expired", "revoked"})},
              {"created_at", Nullable(Time())},
              {"created_by", Nullable(Str())},
              {"expires_at", Nullable(Time())},
              {"revoked_at", Nullable(Time())},
              {"speaks_for", Arr(Str())},
              {"token", Described(Str(), "the secret: only in the answer that made it")}},
             {"name", "user", "state"});
}

json::value User() {
  return Obj({{"name", Str()},
              {"role", Enum({"user", "operator", "admin"})},
              {"max_priority", Nullable(Int())},
              {"team", Nullable(Str())},
              {"max_running_gpus", Nullable(Int())},
              {"max_pending_jobs", Nullable(Int())},
              {"updated_at", Nullable(Time())},
              {"updated_by", Nullable(Str())}},
             {"name", "role"});
}

json::value Team() {
  return Obj({{"name", Nullable(Str())},
              {"quota", GpuCounts()},
              {"borrow_limit", GpuCounts()},
              {"weight", Num()},
              {"uses", GpuCounts()},
              {"usage", Num()},
              {"users", Arr(Str())},
              {"updated_at", Nullable(Time())},
              {"updated_by", Nullable(Str())}},
             {"name"});
}

json::value Group() {
  return Obj({{"group", Int()},
              {"jobs", Int()},
              {"user", Str()},
              {"max_running", Nullable(Int())},
              {"counts", Map(Int())}},
             {"group", "jobs", "counts"});
}

// A row of the queue: a job, or a bulk group standing for its jobs.
json::value QueueRow() {
  json::value extra = Obj({{"kind", Enum({"job", "group"})},
                           {"jobs", Int()},
                           {"counts", Map(Int())},
                           {"matching", Int()}});
  return json::object{{"allOf", json::array{Ref("Job"), std::move(extra)}}};
}

}  // namespace

json::object Schemas() {
  return json::object{
      {"Error", Obj({{"error", Str()}}, {"error"})},
      {"Job", Job()},
      {"JobDetail", JobDetail()},
      {"QueueRow", QueueRow()},
      {"Group", Group()},
      {"Node", Node()},
      {"Token", Token()},
      {"User", User()},
      {"Team", Team()},
      {"Notice", Notice()},
      {"NotifySink", NotifySink()},
      {"Reservation", ReservationSchema()},
  };
}

}  // namespace api_docs
}  // namespace berth
