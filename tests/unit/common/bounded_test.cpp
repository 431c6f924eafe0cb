// The bounded containers long-lived processes keep: the LRU cache, and an executor that refuses
// work past its queue's bound (and reaches each of its threads for the idle heap trim).
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <set>
#include <thread>

#include "common/executor.h"
#include "common/lru_cache.h"
#include "common/mutex.h"

namespace berth {
namespace {

TEST(LruCache, ForgetsTheLeastRecentlyUsedPastItsCapacity) {
  LruCache<int, std::string> cache(2);
  cache.Put(1, "one");
  cache.Put(2, "two");
  ASSERT_NE(cache.Find(1), nullptr);  // 1 is now the most recently used
  cache.Put(3, "three");              // 2 goes
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Find(2), nullptr);
  EXPECT_EQ(*cache.Find(1), "one");
  EXPECT_EQ(*cache.Find(3), "three");
  cache.Put(1, "uno");  // an update, not a new entry
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(*cache.Find(1), "uno");
  cache.Erase(1);
  EXPECT_EQ(cache.Find(1), nullptr);
  EXPECT_EQ(cache.size(), 1u);
}

// The server's handler queues were unbounded: a flood of requests queued without limit. TryPost
// refuses past the bound (the server answers 503 with Retry-After), and takes work again once
// the queue drains.
TEST(Executor, TryPostRefusesPastItsBound) {
  Executor exec(1, "test");
  std::latch release(1);
  std::atomic<int> ran{0};
  ASSERT_TRUE(exec.TryPost([&] { release.wait(); }, 10));  // holds the only thread
  while (exec.queued() != 0) std::this_thread::yield();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(exec.TryPost([&] { ++ran; }, 3));
  EXPECT_FALSE(exec.TryPost([&] { ++ran; }, 3));
  release.count_down();
  while (exec.queued() != 0) std::this_thread::yield();
  EXPECT_TRUE(exec.TryPost([&] { ++ran; }, 3));
  exec.Stop();
  EXPECT_EQ(ran.load(), 4);
}

// The idle heap trim (common/heap.h) must reach every thread of an executor, also one that is busy
// when it is posted: that thread runs it after its task, and a busy thread piles up no second one.
TEST(Executor, PostToEachThreadRunsOnceOnEveryThread) {
  Executor exec(3, "test");
  std::latch release(1);
  std::atomic<bool> holding{false};
  exec.Post([&] {
    holding = true;
    release.wait();
  });
  while (!holding) std::this_thread::yield();
  Mutex mu;
  std::set<std::thread::id> ran;
  std::atomic<int> runs{0};
  auto task = [&] {
    MutexLock lock(mu);
    ran.insert(std::this_thread::get_id());
    ++runs;
  };
  EXPECT_EQ(exec.PostToEachThread(task), 3);
  while (runs < 2) std::this_thread::yield();  // the two idle threads
  EXPECT_EQ(exec.PostToEachThread(task), 2);   // not the busy one: it still owes the first
  while (runs < 4) std::this_thread::yield();
  release.count_down();  // the busy one runs its one after its task
  while (runs < 5) std::this_thread::yield();
  exec.Stop();
  EXPECT_EQ(runs.load(), 5);
  MutexLock lock(mu);
  EXPECT_EQ(ran.size(), 3u);
}

}  // namespace
}  // namespace berth
