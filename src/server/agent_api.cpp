// The agents' protocol over HTTP (docs/api.md, "Agent protocol"): each handler decodes the typed
// message (protocol/agent_protocol.h), calls the core, and encodes its answer.
#include <fmt/format.h>

#include "common/log.h"
#include "server/responses.h"
#include "server/server.h"

namespace berth {

net::HttpResponse Server::HandleRegister(const net::HttpRequest& req) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object()) {
    return ErrorResponse(400, "register: body must be a JSON object");
  }
  auto request = proto::RegisterRequest::Decode(*body);
  if (!request.ok()) return ErrorResponse(400, request.status().message());
  auto answer = core_->Register(*request, req.remote_address);
  if (!answer.ok()) return ErrorResponse(answer.status());
  return JsonResponse(200, answer->Encode());
}

void Server::HandleWatch(const net::HttpRequest& req, std::shared_ptr<net::Responder> res) {
  if (stopping_ || !streams_.Attach(req.Query("node"), req.Query("session"), res)) {
    res->Send(ErrorResponse(409, "unknown agent session; register again"));
  }
}

net::HttpResponse Server::HandleHeartbeat(const net::HttpRequest& req) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object()) {
    return ErrorResponse(400, "heartbeat: body must be a JSON object");
  }
  auto request = proto::HeartbeatRequest::Decode(*body);
  if (!request.ok()) return ErrorResponse(400, request.status().message());
  auto answer = core_->Heartbeat(request->node, request->session);
  if (!answer.ok()) return ErrorResponse(answer.status());
  return JsonResponse(200, answer->Encode());
}

net::HttpResponse Server::HandleReport(const net::HttpRequest& req) {
  auto body = ParseJson(req.body);
  if (!body.ok() || !body->is_object()) {
    return ErrorResponse(400, "report: body must be a JSON object");
  }
  auto batch = proto::ReportRequest::Decode(*body);
  if (!batch.ok()) return ErrorResponse(400, batch.status().message());
  auto results = core_->Report(*batch);
  if (!results.ok()) return ErrorResponse(results.status());
  return JsonResponse(200, proto::ReportAnswer{std::move(*results)}.Encode());
}

net::HttpResponse Server::HandleLogAppend(const net::HttpRequest& req) {
  auto append = proto::LogAppend::FromQuery(req.query);
  if (!append.ok()) return ErrorResponse(400, append.status().message());
  // Multi-node jobs also get an interleaved log, each line tagged "(rank R, node) ".
  auto prefix = core_->LogPrefix(append->node, append->session, append->job, append->rank);
  if (!prefix.ok()) return ErrorResponse(prefix.status());
  auto size =
      logs_->Append(append->job, append->attempt, append->rank, append->offset, req.body, *prefix);
  if (!size.ok()) {
    return JsonResponse(
        409, proto::LogAppendAnswer{logs_->Size(append->job, append->attempt, append->rank),
                                    size.status().message()}
                 .Encode());
  }
  core_->LogsAppended(append->job);
  return JsonResponse(200, proto::LogAppendAnswer{*size, ""}.Encode());
}

net::HttpResponse Server::HandleGetSpec(int64_t spec_id) {
  auto text = store_->GetSpec(spec_id);
  if (!text.ok()) {
    return ErrorResponse(text.status().code() == Code::kNotFound ? 404 : 500,
                         text.status().message());
  }
  net::HttpResponse r;
  r.body = *text;
  return r;
}

}  // namespace berth
