// One frame of `berth top` from the server's answers (cli/top_view.h).
#include "cli/top_view.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace berth::cli {
namespace {

using ::testing::HasSubstr;

json::object Parse(const std::string& text) { return json::parse(text).as_object(); }

// n1: devices 0-1 held by job 5, device 2 shared by jobs 6 and 7, device 3 free; n2 is down.
const char* kNodes = R"({"nodes": [
  {"name": "n1", "state": "UP", "capacity": {"cpus": 8, "memory": 64}, "free": {"cpus": 2, "memory": 32},
   "devices": [{"index": 0, "type": "V100", "free": 0, "jobs": [{"id": 5, "user": "alice"}]},
               {"index": 1, "type": "V100", "free": 0, "jobs": [{"id": 5, "user": "alice"}]},
               {"index": 2, "type": "V100", "free": 0, "jobs": [{"id": 6, "user": "bob"}, {"id": 7, "user": "bob"}]},
               {"index": 3, "type": "V100", "free": 1, "jobs": []}]},
  {"name": "n2", "state": "DOWN", "capacity": {"cpus": 8, "memory": 64}, "free": {"cpus": 8, "memory": 64},
   "devices": [{"index": 0, "type": "T4", "free": 1, "jobs": []}]}]})";

const char* kQueue = R"({"rows": [
  {"kind": "group", "group": 3, "id": 20, "name": "sweep", "user": "carol", "status": "PENDING",
   "reason": "", "counts": {"PENDING": 10, "RUNNING": 2}, "jobs": 12},
  {"kind": "job", "id": 9, "name": "train", "user": "dave", "status": "PENDING",
   "reason": "waiting for resources: needs V100:4 on 1 node"},
  {"kind": "job", "id": 5, "name": "big", "user": "alice", "status": "RUNNING", "reason": ""}],
  "active_not_shown": 0, "finished_shown": 0, "more_finished": false})";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(TopView, DrawsMapsLegendTotalsAndQueue) {
  const json::object nodes = Parse(kNodes);
  const json::object queue = Parse(kQueue);
  const std::string frame = RenderTop({.nodes = &nodes,
                                       .queue = &queue,
                                       .server = "http://x",
                                       .width = 100,
                                       .height = 40,
                                       .now = 1'790'000'000'000});
  EXPECT_THAT(frame, HasSubstr("nodes: 1 up, 0 draining, 1 down | GPUs: V100 3/4 used | jobs: "
                               "3 running, 11 pending"));
  EXPECT_THAT(frame, HasSubstr("[AA+.]"));  // job 5 twice, a shared device, a free one
  EXPECT_THAT(frame, HasSubstr("[x]"));     // the down node's device
  EXPECT_THAT(frame, HasSubstr("A=5 (alice)  B=6 (bob)  C=7 (bob)"));
  EXPECT_THAT(frame, HasSubstr("########--  #####-----"));  // CPUs 6 of 8, memory 32 of 64
  EXPECT_THAT(frame, HasSubstr("group 3    sweep             carol       10 PENDING, 2 RUNNING"));
  EXPECT_THAT(frame, HasSubstr("9          train             dave        PENDING: waiting for "
                               "resources: needs V100:4 on 1 node"));
}

TEST(TopView, StaysWithinTheScreen) {
  const json::object nodes = Parse(kNodes);
  const json::object queue = Parse(kQueue);
  const std::string frame = RenderTop(
      {.nodes = &nodes, .queue = &queue, .server = "http://x", .width = 40, .height = 12});
  const std::vector<std::string> lines = Lines(frame);
  EXPECT_LE(lines.size(), 12U);
  for (const std::string& line : lines) EXPECT_LE(line.size(), 40U) << line;
  EXPECT_THAT(frame, HasSubstr("(berth queue lists the rest)"));
}

}  // namespace
}  // namespace berth::cli
