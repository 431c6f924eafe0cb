// WaitingReasons: the sentence `berth show` prints for a job a pass did not place, naming the
// scarce resource ("needs V100:4 on 1 node; most free on one node: 2 V100 (n1)"), a reservation in
// the way, or the exclusive domains held. Kept apart from the placement policies of the pass
// (pass.h): it reads the pass's state and only describes; it never decides. WhyNot also leaves the
// numbers behind the words in the pass (Pass::blocking_), for the waiting board's details.
//
// Thread-safety: as the pass it reads (one thread).
#pragma once

#include <string>
#include <vector>

#include "sched/pass.h"

namespace berth::sched::internal {

class WaitingReasons {
 public:
  explicit WaitingReasons(const Pass& pass) : pass_(pass) {}

  // Why `job` (asking `need` per node) was not placed in this pass.
  std::string WhyNot(const JobRequest& job, const Need& need) const;
  // Why an exclusive job found no domain of `domains` it could hold whole.
  std::string ExclusiveReason(const JobRequest& job, const Need& need, Pass::Domains& d) const;
  // What holds `domain` of topology level `level`: ", held by jobs 4, 9 (4 ends first, in 25m)",
  // the jobs running there or placed this pass, those expected back first first (at most
  // kHoldersNamed named); "" when nothing runs there.
  static constexpr size_t kHoldersNamed = 5;
  std::string HeldBy(int level, int domain) const;

 private:
  std::string ResourceReason(const JobRequest& job, const Need& need,
                             const std::vector<NodeIdx>& eligible) const;
  // The nodes `blocked` are reserved for a starving job.
  std::string ReservedReason(const JobRequest& job, const std::vector<NodeIdx>& blocked) const;

  const Pass& pass_;
};

}  // namespace berth::sched::internal
