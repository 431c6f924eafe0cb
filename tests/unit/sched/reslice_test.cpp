// Re-slicing (sched/reslice.h): NVIDIA's placement rules, and golden scenarios of which idle GPU
// gets which layout for what demand — never a busy one, never within the hold time, one change for
// one demand.
#include "sched/reslice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

namespace berth::sched {
namespace {

using ::testing::ElementsAre;

constexpr DurationMs kHold = 10 * 60 * 1000;
constexpr TimeMs kNow = 1'000'000'000;

ResliceGpu Gpu(const std::string& node, int gpu, std::vector<std::string> layout) {
  return ResliceGpu{
      .node = node, .gpu = gpu, .gpu_type = "A100", .layout = std::move(layout), .allowed = true};
}

std::string Describe(const std::optional<ResliceDecision>& d) {
  if (!d) return "none";
  std::string to;
  for (const auto& p : d->to) to += (to.empty() ? "" : ",") + p;
  return d->node + " gpu " + std::to_string(d->gpu) + " -> " + to + " (" + d->reason + ")";
}

TEST(ResliceRules, AProfilesMemorySaysHowManyMemorySlicesItTakes) {
  EXPECT_EQ(MemorySlicesOf("3g.40gb", 10), 4);
  EXPECT_EQ(MemorySlicesOf("4g.40gb", 10), 4);
  EXPECT_EQ(MemorySlicesOf("2g.20gb", 10), 2);
  EXPECT_EQ(MemorySlicesOf("1g.10gb", 10), 1);
  EXPECT_EQ(MemorySlicesOf("1g.20gb", 10), 2);  // twice the memory
  EXPECT_EQ(MemorySlicesOf("1g.10gb+me", 10), 1);
  EXPECT_EQ(MemorySlicesOf("7g.80gb", 10), 8);
  EXPECT_EQ(MemorySlicesOf("7g.141gb", 141.0 / 8), 8);  // H200: names round the memory
  EXPECT_EQ(MemorySlicesOf("1g.18gb", 141.0 / 8), 1);
  EXPECT_EQ(MemorySlicesOf("3g.20gb", 10), 0);  // a 40 GB A100's, not an 80 GB one's
  EXPECT_EQ(MemorySlicesOf("1g.5gb", 10), 0);
  EXPECT_EQ(MemorySlicesOf("1c.3g.40gb", 10), 0);  // a compute instance, not a GPU instance
  EXPECT_EQ(MemorySlicesOf("A100", 10), 0);
  EXPECT_EQ(MemorySliceGb({"3g.40gb", "3g.40gb"}), 10);
  EXPECT_EQ(MemorySliceGb({"1g.5gb", "3g.20gb"}), 5);
  EXPECT_EQ(MemorySliceGb({}), 0);
}

TEST(ResliceRules, InstancesTakeOnlyTheStartsNvidiaAllows) {
  EXPECT_THAT(PlaceProfiles({"3g.40gb", "3g.40gb"}, 10), ElementsAre(0, 4));
  EXPECT_THAT(PlaceProfiles({"4g.40gb", "3g.40gb"}, 10), ElementsAre(0, 4));
  EXPECT_THAT(PlaceProfiles({"3g.40gb", "4g.40gb"}, 10), ElementsAre(0, -1));  // 4g: only at 0
  EXPECT_THAT(PlaceProfiles({"2g.20gb", "2g.20gb", "2g.20gb", "2g.20gb"}, 10),
              ElementsAre(0, 2, 4, -1));  // 2g never starts at 6
  EXPECT_THAT(PlaceProfiles({"2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"}, 10),
              ElementsAre(0, 2, 4, 6));
  EXPECT_THAT(PlaceProfiles(std::vector<std::string>(8, "1g.10gb"), 10),
              ElementsAre(0, 1, 2, 3, 4, 5, 6, -1));  // seven compute slices
  EXPECT_THAT(PlaceProfiles({"1g.20gb", "1g.20gb", "1g.20gb", "1g.20gb"}, 10),
              ElementsAre(0, 2, 4, 6));
  EXPECT_THAT(PlaceProfiles({"7g.80gb", "1g.10gb"}, 10), ElementsAre(0, -1));
  EXPECT_THAT(PlaceProfiles({"4g.40gb", "3g.40gb", "1g.10gb"}, 10), ElementsAre(0, 4, -1));
}

// Pending jobs want four 1g.10gb slices; the node's idle A100 has two 3g.40gb: it gets the four,
// keeps one 3g.40gb where it still fits, and nothing is left unsliced.
TEST(ResliceScenario, AnIdleGpuGetsTheDemandedSlicesAndKeepsWhatStillFits) {
  auto d =
      PlanReslice({Gpu("n1", 0, {"3g.40gb", "3g.40gb"})}, {{"A100", "1g.10gb", 4}}, kNow, kHold);
  EXPECT_EQ(Describe(d),
            "n1 gpu 0 -> 1g.10gb,1g.10gb,1g.10gb,1g.10gb,3g.40gb (for 4 pending A100-1g.10gb "
            "slices)");
  ASSERT_TRUE(d);
  EXPECT_THAT(d->from, ElementsAre("3g.40gb", "3g.40gb"));
  // Demand beyond one GPU: seven 1g on it (the rest waits for the next pass, another GPU).
  EXPECT_EQ(
      Describe(PlanReslice({Gpu("n1", 0, {"7g.80gb"})}, {{"A100", "1g.10gb", 9}}, kNow, kHold)),
      "n1 gpu 0 -> 1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb (for 7 pending "
      "A100-1g.10gb slices)");
  // Two profiles at once, the larger placed first; the rest filled with the smallest.
  EXPECT_EQ(Describe(PlanReslice({Gpu("n1", 0, {"7g.80gb"})},
                                 {{"A100", "1g.10gb", 1}, {"A100", "4g.40gb", 1}}, kNow, kHold)),
            "n1 gpu 0 -> 4g.40gb,1g.10gb,1g.10gb,1g.10gb (for 1 pending A100-1g.10gb slice, 1 "
            "pending A100-4g.40gb slice)");
}

TEST(ResliceScenario, AGpuWithAJobOnItIsNeverChanged) {
  ResliceGpu busy = Gpu("n1", 0, {"3g.40gb", "3g.40gb"});
  busy.busy = true;
  EXPECT_EQ(Describe(PlanReslice({busy}, {{"A100", "1g.10gb", 2}}, kNow, kHold)), "none");
  // The idle one beside it is.
  EXPECT_EQ(Describe(PlanReslice({busy, Gpu("n1", 1, {"7g.80gb"})}, {{"A100", "1g.10gb", 2}}, kNow,
                                 kHold)),
            "n1 gpu 1 -> 1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb (for 2 pending "
            "A100-1g.10gb slices)");
}

TEST(ResliceScenario, OnlyNodesThatAllowItAndOnlyOutsideTheHoldTime) {
  ResliceGpu locked = Gpu("n1", 0, {"7g.80gb"});
  locked.allowed = false;
  EXPECT_EQ(Describe(PlanReslice({locked}, {{"A100", "1g.10gb", 1}}, kNow, kHold)), "none");
  ResliceGpu recent = Gpu("n1", 0, {"7g.80gb"});
  recent.changed_at = kNow - kHold + 1;  // changed (or failed) within the hold time
  EXPECT_EQ(Describe(PlanReslice({recent}, {{"A100", "1g.10gb", 1}}, kNow, kHold)), "none");
  recent.changed_at = kNow - kHold;
  EXPECT_NE(Describe(PlanReslice({recent}, {{"A100", "1g.10gb", 1}}, kNow, kHold)), "none");
}

// A change under way counts its new slices: the same demand, seen again by the next pass while the
// agent applies the change, triggers no second one; only what it does not cover does.
TEST(ResliceScenario, OneDemandTriggersOneChange) {
  ResliceGpu changing = Gpu("n1", 0, {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "3g.40gb"});
  changing.changing = true;
  changing.busy = true;
  const ResliceGpu idle = Gpu("n2", 0, {"7g.80gb"});
  EXPECT_EQ(Describe(PlanReslice({changing, idle}, {{"A100", "1g.10gb", 4}}, kNow, kHold)), "none");
  EXPECT_EQ(Describe(PlanReslice({changing, idle}, {{"A100", "1g.10gb", 5}}, kNow, kHold)),
            "n2 gpu 0 -> 1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb (for 1 pending "
            "A100-1g.10gb slice)");
}

TEST(ResliceScenario, DemandAGpuCannotServeChangesNothing) {
  const ResliceGpu gpu = Gpu("n1", 0, {"3g.40gb", "3g.40gb"});
  EXPECT_EQ(Describe(PlanReslice({gpu}, {{"H100", "1g.10gb", 3}}, kNow, kHold)), "none");
  EXPECT_EQ(Describe(PlanReslice({gpu}, {{"A100", "3g.20gb", 1}}, kNow, kHold)), "none");
  EXPECT_EQ(Describe(PlanReslice({gpu}, {}, kNow, kHold)), "none");
  EXPECT_EQ(Describe(PlanReslice({Gpu("n1", 0, {})}, {{"A100", "1g.10gb", 1}}, kNow, kHold)),
            "none");  // a layout that says nothing of its memory
}

// The GPU that serves the most demand; then the one unchanged the longest; then by name — the
// same answer whatever order the GPUs come in.
TEST(ResliceScenario, TheChoiceIsTheMostServedThenTheLongestUnchangedThenByName) {
  ResliceGpu a = Gpu("a", 0, {"7g.80gb"});
  ResliceGpu b = Gpu("b", 0, {"7g.80gb"});
  ResliceGpu c = Gpu("c", 3, {"3g.20gb", "3g.20gb"});  // a 40 GB A100: its 2g is 2g.10gb
  a.changed_at = kNow - 2 * kHold;
  b.changed_at = kNow - 3 * kHold;
  std::vector<ResliceGpu> gpus = {a, b, c};
  for (int round = 0; round < 3; ++round) {
    std::rotate(gpus.begin(), gpus.begin() + 1, gpus.end());
    EXPECT_EQ(PlanReslice(gpus, {{"A100", "2g.20gb", 2}}, kNow, kHold)->node, "b");
  }
  b.changed_at = a.changed_at;
  EXPECT_EQ(PlanReslice({c, b, a}, {{"A100", "2g.20gb", 2}}, kNow, kHold)->node, "a");
  // c serves two of these (four compute slices), a or b one (two): c.
  EXPECT_EQ(Describe(PlanReslice({a, b, c}, {{"A100", "2g.10gb", 2}, {"A100", "2g.20gb", 1}}, kNow,
                                 kHold)),
            "c gpu 3 -> 2g.10gb,2g.10gb,3g.20gb (for 2 pending A100-2g.10gb slices)");
}

}  // namespace
}  // namespace berth::sched
