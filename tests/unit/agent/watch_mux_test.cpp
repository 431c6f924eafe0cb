// Many watch streams on one thread (agent/watch_mux.h) against a real HTTP server on
// 127.0.0.1 that plays the server's GET /v1/agent/watch: each node's messages arrive in order and
// under its own number (a message split over two chunks too), the request names the node and
// session and carries the token, a 409 ends the stream as Conflict, the server ending a stream is
// reported, a reopened node's old stream is closed without a report, a stream goes to the server
// its Open names (of several), and Stop() ends Run().
#include "agent/watch_mux.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/http_server.h"
#include "protocol/agent_protocol.h"

namespace berth {
namespace {

using namespace std::chrono_literals;

std::string Line(int64_t job) {
  return proto::EncodeWatchLine(proto::StopMessage{.job = job, .attempt = 1, .rank = 0});
}

class WatchMuxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two servers on one store: what each receives is tagged with its number.
    for (int tag : {0, 1}) {
      net::HttpServerOptions o;
      o.threads = 1;
      auto server = std::make_unique<net::HttpServer>(
          o, [this, tag](net::HttpRequest&& req, std::shared_ptr<net::Responder> r) {
            std::lock_guard lock(mu_);
            requests_.push_back(req.path + "?node=" + req.Query("node") + "&session=" +
                                req.Query("session") + " " + req.Header("authorization"));
            servers_asked_.push_back(tag);
            const std::string node = req.Query("node");
            if (req.Query("session") == "stale") {
              r->Send({.status = 409, .body = R"({"error":"unknown session"})"});
              return;
            }
            r->StartStream(200, "application/x-ndjson");
            streams_[node].push_back(r);
            cv_.notify_all();
          });
      ASSERT_TRUE(server->Start().ok());
      urls_.push_back("http://127.0.0.1:" + std::to_string(server->port()));
      (tag == 0 ? server_ : second_) = std::move(server);
    }
    auto streams =
        WatchMux::Make(urls_, "tok",
                       {.on_message =
                            [this](size_t node, const proto::WatchMessage& m) {
                              std::lock_guard lock(mu_);
                              if (const auto* stop = std::get_if<proto::StopMessage>(&m)) {
                                got_.push_back({node, stop->job});
                              }
                              cv_.notify_all();
                            },
                        .on_end =
                            [this](size_t node, const Status& why) {
                              std::lock_guard lock(mu_);
                              ended_.push_back({node, why.code()});
                              cv_.notify_all();
                            }});
    ASSERT_TRUE(streams.ok()) << streams.status().message();
    streams_under_test_ = std::move(*streams);
    runner_ = std::thread([this] { streams_under_test_->Run(); });
  }

  void TearDown() override {
    if (streams_under_test_) streams_under_test_->Stop();
    if (runner_.joinable()) runner_.join();
    server_->Stop();
    second_->Stop();
  }

  // The server's responder for `node`'s n-th stream, once it asked.
  std::shared_ptr<net::Responder> StreamOf(const std::string& node, size_t n = 0) {
    std::unique_lock lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, 10s, [&] { return streams_[node].size() > n; })) << node;
    return streams_[node].size() > n ? streams_[node][n] : nullptr;
  }

  template <typename Pred>
  bool WaitFor(Pred pred) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, pred);
  }

  std::unique_ptr<net::HttpServer> server_;
  std::unique_ptr<net::HttpServer> second_;
  std::vector<std::string> urls_;
  std::vector<int> servers_asked_;  // which server each request went to
  std::unique_ptr<WatchMux> streams_under_test_;
  std::thread runner_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> requests_;
  std::map<std::string, std::vector<std::shared_ptr<net::Responder>>> streams_;
  std::vector<std::pair<size_t, int64_t>> got_;  // (node, job of a stop message)
  std::vector<std::pair<size_t, Code>> ended_;   // (node, why)
};

