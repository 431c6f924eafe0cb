// WatchStreams: each node's watch stream — queued lines flushed at attach, a stale session refused,
// and the keep-alive pings spread so that each stream gets one per cycle, however many there are.
#include "server/http/watch_streams.h"

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
  size_t backlog() const override { return backlog_; }
  void SetBacklog(size_t bytes) { backlog_ = bytes; }

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
  size_t backlog_ = 0;
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

// A stalled agent (TCP open, not reading) made the server buffer without limit. Past the cap its
// stream is ended and its session forgotten here: the agent registers again (which reconciles),
// and until then nothing more is kept for it.
TEST(WatchStreams, AStreamWhosePeerStoppedReadingIsEndedAtItsCap) {
  WatchStreams streams;
  auto stalled = AttachNode(streams, "n1");
  proto::LaunchMessage launch;
  launch.job = 7;
  streams.Send("n1", launch);
  EXPECT_FALSE(stalled->ended());
  stalled->SetBacklog(WatchStreams::kMaxBacklogBytes);
  streams.Send("n1", launch);
  EXPECT_TRUE(stalled->ended());
  auto again = std::make_shared<RecordingStream>();
  EXPECT_FALSE(streams.Attach("n1", "session-n1", again)) << "the old session must register again";
  // Registered again: a new session, an empty queue.
  auto fresh = AttachNode(streams, "n1");
  streams.Send("n1", launch);
  EXPECT_EQ(fresh->lines().size(), 2u);  // hello, launch
}

// No stream attached: the node's queue is capped the same way.
TEST(WatchStreams, AQueueWithNoStreamIsDroppedAtItsCap) {
  WatchStreams streams;
  streams.Open("n1", "s1");
  proto::SpecMessage big{1, std::string(1 << 20, 'x')};
  for (int i = 0; i < 20; ++i) streams.Send("n1", big);
  auto late = std::make_shared<RecordingStream>();
  EXPECT_FALSE(streams.Attach("n1", "s1", late));
  streams.Open("n1", "s2");
  auto fresh = std::make_shared<RecordingStream>();
  ASSERT_TRUE(streams.Attach("n1", "s2", fresh));
  EXPECT_EQ(fresh->lines().size(), 1u);  // the hello only
}

}  // namespace
}  // namespace berth::testing
