// WatchStreams: each node's watch stream — queued lines flushed at attach, a stale session refused,
// and the keep-alive pings spread so that each stream gets one per cycle, however many there are.
#include "server/watch_streams.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace berth::testing {
namespace {

// A stream that records the lines written to it.
class RecordingStream final : public net::Responder {
 public:
  void Send(net::HttpResponse) override {}
  void StartStream(int, std::string) override { started_ = true; }
  bool Write(std::string chunk) override {
    lines_.push_back(std::move(chunk));
    return true;
  }
  void End() override { ended_ = true; }
  bool closed() const override { return ended_; }
  size_t backlog() const override { return 0; }

  int Pings() const {
    int n = 0;
    for (const auto& line : lines_) n += line.find("\"ping\"") != std::string::npos;
    return n;
  }
  const std::vector<std::string>& lines() const { return lines_; }
  bool started() const { return started_; }
  bool ended() const { return ended_; }

 private:
  std::vector<std::string> lines_;
  bool started_ = false;
  bool ended_ = false;
};

std::shared_ptr<RecordingStream> AttachNode(WatchStreams& streams, const std::string& node) {
  streams.Open(node, "session-" + node);
  auto stream = std::make_shared<RecordingStream>();
  EXPECT_TRUE(streams.Attach(node, "session-" + node, stream));
  return stream;
}

TEST(WatchStreams, QueuedLinesAreFlushedAfterTheHelloAndAStaleSessionIsRefused) {
  WatchStreams streams;
  streams.Open("n1", "s1");
  proto::LaunchMessage launch;
  launch.job = 7;
  streams.Send("n1", launch);
  auto stale = std::make_shared<RecordingStream>();
  EXPECT_FALSE(streams.Attach("n1", "s0", stale));
  EXPECT_FALSE(stale->started());
  auto stream = std::make_shared<RecordingStream>();
  ASSERT_TRUE(streams.Attach("n1", "s1", stream));
  ASSERT_EQ(stream->lines().size(), 2u);
  EXPECT_NE(stream->lines()[0].find("hello"), std::string::npos);
  EXPECT_NE(stream->lines()[1].find("\"job\":7"), std::string::npos);
  streams.Close("n1");
  EXPECT_TRUE(stream->ended());
}

TEST(WatchStreams, ALoneStreamIsPingedOncePerCycleNotAtEveryTick) {
  WatchStreams streams;
  auto stream = AttachNode(streams, "n1");
  for (int tick = 0; tick < 25; ++tick) streams.PingSome(25);
  EXPECT_EQ(stream->Pings(), 1);
  for (int tick = 0; tick < 50; ++tick) streams.PingSome(25);
  EXPECT_EQ(stream->Pings(), 3);
}

TEST(WatchStreams, EveryStreamIsPingedOncePerCycleAndAtMostTheirShareAtATime) {
  for (int nodes : {3, 25, 60}) {
    WatchStreams streams;
    std::map<std::string, std::shared_ptr<RecordingStream>> attached;
    for (int i = 0; i < nodes; ++i) {
      std::string name = "n" + std::to_string(i);
      attached[name] = AttachNode(streams, name);
    }
    int most_in_one_tick = 0;
    int before = 0;
    for (int tick = 0; tick < 25; ++tick) {
      streams.PingSome(25);
      int total = 0;
      for (const auto& [name, s] : attached) total += s->Pings();
      most_in_one_tick = std::max(most_in_one_tick, total - before);
      before = total;
    }
    for (const auto& [name, s] : attached) EXPECT_EQ(s->Pings(), 1) << name << " of " << nodes;
    EXPECT_LE(most_in_one_tick, (nodes + 24) / 25) << nodes << " streams";
  }
}

}  // namespace
}  // namespace berth::testing
