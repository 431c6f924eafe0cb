#include "sched/scheduler.h"

#include "sched/pass.h"

namespace berth::sched {

PassResult Schedule(const Snapshot& snapshot, const Config& config) {
  return internal::Schedule(snapshot, config, internal::Tuning{});
}

}  // namespace berth::sched
