// The agents' protocol over HTTP (docs/api.md, "Agent protocol"): each handler decodes the typed
// message (protocol/agent_protocol.h), calls the core, and encodes its answer.
#include <fmt/format.h>

#include <atomic>
#include <set>

#include "common/log.h"
#include "common/strings.h"
#include "common/term_channel.h"
#include "protocol/agent_protocol.h"
#include "server/http/agents_api.h"
#include "server/http/api_docs.h"
#include "server/http/responses.h"

namespace berth {
namespace {

// Ok when `by` may speak for node `node`: a node credential speaks for its own node only.
Status SpeaksFor(const Principal& by, const std::string& node) {
  if (by.node.empty() || by.node == node) return Status::Ok();
  return Status::Forbidden("this is node " + by.node + "'s credential: it may not speak for node " +
                           node);
}

}  // namespace

void AgentsApi::AddRoutes(RouteTable& t, AgentsApi* self) {
  using namespace api_docs;
  using R = RunsOn;
  // A join token does one thing: it is exchanged for a node's own credential.
  t.Add(
      "POST", "/v1/agent/join", R::kState,
      [self](const RouteCall& c) { return self->HandleJoin(*c.req, *c.by); }, Join(),
      Callers::kJoinToken);

  // The agents' protocol (nodes only: see Handle).
  t.Add(
      "GET", "/v1/specs/{id}", R::kState,
      [self](const RouteCall& c) { return self->HandleGetSpec(c.id, *c.req, *c.by); }, GetSpec());
  t.Add(
      "POST", "/v1/agent/register", R::kState,
      [self](const RouteCall& c) { return self->HandleRegister(*c.req, *c.by); }, Register());
  t.Add(
      "POST", "/v1/agent/heartbeat", R::kState,
      [self](const RouteCall& c) { return self->HandleHeartbeat(*c.req, *c.by); }, Heartbeat());
  t.Add(
      "POST", "/v1/agent/health", R::kState,
      [self](const RouteCall& c) { return self->HandleHealth(*c.req, *c.by); }, HealthReport());
  t.Add(
      "POST", "/v1/agent/report", R::kState,
      [self](const RouteCall& c) { return self->HandleReport(*c.req, *c.by); }, Report());
  t.Add(
      "POST", "/v1/agent/logs", R::kState,
      [self](const RouteCall& c) { return self->HandleLogAppend(*c.req, *c.by); }, LogAppend());
  t.Add(
      "POST", "/v1/agent/logs/batch", R::kState,
      [self](const RouteCall& c) { return self->HandleLogBatch(*c.req, *c.by); }, LogBatch());
  t.Add(
      "POST", "/v1/agent/blobs", R::kRead,
      [self](const RouteCall& c) { return self->HandleAgentBlobs(*c.req, *c.by); }, AgentBlobs());
  t.Add(
      "GET", "/v1/agent/watch", R::kState,
      [self](const RouteCall& c) {
        self->HandleWatch(*c.req, *c.by, c.res);
        return StreamedAnswer();
      },
      Watch());
  t.Add(
      "GET", "/v1/agent/sessions/{sid}", R::kRead,
      [self](const RouteCall& c) {
        self->HandleAgentSession(c.params[0], *c.req, *c.by, c.res);
        return StreamedAnswer();
      },
      AgentSession());
}

net::HttpResponse AgentsApi::HandleJoin(const net::HttpRequest& req, const Principal& by) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object() || !body->as_object().contains("node") ||
      !body->as_object().at("node").is_string()) {
    return ErrorResponse(Status::Invalid("join: body must be {\"node\": NAME}"));
  }
  const std::string node(body->as_object().at("node").as_string());
  auto created = c_.accounts.JoinNode(by, node, c_.core.reads().NodeLastSeen(node));
  if (!created.ok()) return ErrorResponse(created.status());
  LogInfo("node {} joined with {} and holds credential {}", node, by.via, created->row.name);
  return JsonResponse(
      201,
      json::object{{"node", node}, {"name", created->row.name}, {"credential", created->secret}});
}

net::HttpResponse AgentsApi::HandleRegister(const net::HttpRequest& req, const Principal& by) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object()) {
    return ErrorResponse(400, "register: body must be a JSON object");
  }
  auto request = proto::RegisterRequest::Decode(*body);
  if (!request.ok()) return ErrorResponse(400, request.status().message());
  BERTH_RESPOND_IF_ERROR(SpeaksFor(by, request->name));
  static std::atomic<bool> warned{false};
  if (by.via == "cluster token" && !warned.exchange(true)) {
    LogWarn(
        "node {} registered with the cluster token, which lets any agent act as any node; "
        "give each node its own credential (docs/security.md \"Node credentials\")",
        request->name);
  }
  auto answer = c_.core.agents().Register(*request, req.remote_address);
  if (!answer.ok()) return ErrorResponse(answer.status());
  // Its new session's queue starts empty: what was waiting for the node is sent again.
  c_.terminals.InviteAgain(request->name);
  return JsonResponse(200, answer->Encode());
}

