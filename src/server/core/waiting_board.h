// WaitingBoard: why each pending job waits, for listings, `berth show` and /metrics. The last
// scheduling pass's list is kept as the scheduler made it (one small entry per job, its sentences
// once: nothing copied per job) and shared with readers. Beside it: the jobs placed since that pass
// (no longer waiting for it), reasons given outside a pass (a placement the store refused) — both
// cleared when the next pass's list replaces it — and jobs held by their dependencies (a waiter's
// reason shared by its jobs, kept across passes).
//
// Thread-safety: thread-safe; one mutex of its own, never held while calling out, so readers (a
// listing) never wait for a pass or for the Core's lock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"
#include "sched/dependencies.h"
#include "sched/scheduler.h"

namespace berth {

struct WaitingDetail {
  std::string reason;
  std::optional<sched::Explanation> explanation;
  // The pass's tables that explanation's indexes point into (shared by every job of the pass).
  std::shared_ptr<const sched::Waiting> pass;
};

class WaitingBoard {
 public:
  using WaiterKey = sched::Dependencies::Key;

  // A pass's list replaces the last one.
  void NewPass(std::shared_ptr<const sched::Waiting> pass) EXCLUDES(mu_);
  // `jobs` wait for `reason`, outside any pass, until the next pass.
  void Note(const std::vector<int64_t>& jobs, const std::string& reason) EXCLUDES(mu_);
  // `jobs` were placed: no longer waiting for the last pass.
  void Placed(const std::vector<int64_t>& jobs) EXCLUDES(mu_);
  // The jobs [first, last] of waiter `key` wait for `reason` (its dependencies); "": they no
  // longer do (met or failed).
  void SetDependencyReason(WaiterKey key, int64_t first, int64_t last, std::string reason)
      EXCLUDES(mu_);
  // Jobs that ended, and waiters whose last job ended: forgotten.
  void Forget(const std::vector<int64_t>& jobs, const std::vector<WaiterKey>& waiters)
      EXCLUDES(mu_);

  // Why `job` waits, or "".
  std::string Reason(int64_t job) EXCLUDES(mu_);
  // The reason with the pass's numbers; nullopt when nothing knows the job.
  std::optional<WaitingDetail> Detail(int64_t job) EXCLUDES(mu_);
  std::unordered_map<int64_t, std::string> Reasons(const std::vector<int64_t>& jobs) EXCLUDES(mu_);
  // The last pass's list, and how many jobs wait for their dependencies (not in any pass).
  std::pair<std::shared_ptr<const sched::Waiting>, int64_t> ForGauges() EXCLUDES(mu_);

 private:
  // A note, a dependency reason, or the job's entry in the last pass's list (*entry, when asked
  // for); nullptr when none knows it.
  const std::string* ReasonLocked(int64_t job, const sched::Waiting::Entry** entry) REQUIRES(mu_);

  Mutex mu_;
  std::shared_ptr<const sched::Waiting> pass_ GUARDED_BY(mu_);
  std::unordered_set<int64_t> placed_since_pass_ GUARDED_BY(mu_);
  std::unordered_map<int64_t, std::string> notes_ GUARDED_BY(mu_);
  std::unordered_map<int64_t, WaiterKey> dep_waiting_ GUARDED_BY(mu_);      // job -> its waiter
  std::unordered_map<WaiterKey, std::string> dep_reasons_ GUARDED_BY(mu_);  // waiter -> reason
};

}  // namespace berth
