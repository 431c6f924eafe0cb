// PassMirror (src/server/core/pass_mirror.h): the scheduler thread's copy of the pass index, kept
// by deltas. Each test applies deltas as a pass would and checks the mirror against what the index
// would hold, and what a pass then finds eligible.
#include "server/core/pass_mirror.h"

#include <gtest/gtest.h>

#include <map>

namespace berth {
namespace {

MirroredPending Pending(uint64_t gen, std::optional<int64_t> awaits = std::nullopt) {
  MirroredPending p;
  p.request = std::make_shared<sched::JobRequest>();
  p.gen = gen;
  p.awaits_spec = awaits;
  return p;
}

MirroredHeld Held(uint64_t gen) {
  MirroredHeld h;
  h.view = std::make_shared<sched::RunningJob>();
  h.gen = gen;
  return h;
}

std::map<int64_t, uint64_t> Gens(const PassMirror::PendingEntries& entries) {
  std::map<int64_t, uint64_t> out;
  for (const auto& [id, p] : entries) out[id] = p.gen;
  return out;
}

TEST(PassMirrorTest, AFullDeltaReplacesWhatWasThere) {
  PassMirror mirror;
  PassDelta first;
  first.full = true;
  first.pending = {{1, Pending(1)}, {2, Pending(1)}};
  first.held = {{3, Held(1)}};
  mirror.Apply(first);
  PassDelta second;
  second.full = true;
  second.pending = {{2, Pending(2)}};
  mirror.Apply(second);
  EXPECT_EQ(Gens(mirror.pending()), (std::map<int64_t, uint64_t>{{2, 2}}));
  EXPECT_TRUE(mirror.held().empty()) << "a full delta without held jobs leaves none";
}

// A delta adds (in the middle and past the end), replaces and removes; a removal of an id the
// mirror never had is nothing; entries stay sorted by id.
TEST(PassMirrorTest, ADeltaAddsReplacesAndRemovesInIdOrder) {
  PassMirror mirror;
  PassDelta full;
  full.full = true;
  full.pending = {{10, Pending(1)}, {20, Pending(1)}, {30, Pending(1)}};
  mirror.Apply(full);

  PassDelta delta;
  delta.pending = {{5, Pending(1)},     // before the first
                   {10, std::nullopt},  // removed (placed)
                   {15, Pending(1)},    // in the middle
                   {20, Pending(2)},    // changed
                   {25, std::nullopt},  // never there
                   {40, Pending(1)}};   // past the end
  delta.held = {{10, Held(2)}};
  mirror.Apply(delta);
  EXPECT_EQ(Gens(mirror.pending()),
            (std::map<int64_t, uint64_t>{{5, 1}, {15, 1}, {20, 2}, {30, 1}, {40, 1}}));
  std::vector<int64_t> ids;
  for (const auto& [id, p] : mirror.pending()) ids.push_back(id);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  ASSERT_EQ(mirror.held().size(), 1u);
  EXPECT_EQ(mirror.held()[0].first, 10);

  PassDelta appended;  // a submission's new jobs only: appended
  appended.pending = {{41, Pending(1)}, {42, Pending(1)}};
  mirror.Apply(appended);
  EXPECT_EQ(mirror.pending().size(), 7u);
  EXPECT_EQ(mirror.pending().back().first, 42);
}

// The submissions whose dependencies are awaited are counted as entries come and go, so that a
// pass asks about each one once.
TEST(PassMirrorTest, AwaitedSpecsFollowTheEntries) {
  PassMirror mirror;
  PassDelta full;
  full.full = true;
  full.pending = {{1, Pending(1, 7)}, {2, Pending(1, 7)}, {3, Pending(1, 8)}, {4, Pending(1)}};
  mirror.Apply(full);
  EXPECT_EQ(mirror.AwaitedSpecs(), (std::vector<int64_t>{7, 8}));

  PassDelta delta;
  delta.pending = {{1, std::nullopt}, {3, Pending(2)}};  // 3 placed once: awaits nothing now
  mirror.Apply(delta);
  EXPECT_EQ(mirror.AwaitedSpecs(), (std::vector<int64_t>{7}));
  PassDelta last;
  last.pending = {{2, std::nullopt}};
  mirror.Apply(last);
  EXPECT_TRUE(mirror.AwaitedSpecs().empty());
}

TEST(PassMirrorTest, EligibleUnlessBackingOffOwedACancelOrAwaitingDependencies) {
  const std::set<int64_t> none;
  MirroredPending plain = Pending(1);
  EXPECT_TRUE(PassEligible(1, plain, 1000, none, none));
  EXPECT_FALSE(PassEligible(1, plain, 1000, {1}, none)) << "a cancel of it is owed";

  MirroredPending backing_off = Pending(1);
  backing_off.not_before = 2000;
  EXPECT_FALSE(PassEligible(1, backing_off, 1999, none, none));
  EXPECT_TRUE(PassEligible(1, backing_off, 2000, none, none));

  MirroredPending waiting = Pending(1, 7);
  EXPECT_FALSE(PassEligible(1, waiting, 1000, none, {8}));
  EXPECT_TRUE(PassEligible(1, waiting, 1000, none, {7}));
}

}  // namespace
}  // namespace berth
