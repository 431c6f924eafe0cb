#include "server/leadership.h"

namespace berth {

Elector::Action Elector::Tick() {
  const int64_t now = clock_.Monotonic();
  if (!token_) {
    Result<std::optional<int64_t>> taken =
        lease_.Acquire(options_.holder, options_.url, options_.lease_ms);
    if (!taken.ok()) {
      last_error_ = taken.status().message();
      return Action::kNone;
    }
    last_error_.clear();
    if (!*taken) return Action::kNone;
    token_ = **taken;
    renewed_at_ = now;
    return Action::kLead;
  }
  Result<bool> renewed = lease_.Renew(options_.holder, *token_, options_.lease_ms);
  if (renewed.ok() && *renewed) {
    last_error_.clear();
    renewed_at_ = now;
    return Action::kNone;
  }
  if (renewed.ok()) {
    last_error_ = "the lease was taken by another server";
  } else {
    last_error_ = renewed.status().message();
    // The database may merely be down for a moment: keep leading until a whole lease passed.
    if (now - renewed_at_ < options_.lease_ms) return Action::kNone;
  }
  token_.reset();
  return Action::kStepDown;
}

void Elector::Release() {
  if (!token_) return;
  (void)lease_.Release(options_.holder, *token_);
  token_.reset();
}

}  // namespace berth
