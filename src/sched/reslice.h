// Re-slicing: which idle GPU in MIG mode to give a new layout of slices, so that pending jobs that
// ask for a profile no free slice offers can run (docs/gpus.md "Re-slicing"). Pure: the server
// gathers the GPUs that may change and the demand no free slice meets, asks PlanReslice, and acts
// on its answer (tells the node's agent, which applies it with nvidia-smi and reports the new
// slices).
//
// The rules, NVIDIA's for the A100/H100/H200/B200 family: a GPU has 8 memory slices and 7 compute
// slices; a GPU instance of profile Ng takes, from a start it allows, a run of memory slices:
// 1g takes 1 (starts 0-6), a 1g with twice the memory ("1g.20gb" of an 80 GB GPU) 2 (starts 0, 2,
// 4, 6), 2g 2 (0, 2, 4), 3g 4 (0, 4), 4g 4 (0), 7g all 8 (0). A profile's memory says which of
// these it is, against the GPU's memory slice (an eighth of its memory: 10 GB on an 80 GB A100, so
// 3g.40gb is four of them).
//
// The decision: only GPUs whose node allows it, with no job on any of their slices, not changed
// within the hold time (nor failed within it), and of the GPU type the demand names. At most one
// GPU per pass; a GPU being changed counts its new slices as supply, so one demand triggers one
// change. The new layout packs the demanded profiles (largest first, up to the demand), then keeps
// what it can of the GPU's old profiles, then fills the rest with its smallest slices: no capacity
// is left unsliced.
//
// Plain values and functions: thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace berth::sched {

// A GPU in MIG mode as the re-slicer sees it.
struct ResliceGpu {
  std::string node;
  int gpu = 0;           // its index on the node
  std::string gpu_type;  // "A100"
  // Its layout now: its slices' profiles ("3g.40gb"); while a change is under way, the layout it
  // is being given.
  std::vector<std::string> layout;
  bool busy = false;      // a job holds one of its slices (or it is fenced, or its node not usable)
  bool changing = false;  // a change was ordered and its new slices are not reported yet
  bool allowed = false;   // its node may be re-sliced (agent --mig-reconfigure)
  TimeMs changed_at = 0;  // when it was last ordered changed, or its change failed (0: never)
};

// Slices of one type that pending jobs need and no free slice offers.
struct ResliceDemand {
  std::string gpu_type;  // "A100"
  std::string profile;   // "1g.10gb"
  int count = 0;         // slices
};

struct ResliceDecision {
  std::string node;
  int gpu = 0;
  std::vector<std::string> from;  // its layout before
  std::vector<std::string> to;    // its new layout, in the order of the slices' starts
  std::string reason;             // "for 4 pending A100-1g.10gb slice(s)"
};

// The memory slices (eighths of the GPU) a GPU instance of `profile` takes on a GPU whose memory
// slice is `slice_gb` GB: 1, 2, 4 or 8; 0 when the profile does not fit this GPU ("3g.20gb" on an
// 80 GB A100, a compute-instance profile "1c.3g.40gb", a name that is no profile).
int MemorySlicesOf(const std::string& profile, double slice_gb);
// A GPU's memory slice in GB, from the profiles of its layout ("3g.40gb" -> 10; "1g.10gb" alone ->
// 10); 0 when the layout says nothing (empty).
double MemorySliceGb(const std::vector<std::string>& layout);
// The GPU instance profiles of a GPU whose memory slice is `slice_gb`, each with the most one GPU
// holds: on an 80 GB A100, 1g.10gb (7), 1g.20gb (4), 2g.20gb (3), 3g.40gb (2), 4g.40gb (1),
// 7g.80gb (1). What a node that may be re-sliced could offer (admission's "never" check).
std::vector<std::pair<std::string, int>> PossibleProfiles(double slice_gb);
// Places `profiles` in this order at their first allowed starts; each placed one's start, or -1
// for one that found no room.
std::vector<int> PlaceProfiles(const std::vector<std::string>& profiles, double slice_gb);

// The change to make this pass, if any (see the header comment). `hold_ms`: how long a GPU keeps a
// layout (or waits after a failed change) before it may be changed again.
std::optional<ResliceDecision> PlanReslice(const std::vector<ResliceGpu>& gpus,
                                           const std::vector<ResliceDemand>& demand, TimeMs now,
                                           DurationMs hold_ms);

}  // namespace berth::sched
