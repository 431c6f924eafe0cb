// SubmitQueue (server/core/submit_queue.h): who writes for whom, the group's cap, repeated keys
// within a group and across groups, what a failed commit leaves remembered, and the memory's end.
#include "server/core/submit_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace berth {
namespace {

constexpr DurationMs kKeyMemory = 60'000;

SubmitQueue::Entry MakeEntry(const std::string& user, const std::string& key = "",
                             const std::string& fingerprint = "", int count = 1) {
  SubmitQueue::Entry e;
  e.user = user;
  e.key = key;
  e.fingerprint = fingerprint;
  e.count = count;
  return e;
}

SubmitResult Stored(int64_t first, int count) {
  SubmitResult r;
  for (int i = 0; i < count; ++i) r.ids.push_back(first + i);
  return r;
}

// What a writer does between TakeGroup and Finish: every entry it writes gets jobs from `next_id`.
std::vector<SubmitResult> WriteAll(const SubmitQueue::Group& group, int64_t next_id) {
  std::vector<SubmitResult> out;
  for (SubmitQueue::Entry* e : group.Writing()) {
    out.push_back(Stored(next_id, e->count));
    e->answer = SubmitAnswer{.group = std::nullopt, .ids = out.back().ids};
    next_id += e->count;
  }
  return out;
}

// Joins `entry` on a thread of its own; `wrote` says whether it became a writer.
class Joiner {
 public:
  Joiner(SubmitQueue& queue, SubmitQueue::Entry& entry)
      : thread_([&queue, &entry, this] { wrote_ = queue.Join(entry); }) {}
  ~Joiner() {
    if (thread_.joinable()) thread_.join();
  }
  bool Wrote() {
    thread_.join();
    return wrote_;
  }

