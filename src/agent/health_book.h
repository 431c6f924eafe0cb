// HealthBook: what the node's health probes have found, and when a fault may be forgotten
// (docs/operators.md "Node health"). Each run of a probe is recorded; a finding opens a fault on
// the node (gpu -1) or on one GPU, and the fault stays open until that probe has run clean
// `clean_runs` times in a row: never on a timer. A sticky fault (a failing prolog or epilog) stays
// until Reset() (an operator's `berth undrain --force`).
//
// Pure: no clock (times are passed in), no I/O. Not thread-safe: the agent guards its book with
// its own mutex.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "protocol/agent_protocol.h"

namespace berth {

// One thing a probe run found wrong: on the node (gpu -1) or on one GPU.
struct ProbeFinding {
  int gpu = -1;
  std::string reason;
};

// One run of one probe.
struct ProbeRun {
  std::string name;
  std::vector<ProbeFinding> findings;  // empty: clean
  bool timed_out = false;              // then `findings` holds the timeout as a node fault
  int64_t duration_ms = 0;
};

class HealthBook {
 public:
  explicit HealthBook(int clean_runs = 2) : clean_runs_(clean_runs < 1 ? 1 : clean_runs) {}

  // Records a run that ended at `now_ms`. Returns whether the set of open faults changed.
  bool Record(const ProbeRun& run, int64_t now_ms);
  // Opens a fault that only Reset() clears. Returns whether it is new.
  bool AddSticky(const std::string& probe, int gpu, const std::string& reason, int64_t now_ms);
  // Forgets every fault, sticky ones too (counters and last results stay).
  void Reset();

  proto::NodeHealth Health() const;
  bool NodeFaulty() const;
  std::vector<proto::HealthFault> StickyFaults() const;
  int clean_runs() const { return clean_runs_; }

 private:
  struct Open {
    proto::HealthFault fault;
    int clean = 0;  // clean runs of its probe since it was last found
  };
  using Key = std::pair<std::string, int>;  // probe, gpu

  int clean_runs_;
  std::map<Key, Open> open_;
  std::map<std::string, proto::ProbeResult> results_;  // by probe name
};

}  // namespace berth
