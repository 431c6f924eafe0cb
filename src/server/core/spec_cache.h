// SpecCache: the job specs the Core holds in memory, and which of them each node has been sent.
// A spec is kept by id only as long as some job (or a plan's copy of one) holds it: entries are
// weak, and expired ones are swept once they outnumber the live ones, so nothing stays per
// submission once its jobs have ended. For each node's current session it remembers the last few
// specs sent (proto::SpecMessage), so that launches need no fetch; one that fell out is sent again
// (the agent keeps many more).
//
// Thread-safety: none; the Core owns one and guards it with its mutex.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "spec/job_spec.h"

namespace berth {

class SpecCache {
 public:
  // The spec while some job holds it, else null.
  std::shared_ptr<const JobSpec> Find(int64_t spec_id) const;
  // Makes `spec` what Find(spec_id) answers while it is held.
  void Remember(int64_t spec_id, const std::shared_ptr<const JobSpec>& spec);
  // Forgets every expired entry now. After a burst the entries wait for a sweep until the map has
  // doubled past the burst's live specs, and each holds a hash node and the spec's control block,
  // scattered over the heap arenas of the threads that remembered them: the server sweeps before
  // its idle heap trim (common/heap.h), so that they pin no heap pages while it is idle.
  void Sweep();
  // Entries kept (live or not yet swept).
  size_t size() const { return specs_.size(); }

  // Whether `node`'s session still needs `spec_id` sent; if so, it counts as sent from now.
  bool NeedsSending(const std::string& node, int64_t spec_id);
  // `node` has a new session, or none: it may have forgotten every spec.
  void SessionChanged(const std::string& node) { sent_.erase(node); }

 private:
  std::unordered_map<int64_t, std::weak_ptr<const JobSpec>> specs_;
  size_t sweep_at_ = 64;  // sweep when specs_ grows past this
  struct Recent {
    std::array<int64_t, 16> ids{};
    size_t next = 0;
  };
  std::unordered_map<std::string, Recent> sent_;  // by node
};

}  // namespace berth