void AgentsApi::HandleWatch(const net::HttpRequest& req, const Principal& by,
                            std::shared_ptr<net::Responder> res) {
  if (Status st = SpeaksFor(by, req.Query("node")); !st.ok()) return res->Send(ErrorResponse(st));
  if (c_.stopping || !c_.streams.Attach(req.Query("node"), req.Query("session"), res)) {
    res->Send(ErrorResponse(409, "unknown agent session; register again"));
  }
}

// The node's end of an interactive session the server announced (server/http/terminal_bridges.h).
void AgentsApi::HandleAgentSession(const std::string& sid, const net::HttpRequest& req,
                                   const Principal& by, std::shared_ptr<net::Responder> res) {
  if (Status st = SpeaksFor(by, req.Query("node")); !st.ok()) return res->Send(ErrorResponse(st));
  if (Status st = c_.terminals.CheckWaiting(sid, req.Query("node")); !st.ok()) {
    return res->Send(ErrorResponse(st));
  }
  res->AcceptWebSocket(kSessionSubprotocol, [this, sid](std::shared_ptr<net::WebSocket> ws) {
    c_.terminals.Join(sid, std::move(ws));
  });
}

net::HttpResponse AgentsApi::HandleHeartbeat(const net::HttpRequest& req, const Principal& by) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object()) {
    return ErrorResponse(400, "heartbeat: body must be a JSON object");
  }
  auto request = proto::HeartbeatRequest::Decode(*body);
  if (!request.ok()) return ErrorResponse(400, request.status().message());
  BERTH_RESPOND_IF_ERROR(SpeaksFor(by, request->node));
  auto answer = c_.core.agents().Heartbeat(request->node, request->session);
  if (!answer.ok()) return ErrorResponse(answer.status());
  // (Only a heartbeat of the node's live session is heard: a stale agent's usage is not.)
  c_.gpu_usage.Update(request->node, std::move(request->gpu_usage), c_.clock.Now(),
                      std::move(request->gpus_now));
  return JsonResponse(200, answer->Encode());
}

net::HttpResponse AgentsApi::HandleHealth(const net::HttpRequest& req, const Principal& by) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object()) {
    return ErrorResponse(400, "health: body must be a JSON object");
  }
  auto request = proto::HealthRequest::Decode(*body);
  if (!request.ok()) return ErrorResponse(400, request.status().message());
  BERTH_RESPOND_IF_ERROR(SpeaksFor(by, request->node));
  auto answer = c_.core.agents().ReportHealth(*request);
  if (!answer.ok()) return ErrorResponse(answer.status());
  return JsonResponse(200, answer->Encode());
}

net::HttpResponse AgentsApi::HandleReport(const net::HttpRequest& req, const Principal& by) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object()) {
    return ErrorResponse(400, "report: body must be a JSON object");
  }
  auto batch = proto::ReportRequest::Decode(*body);
  if (!batch.ok()) return ErrorResponse(400, batch.status().message());
  BERTH_RESPOND_IF_ERROR(SpeaksFor(by, batch->node));
  auto results = c_.core.agents().Report(*batch);
  if (!results.ok()) return ErrorResponse(results.status());
  return JsonResponse(200, proto::ReportAnswer{std::move(*results)}.Encode());
}

net::HttpResponse AgentsApi::HandleLogAppend(const net::HttpRequest& req, const Principal& by) {
  auto append = proto::LogAppend::FromQuery(req.query);
  if (!append.ok()) return ErrorResponse(400, append.status().message());
  BERTH_RESPOND_IF_ERROR(SpeaksFor(by, append->node));
  auto prefix = c_.core.agents().LogPrefix(append->node, append->session, append->job,
                                           append->attempt, append->rank);
  if (!prefix.ok()) return ErrorResponse(prefix.status());
  auto size =
      c_.logs.Append(append->job, append->attempt, append->rank, append->offset, req.body, *prefix);
  if (!size.ok()) {
    return JsonResponse(
        409, proto::LogAppendAnswer{c_.logs.Size(append->job, append->attempt, append->rank),
                                    size.status().message()}
                 .Encode());
  }
  c_.core.reads().LogsAppended(append->job);
  return JsonResponse(200, proto::LogAppendAnswer{*size, ""}.Encode());
}