 private:
  std::atomic<bool> wrote_{false};
  std::thread thread_;
};

void WaitQueued(SubmitQueue& queue, size_t n) {
  while (queue.QueuedForTesting() < n) std::this_thread::yield();
}

TEST(SubmitQueueTest, AloneItWritesForItselfAndIsDone) {
  SubmitQueue queue(100, kKeyMemory);
  SubmitQueue::Entry a = MakeEntry("alice");
  ASSERT_TRUE(queue.Join(a));
  SubmitQueue::Group group = queue.TakeGroup();
  ASSERT_EQ(group.entries, std::vector<SubmitQueue::Entry*>{&a});
  EXPECT_EQ(group.Writing(), std::vector<SubmitQueue::Entry*>{&a});
  queue.Finish(group, WriteAll(group, 1), 0);
  EXPECT_TRUE(a.done);
  ASSERT_TRUE(a.answer.ok());
  EXPECT_EQ(a.answer->ids, std::vector<int64_t>{1});
  EXPECT_EQ(queue.QueuedForTesting(), 0u);
}

TEST(SubmitQueueTest, TheFrontWriterWritesForThoseQueuedBehindItUpToTheCap) {
  SubmitQueue queue(5, kKeyMemory);
  SubmitQueue::Entry a = MakeEntry("alice", "", "", 2);
  SubmitQueue::Entry b = MakeEntry("bob", "", "", 3);
  SubmitQueue::Entry c = MakeEntry("carol", "", "", 1);  // 2 + 3 + 1 > 5: the next group's
  ASSERT_TRUE(queue.Join(a));
  Joiner jb(queue, b);
  WaitQueued(queue, 2);
  Joiner jc(queue, c);
  WaitQueued(queue, 3);

  SubmitQueue::Group first = queue.TakeGroup();
  ASSERT_EQ(first.entries, (std::vector<SubmitQueue::Entry*>{&a, &b}));
  queue.Finish(first, WriteAll(first, 1), 0);
  EXPECT_FALSE(jb.Wrote());  // answered by a's writer
  ASSERT_TRUE(b.answer.ok());
  EXPECT_EQ(b.answer->ids, (std::vector<int64_t>{3, 4, 5}));

  ASSERT_TRUE(jc.Wrote());  // now at the front: it writes for itself
  SubmitQueue::Group second = queue.TakeGroup();
  ASSERT_EQ(second.entries, std::vector<SubmitQueue::Entry*>{&c});
  queue.Finish(second, WriteAll(second, 6), 0);
  EXPECT_EQ(c.answer->ids, std::vector<int64_t>{6});
}

TEST(SubmitQueueTest, OneSubmissionOverTheCapIsStillWritten) {
  SubmitQueue queue(5, kKeyMemory);
  SubmitQueue::Entry a = MakeEntry("alice", "", "", 50);
  ASSERT_TRUE(queue.Join(a));
  EXPECT_EQ(queue.TakeGroup().entries, std::vector<SubmitQueue::Entry*>{&a});
}

TEST(SubmitQueueTest, AKeyRepeatedInOneGroupIsWrittenOnceAndAnotherBodyIsAConflict) {
  SubmitQueue queue(100, kKeyMemory);
  SubmitQueue::Entry a = MakeEntry("alice", "k1", "body-1");
  SubmitQueue::Entry retry = MakeEntry("alice", "k1", "body-1");
  SubmitQueue::Entry reuse = MakeEntry("alice", "k1", "body-2");
  SubmitQueue::Entry other_user = MakeEntry("bob", "k1", "body-9");  // keys are per user
  ASSERT_TRUE(queue.Join(a));
  Joiner j1(queue, retry);
  WaitQueued(queue, 2);
  Joiner j2(queue, reuse);
  WaitQueued(queue, 3);
  Joiner j3(queue, other_user);
  WaitQueued(queue, 4);

  SubmitQueue::Group group = queue.TakeGroup();
  ASSERT_EQ(group.entries.size(), 4u);
  EXPECT_EQ(group.Writing(), (std::vector<SubmitQueue::Entry*>{&a, &other_user}));
  EXPECT_EQ(group.repeats_of[1], &a);
  EXPECT_EQ(group.repeats_of[2], &a);
  queue.Finish(group, WriteAll(group, 10), 0);
  EXPECT_FALSE(j1.Wrote());
  EXPECT_FALSE(j2.Wrote());
  EXPECT_FALSE(j3.Wrote());
  ASSERT_TRUE(retry.answer.ok());
  EXPECT_EQ(retry.answer->ids, std::vector<int64_t>{10});
  ASSERT_FALSE(reuse.answer.ok());
  EXPECT_EQ(reuse.answer.status().code(), Code::kConflict);
  EXPECT_NE(reuse.answer.status().message().find("idempotency key 'k1'"), std::string::npos);
  EXPECT_EQ(other_user.answer->ids, std::vector<int64_t>{11});
}

TEST(SubmitQueueTest, AKeyCommittedLatelyAnswersALaterGroupWithoutAWrite) {
  SubmitQueue queue(100, kKeyMemory);
  SubmitQueue::Entry a = MakeEntry("alice", "k1", "body-1");
  ASSERT_TRUE(queue.Join(a));
  SubmitQueue::Group g1 = queue.TakeGroup();
  queue.Finish(g1, WriteAll(g1, 1), 1'000);
  EXPECT_EQ(queue.RememberedKeysForTesting(), 1u);

  SubmitQueue::Entry retry = MakeEntry("alice", "k1", "body-1");
  ASSERT_TRUE(queue.Join(retry));
  SubmitQueue::Group g2 = queue.TakeGroup();
  EXPECT_EQ(g2.repeats_of[0], &retry);  // answered already
  EXPECT_TRUE(g2.Writing().empty());
  ASSERT_TRUE(retry.answer.ok());
  EXPECT_EQ(retry.answer->ids, std::vector<int64_t>{1});
  queue.Finish(g2, std::vector<SubmitResult>{}, 2'000);

  SubmitQueue::Entry reuse = MakeEntry("alice", "k1", "body-2");
  ASSERT_TRUE(queue.Join(reuse));
  SubmitQueue::Group g3 = queue.TakeGroup();
  EXPECT_EQ(reuse.answer.status().code(), Code::kConflict);
  queue.Finish(g3, std::vector<SubmitResult>{}, 3'000);
}

TEST(SubmitQueueTest, AFailedCommitRemembersNoKey) {
  SubmitQueue queue(100, kKeyMemory);
  SubmitQueue::Entry a = MakeEntry("alice", "k1", "body-1");
  ASSERT_TRUE(queue.Join(a));
  SubmitQueue::Group group = queue.TakeGroup();
  a.answer = Status::Unavailable("disk full");
  queue.Finish(group, Status::Unavailable("disk full"), 0);
  EXPECT_EQ(queue.RememberedKeysForTesting(), 0u);
  EXPECT_TRUE(a.done);

  // So the retry writes.
  SubmitQueue::Entry retry = MakeEntry("alice", "k1", "body-1");
  ASSERT_TRUE(queue.Join(retry));
  EXPECT_EQ(queue.TakeGroup().Writing(), std::vector<SubmitQueue::Entry*>{&retry});
}

TEST(SubmitQueueTest, KeysAreForgottenAfterTheMemory) {
  SubmitQueue queue(100, kKeyMemory);
  SubmitQueue::Entry a = MakeEntry("alice", "k1", "body-1");
  ASSERT_TRUE(queue.Join(a));
  SubmitQueue::Group g1 = queue.TakeGroup();
  queue.Finish(g1, WriteAll(g1, 1), 1'000);

  SubmitQueue::Entry b = MakeEntry("alice", "k2", "body-2");
  ASSERT_TRUE(queue.Join(b));
  SubmitQueue::Group g2 = queue.TakeGroup();
  queue.Finish(g2, WriteAll(g2, 2), 1'000 + kKeyMemory + 1);
  EXPECT_EQ(queue.RememberedKeysForTesting(), 1u);  // k1 forgotten, k2 kept
}

TEST(SubmitQueueTest, ManyConcurrentSubmittersAreEachAnsweredOnce) {
  SubmitQueue queue(7, kKeyMemory);
  constexpr int kThreads = 16;
  std::atomic<int64_t> next_id{1};
  std::vector<SubmitQueue::Entry> entries(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    entries[static_cast<size_t>(t)] = MakeEntry("user" + std::to_string(t % 3), "", "", 1 + t % 3);
    threads.emplace_back([&, t] {
      SubmitQueue::Entry& e = entries[static_cast<size_t>(t)];
      if (!queue.Join(e)) return;
      SubmitQueue::Group group = queue.TakeGroup();
      int jobs = 0;
      for (SubmitQueue::Entry* w : group.Writing()) jobs += w->count;
      queue.Finish(group, WriteAll(group, next_id.fetch_add(jobs)), 0);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> all;
  for (const auto& e : entries) {
    EXPECT_TRUE(e.done);
    ASSERT_TRUE(e.answer.ok());
    EXPECT_EQ(e.answer->ids.size(), static_cast<size_t>(e.count));
    all.insert(all.end(), e.answer->ids.begin(), e.answer->ids.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());  // no job given twice
  EXPECT_EQ(queue.QueuedForTesting(), 0u);
}

}  // namespace
}  // namespace berth
