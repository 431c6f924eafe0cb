// The agent's HTTP connection (agent/connection.h) against a real HTTP server on 127.0.0.1 that
// plays a server from before POST /v1/agent/logs/batch: the batch's 404 makes the connection send
// each piece on its own (and remember to), and the answers come back as a batch's, a refused
// piece (403) as a refusal at its own offset.
#include "agent/connection.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "net/http_server.h"
#include "protocol/agent_protocol.h"

namespace berth {
namespace {

TEST(HttpAgentConnection, ShipsPieceByPieceToAServerWithoutBatches) {
  std::mutex mu;
  std::vector<std::string> requests;  // "POST /path job offset size"
  net::HttpServerOptions o;
  o.threads = 1;
  net::HttpServer server(o, [&](net::HttpRequest&& req, std::shared_ptr<net::Responder> r) {
    {
      std::lock_guard lock(mu);
      requests.push_back(req.method + " " + req.path + " " + req.Query("job") + " " +
                         req.Query("offset") + " " + std::to_string(req.body.size()));
    }
    net::HttpResponse res;
    res.content_type = "application/json";
    if (req.path != "/v1/agent/logs") {
      res.status = 404;
      res.body = R"({"error":"no such route"})";
    } else if (req.Query("job") == "9") {
      res.status = 403;
      res.body = R"({"error":"node n1 holds no rank 0 of job 9"})";
    } else {
      res.body =
          R"({"size":)" + std::to_string(std::stoll(req.Query("offset")) + req.body.size()) + "}";
    }
    r->Send(std::move(res));
  });
  ASSERT_TRUE(server.Start().ok());
  HttpAgentConnection connection("http://127.0.0.1:" + std::to_string(server.port()), "");
  std::vector<proto::LogPiece> pieces = {
      {.job = 3, .attempt = 1, .rank = 0, .offset = 0, .data = "one\n"},
      {.job = 9, .attempt = 1, .rank = 0, .offset = 5, .data = "forged\n"},
      {.job = 4, .attempt = 1, .rank = 0, .offset = 10, .data = "two\n"},
  };
  auto answer = connection.AppendLogs("n1", "s1", pieces, 5'000);
  ASSERT_TRUE(answer.ok()) << answer.status().message();
  ASSERT_EQ(answer->results.size(), 3u);
  EXPECT_EQ(answer->results[0], (proto::LogAppendAnswer{4, ""}));
  EXPECT_EQ(answer->results[1].size, 5) << "refused where it started";
  EXPECT_NE(answer->results[1].error.find("holds no rank 0 of job 9"), std::string::npos);
  EXPECT_EQ(answer->results[2], (proto::LogAppendAnswer{14, ""}));
  // The next round goes piece by piece at once.
  ASSERT_TRUE(connection.AppendLogs("n1", "s1", {pieces[0]}, 5'000).ok());
  std::lock_guard lock(mu);
  EXPECT_EQ(requests, (std::vector<std::string>{
                          "POST /v1/agent/logs/batch   " +
                              std::to_string(proto::EncodeLogBatch(pieces).size()),
                          "POST /v1/agent/logs 3 0 4",
                          "POST /v1/agent/logs 9 5 7",
                          "POST /v1/agent/logs 4 10 4",
                          "POST /v1/agent/logs 3 0 4",
                      }));
}

}  // namespace
}  // namespace berth