net::HttpResponse AgentsApi::HandleLogBatch(const net::HttpRequest& req, const Principal& by) {
  const std::string node = req.Query("node");
  const std::string session = req.Query("session");
  BERTH_RESPOND_IF_ERROR(SpeaksFor(by, node));
  auto pieces = proto::DecodeLogBatch(req.body);
  if (!pieces.ok()) return ErrorResponse(400, pieces.status().message());
  if (!c_.core.agents().SessionIs(node, session)) {
    return ErrorResponse(
        Status::Conflict("unknown agent session for node '" + node + "'; register again"));
  }
  proto::LogBatchAnswer answer;
  std::set<int64_t> appended;  // jobs whose followers are woken, once each
  Status ended;                // the session ended meanwhile: the agent registers and resends
  std::vector<proto::AttemptRank> ranks;
  ranks.reserve(pieces->size());
  for (const proto::LogPiece& p : *pieces) ranks.push_back({p.job, p.attempt, p.rank});
  // The core's lock once for the batch, not once per piece.
  std::vector<Result<std::string>> prefixes = c_.core.agents().LogPrefixes(node, session, ranks);
  for (size_t i = 0; i < pieces->size(); ++i) {
    const proto::LogPiece& p = (*pieces)[i];
    Result<std::string>& prefix = prefixes[i];
    if (!prefix.ok() && prefix.status().code() == Code::kConflict) {
      ended = prefix.status();
      break;
    }
    if (!prefix.ok()) {
      // Refused (not the node's rank): its size where the agent said, so that nothing of another
      // node's logs is told and the agent sees a refusal, not a gap.
      answer.results.push_back({p.offset, std::string(prefix.status().message())});
      continue;
    }
    auto size = c_.logs.Append(p.job, p.attempt, p.rank, p.offset, p.data, *prefix);
    if (!size.ok()) {  // a gap: the agent resumes from the size held
      answer.results.push_back(
          {c_.logs.Size(p.job, p.attempt, p.rank), std::string(size.status().message())});
      continue;
    }
    answer.results.push_back({*size, ""});
    appended.insert(p.job);
  }
  if (!appended.empty()) c_.core.reads().LogsAppended(appended);
  if (!ended.ok()) return ErrorResponse(ended);
  return JsonResponse(200, answer.Encode());
}

net::HttpResponse AgentsApi::HandleGetSpec(int64_t spec_id, const net::HttpRequest& req,
                                           const Principal& by) {
  // A spec holds its job's environment (secrets included): only a node that runs one of its jobs
  // may read it, naming its session and the job it launches.
  auto job = ParseDecimal(req.Query("job"));
  if (!job || req.Query("node").empty() || req.Query("session").empty()) {
    return ErrorResponse(Status::Invalid(
        "spec: say which node and session fetch it, for which job (?node=N&session=S&job=J)"));
  }
  BERTH_RESPOND_IF_ERROR(SpeaksFor(by, req.Query("node")));
  if (Status may =
          c_.core.agents().MayReadSpec(req.Query("node"), req.Query("session"), *job, spec_id);
      !may.ok()) {
    return ErrorResponse(may);
  }
  auto text = c_.store.GetSpec(spec_id);
  if (!text.ok()) return ErrorResponse(text.status());
  net::HttpResponse r;
  r.body = *text;
  return r;
}

net::HttpResponse AgentsApi::HandleAgentBlobs(const net::HttpRequest& req, const Principal& by) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object()) {
    return ErrorResponse(Status::Invalid(
        "blobs: body must be {\"node\", \"session\", \"job\", \"want\": [[digest, offset], ...]}"));
  }
  const json::object& o = body->as_object();
  auto node = GetString(o, "node");
  auto session = GetString(o, "session");
  auto job = GetInt(o, "job");
  if (!node.ok() || !session.ok() || !job.ok() || !o.contains("want") || !o.at("want").is_array()) {
    return ErrorResponse(Status::Invalid("blobs: node, session, job and want are required"));
  }
  std::vector<std::pair<std::string, int64_t>> wanted;
  for (const json::value& w : o.at("want").as_array()) {
    if (!w.is_array() || w.as_array().size() != 2 || !w.as_array()[0].is_string() ||
        !AsInt(w.as_array()[1])) {
      return ErrorResponse(Status::Invalid("blobs: want holds [digest, offset] pairs"));
    }
    wanted.emplace_back(std::string(w.as_array()[0].as_string()), *AsInt(w.as_array()[1]));
  }
  BERTH_RESPOND_IF_ERROR(SpeaksFor(by, *node));
  auto manifests = c_.core.agents().JobUploads(*node, *session, *job);
  if (!manifests.ok()) return ErrorResponse(manifests.status());
  auto frames = c_.uploads.ReadFrames(*manifests, wanted);
  if (!frames.ok()) return ErrorResponse(frames.status());
  net::HttpResponse r;
  r.status = 200;
  r.content_type = "application/octet-stream";
  r.body = std::move(*frames);
  return r;
}

}  // namespace berth
