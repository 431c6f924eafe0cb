// The contracts of uploads and of the agents' protocol (docs/api.md "Uploads", "Agent protocol";
// the messages themselves: src/protocol/agent_protocol.h).
#include "server/http/api_docs.h"

namespace berth::api_docs {

using namespace schema;

namespace {

const char* const kNodes =
    "The agents' protocol: a node's own credential or the cluster token; a node touches only what "
    "is placed on it (403 otherwise).";

// The node and session every agent call names.
std::vector<QueryDoc> NodeQuery(std::vector<QueryDoc> more = {}) {
  more.insert(more.begin(), {{"node", Str(), "the calling node"},
                             {"session", Str(), "its session (POST /v1/agent/register)"}});
  return more;
}

json::value NodeCall(std::initializer_list<std::pair<const char*, json::value>> more,
                     std::initializer_list<const char*> required) {
  json::value o = Obj(more, required);
  auto& props = o.as_object()["properties"].as_object();
  props["node"] = Str();
  props["session"] = Str();
  json::array& req = o.as_object()["required"].emplace_array();
  req = {"node", "session"};
  for (const char* r : required) req.emplace_back(r);
  return o;
}

}  // namespace

RouteDoc UploadMissing() {
  return {.summary = "Which of these blobs the caller has not uploaded",
          .request = Closed(Obj({{"digests", Arr(Str())}}, {"digests"})),
          .response = Obj({{"missing", Arr(Str())}}, {"missing"})};
}

RouteDoc UploadBlobs() {
  return {.summary = "Upload blobs: frames of `DIGEST 0 SIZE\\n` and SIZE bytes",
          .response = Obj({{"stored", Int()}}, {"stored"}),
          .errors = {{409, "a blob's bytes do not have its digest"}, {507, "the disk is full"}}};
}

RouteDoc UploadPiece() {
  return {.summary = "One piece of a big blob",
          .query = {{"offset", Int(), "where the piece starts: what was received so far"},
                    {"size", Int(), "the whole blob's size"},
                    {"last", Enum({"0", "1"}), "the last piece: the digest is checked"}},
          .response = Obj({{"received", Int()}}, {"received"}),
          .errors = {{409, "the offset is not what was received, or the digest differs"}}};
}

RouteDoc UploadReceived() {
  return {.summary = "How much of a big blob was received",
          .response = Obj({{"received", Int()}}, {"received"})};
}

RouteDoc UploadManifest() {
  return {.summary = "Register a workdir's manifest (its files by digest)",
          .request = Obj({{"version", Int()}, {"entries", Arr(Arr(Any()))}}, {"entries"}),
          .response = Obj({{"manifest", Str()}, {"files", Int()}, {"bytes", Int()}},
                          {"manifest", "files", "bytes"}),
          .errors = {{409, "a file the caller did not upload"}}};
}

RouteDoc Join() {
  return {.summary = "Exchange a join token for the node's own credential (shown once)",
          .description = "Only with a join token as the bearer.",
          .request = Obj({{"node", Str()}}, {"node"}),
          .ok_status = 201,
          .response = Obj({{"node", Str()}, {"name", Str()}, {"credential", Str()}},
                          {"node", "name", "credential"}),
          .errors = {{409, "the node holds a live credential, or its name is taken"}}};
}

RouteDoc GetSpec() {
  return {.summary = "A job's stored spec, for the node it is placed on",
          .description = kNodes,
          .query = NodeQuery({{"job", Int(), "a job of the spec, placed on the node"}}),
          .response = Map(Any())};
}

RouteDoc Register() {
  return {.summary = "A node's agent registers: its resources, what still runs there",
          .description = kNodes,
          .request = Obj({{"name", Str()},
                          {"node_id", Str()},
                          {"address", Str()},
                          {"pool", Str()},
                          {"labels", Map(Str())},
                          {"cpus_milli", Int()},
                          {"memory_mib", Int()},
                          {"gpus", Arr(Map(Any()))},
                          {"running", Arr(Map(Any()))},
                          {"health", Map(Any())}},
                         {"name"}),
          .response =
              Obj({{"session", Str()}, {"lease_ms", Int()}, {"heartbeat_ms", Int()}}, {"session"}),
          .errors = {{409, "another live agent holds the node's name"}}};
}

RouteDoc Heartbeat() {
  return {.summary = "Renew the node's lease (and report its GPUs' use)",
          .description = kNodes,
          .request = NodeCall(
              {{"gpu_usage", Arr(Map(Any()))},
               {"gpus_now",
                Arr(Obj({{"index", Int()}, {"sm", Int()}, {"memory_mib", Int()}}, {"index"}))}},
              {}),
          .response = Obj({{"ok", Bool()}, {"lease_ms", Int()}}),
          .errors = {{409, "register again"}}};
}

RouteDoc HealthReport() {
  return {.summary = "The node's health after a round of probes",
          .description = kNodes,
          .request = NodeCall({{"health", Map(Any())}}, {"health"}),
          .response = Obj({{"now_ms", Int()}}, {"now_ms"}),
          .errors = {{409, "register again"}}};
}

RouteDoc Report() {
  json::value result = Obj({{"job", Int()},
                            {"attempt", Int()},
                            {"rank", Int()},
                            {"action", Enum({"ok", "stop", "error"})},
                            {"error", Str()}},
                           {"action"});
  return {.summary = "What happened to ranks on the node (accepted, running, exited, ...)",
          .description = kNodes,
          .request = NodeCall({{"reports", Arr(Map(Any()))}}, {"reports"}),
          .response = Obj({{"results", Arr(std::move(result))}}, {"results"})};
}

RouteDoc LogAppend() {
  return {.summary = "Append a rank's output (raw bytes; idempotent by offset)",
          .description = kNodes,
          .query = NodeQuery({{"job", Int(), "the job"},
                              {"attempt", Int(), "its attempt"},
                              {"rank", Int(), "its rank"},
                              {"offset", Int(), "where the bytes start"}}),
          .response = Obj({{"size", Int()}}, {"size"}),
          .errors = {{409, "a gap: the answer carries the stored size"}}};
}

RouteDoc LogBatch() {
  return {.summary = "Append the output of several ranks in one request",
          .description = kNodes,
          .query = NodeQuery(),
          .response = Obj({{"results", Arr(Obj({{"size", Int()}, {"error", Str()}}, {"size"}))}},
                          {"results"}),
          .errors = {{409, "an unknown session: register again"}}};
}

RouteDoc AgentBlobs() {
  return {.summary = "The blobs of a job's uploaded workdir, for the node it is placed on",
          .description = kNodes,
          .request =
              Obj({{"node", Str()}, {"session", Str()}, {"job", Int()}, {"want", Arr(Arr(Any()))}},
                  {"node", "job", "want"}),
          .response_type = "application/octet-stream",
          .response = Str()};
}

RouteDoc Watch() {
  return {.summary = "The node's stream of launches, stops, specs and pings (JSON lines)",
          .description = kNodes,
          .query = NodeQuery(),
          .response_type = "application/x-ndjson",
          .response = Str(),
          .errors = {{409, "register again"}}};
}

RouteDoc AgentSession() {
  return {.summary = "The node's end of an interactive session (WebSocket)",
          .description = kNodes,
          .query = NodeQuery(),
          .websocket = true};
}

}  // namespace berth::api_docs