TEST_F(WatchMuxTest, EachNodesMessagesArriveInOrderUnderItsNumber) {
  streams_under_test_->Open(7, "h-7", "s7");
  streams_under_test_->Open(9, "h-9", "s9");
  auto seven = StreamOf("h-7");
  auto nine = StreamOf("h-9");
  ASSERT_TRUE(seven && nine);
  const std::string split = Line(2);
  ASSERT_TRUE(seven->Write(Line(1) + split.substr(0, 5)));
  ASSERT_TRUE(nine->Write(Line(100)));
  ASSERT_TRUE(WaitFor([&] { return got_.size() == 2; }));
  ASSERT_TRUE(seven->Write(split.substr(5) + "{\"type\":\"from-a-newer-server\"}\n" + Line(3)));
  ASSERT_TRUE(WaitFor([&] { return got_.size() == 4; }));
  std::vector<int64_t> of_seven, of_nine;
  for (const auto& [node, job] : got_) (node == 7 ? of_seven : of_nine).push_back(job);
  EXPECT_EQ(of_seven, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(of_nine, (std::vector<int64_t>{100}));
  std::lock_guard lock(mu_);
  EXPECT_EQ(requests_.size(), 2u);
  for (const auto& r : requests_) EXPECT_NE(r.find("Bearer tok"), std::string::npos) << r;
  EXPECT_NE(std::find(requests_.begin(), requests_.end(),
                      "/v1/agent/watch?node=h-7&session=s7 Bearer tok"),
            requests_.end());
  EXPECT_TRUE(ended_.empty());
}

TEST_F(WatchMuxTest, AnUnknownSessionEndsAsConflictAndAnEndedStreamIsReported) {
  streams_under_test_->Open(1, "h-1", "stale");
  ASSERT_TRUE(WaitFor([&] { return ended_.size() == 1; }));
  EXPECT_EQ(ended_[0], (std::pair<size_t, Code>{1, Code::kConflict}));
  streams_under_test_->Open(2, "h-2", "s2");
  auto two = StreamOf("h-2");
  ASSERT_TRUE(two);
  two->End();
  ASSERT_TRUE(WaitFor([&] { return ended_.size() == 2; }));
  EXPECT_EQ(ended_[1], (std::pair<size_t, Code>{2, Code::kUnavailable}));
}

TEST_F(WatchMuxTest, ReopeningANodeClosesItsOldStreamWithoutAReport) {
  streams_under_test_->Open(4, "h-4", "old");
  auto old_stream = StreamOf("h-4", 0);
  streams_under_test_->Open(4, "h-4", "new");
  auto new_stream = StreamOf("h-4", 1);
  ASSERT_TRUE(old_stream && new_stream);
  ASSERT_TRUE(new_stream->Write(Line(5)));
  ASSERT_TRUE(WaitFor([&] { return got_.size() == 1; }));
  // The old stream's peer went away: writes to it fail once the close is seen.
  for (int i = 0; i < 200 && old_stream->Write(Line(6)); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(old_stream->Write(Line(6)));
  std::this_thread::sleep_for(50ms);
  std::lock_guard lock(mu_);
  EXPECT_EQ(got_, (std::vector<std::pair<size_t, int64_t>>{{4, 5}}));
  EXPECT_TRUE(ended_.empty());
}

// Several servers: a stream goes to the server its Open names (the one that answered the node's
// registration); reopened at another one, it moves there.
TEST_F(WatchMuxTest, AStreamIsOpenedAtTheServerItsOpenNames) {
  streams_under_test_->Open(3, "h-3", "s3", 1);
  auto at_second = StreamOf("h-3", 0);
  ASSERT_TRUE(at_second);
  ASSERT_TRUE(at_second->Write(Line(30)));
  ASSERT_TRUE(WaitFor([&] { return got_.size() == 1; }));
  streams_under_test_->Open(3, "h-3", "s3-again", 0);
  auto at_first = StreamOf("h-3", 1);
  ASSERT_TRUE(at_first);
  ASSERT_TRUE(at_first->Write(Line(31)));
  ASSERT_TRUE(WaitFor([&] { return got_.size() == 2; }));
  std::lock_guard lock(mu_);
  EXPECT_EQ(servers_asked_, (std::vector<int>{1, 0}));
  EXPECT_EQ(got_, (std::vector<std::pair<size_t, int64_t>>{{3, 30}, {3, 31}}));
  EXPECT_TRUE(ended_.empty());
}

TEST(WatchMux, NeedsAServer) {
  auto streams = WatchMux::Make({}, "", {});
  ASSERT_FALSE(streams.ok());
  EXPECT_EQ(streams.status().code(), Code::kInvalidArgument);
}

TEST_F(WatchMuxTest, StopEndsRunWithStreamsOpen) {
  streams_under_test_->Open(1, "h-1", "s1");
  ASSERT_TRUE(StreamOf("h-1"));
  streams_under_test_->Stop();
  runner_.join();
  std::lock_guard lock(mu_);
  EXPECT_TRUE(ended_.empty()) << "a stream closed by Stop is not reported";
}

TEST(WatchMux, SpeaksPlainHttpOnly) {
  auto streams = WatchMux::Make({"https://127.0.0.1:1"}, "", {});
  ASSERT_FALSE(streams.ok());
  EXPECT_EQ(streams.status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(WatchMux::Make({"unix:/tmp/berth.sock"}, "", {}).ok());
}

}  // namespace
}  // namespace berth
