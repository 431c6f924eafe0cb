// SpecCache (server/core/spec_cache.h): specs kept only while held, and the specs sent to each
// node's session.
#include "server/core/spec_cache.h"

#include <gtest/gtest.h>

#include <vector>

namespace berth {
namespace {

std::shared_ptr<const JobSpec> Spec(const std::string& name) {
  JobSpec spec;
  spec.name = name;
  return std::shared_ptr<const JobSpec>(new JobSpec(spec));
}

// A thousand submissions come and go: only the held specs are found, and the map does not grow
// with history.
TEST(SpecCacheTest, ASpecIsKeptWhileAJobHoldsIt) {
  SpecCache cache;
  auto held = Spec("held");
  cache.Remember(1, held);
  for (int64_t id = 2; id <= 1000; ++id) cache.Remember(id, Spec("gone"));  // held by no one
  EXPECT_EQ(cache.Find(1), held);
  EXPECT_EQ(cache.Find(2), nullptr);
  EXPECT_LT(cache.size(), 130u);  // swept as expired entries outnumber live ones
}

// A burst of 5,000 jobs holding their specs at once, then all ended: the next sweep would come only
// at twice the burst, so the expired entries stay until the server's idle sweep.
TEST(SpecCacheTest, TheIdleSweepForgetsWhatABurstLeft) {
  SpecCache cache;
  std::vector<std::shared_ptr<const JobSpec>> burst;
  for (int64_t id = 1; id <= 5000; ++id) {
    burst.push_back(Spec("burst"));
    cache.Remember(id, burst.back());
  }
  auto held = burst.back();
  burst.clear();  // the burst's jobs ended, but one
  cache.Remember(5001, Spec("after"));
  EXPECT_GT(cache.size(), 5000u);
  cache.Sweep();
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.Find(5000), held);
  for (int64_t id = 5002; id <= 5200; ++id) cache.Remember(id, Spec("gone"));
  EXPECT_LT(cache.size(), 130u);  // the threshold went back down with the sweep
}

TEST(SpecCacheTest, EachSessionIsSentASpecOnce) {
  SpecCache cache;
  EXPECT_TRUE(cache.NeedsSending("n1", 7));
  EXPECT_FALSE(cache.NeedsSending("n1", 7));
  EXPECT_TRUE(cache.NeedsSending("n2", 7));  // another node
  cache.SessionChanged("n1");                // the agent restarted
  EXPECT_TRUE(cache.NeedsSending("n1", 7));
  // Sixteen are remembered per node: the seventeenth pushes the oldest out.
  for (int64_t id = 100; id < 116; ++id) EXPECT_TRUE(cache.NeedsSending("n3", id));
  EXPECT_FALSE(cache.NeedsSending("n3", 115));
  EXPECT_TRUE(cache.NeedsSending("n3", 116));
  EXPECT_TRUE(cache.NeedsSending("n3", 100));
}

}  // namespace
}  // namespace berth
