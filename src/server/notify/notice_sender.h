// NoticeSender: delivers the outbox (server/core/notices.h) — at least once, in the background,
// never under the state lock and never in a pass's way.
//
// One thread on the leader: woken after a commit that wrote notices (Ring) and at least every
// second, it reads the notices due from the store, delivers each through the transport, and writes
// back what happened. A failed delivery is tried again after 2 s, 4 s, 8 s ... up to `retry_cap`;
// one still failing `give_up` after its event (a day by default), or refused for good (a relay's
// 5xx, a receiver's 4xx), is marked failed with its last error, which `berth notify ls` shows. A
// server killed mid-delivery leaves the notice pending: the next leader delivers it again, and
// receivers dedupe by event id.
//
// A sink whose delivery failed is not tried again in the same round: its other notices wait for the
// same retry, so a receiver that hangs costs each round one timeout, not one per notice.
//
// Rate limit: at most `per_user_per_minute` deliveries a minute per user; more wait their turn,
// each given a slot in a later minute (`per_user_per_minute` a minute), so that a flood is written
// back once per notice, not once per minute; nothing is dropped (groups send one summary in the
// first place).
//
// A mail goes to the user's email sink's address; a webhook is POSTed to the URL of the user's
// webhook sink, signed with its secret as it is at delivery (a rotated secret signs the retries).
//
// Thread-safety: Start/Stop from one controlling thread; Ring, Drain (tests) and WriteMetrics from
// any.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/metrics.h"
#include "server/notify/notice_transport.h"
#include "store/store.h"

namespace berth {

struct NoticeSenderOptions {
  DurationMs retry_cap_ms = 10 * 60'000;
  DurationMs give_up_ms = 24 * 3'600'000;
  int per_user_per_minute = 60;
  int batch = 50;  // notices read per round
};

class NoticeSender {
 public:
  // `store`, `clock` and `transport` must outlive it.
  NoticeSender(Store& store, const Clock& clock, NoticeTransport& transport,
               NoticeSenderOptions options);
  ~NoticeSender();
  NoticeSender(const NoticeSender&) = delete;
  NoticeSender& operator=(const NoticeSender&) = delete;

  void Start();
  void Stop();
  // Wakes the thread: notices were written.
  void Ring();
  // One round: delivers what is due now; the number of deliveries tried.
  int Drain();
  void WriteMetrics(metrics::ExpositionWriter& out) const;

 private:
  void Loop();
  // Delivers `row`; what to write back.
  NoticeUpdate Deliver(const NoticeRow& row, const std::vector<NotifySinkRow>& sinks, TimeMs now);
  Status Send(const NoticeRow& row, const NotifySinkRow& sink, TimeMs now);
  // Whether `user` may have one more delivery at `now` (and takes it); else when it may.
  std::optional<TimeMs> RateLimited(const std::string& user, TimeMs now);

  Store& store_;
  const Clock& clock_;
  NoticeTransport& transport_;
  const NoticeSenderOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool rung_ = false;  // guarded by mu_
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::mutex drain_mu_;  // one round at a time
  // Per user: the start of its current minute, the deliveries in it and the notices deferred from
  // it to later minutes (guarded by drain_mu_; users idle for a minute are dropped each round).
  struct Minute {
    TimeMs start = 0;
    int sent = 0;
    int64_t deferred = 0;
  };
  std::map<std::string, Minute> minute_;
  metrics::CounterFamily sent_{"berth_notifications_sent_total",
                               "Notifications delivered, by sink (email, webhook).",
                               {"sink"}};
  metrics::CounterFamily failed_{
      "berth_notifications_failed_total",
      "Deliveries of notifications that failed (each try), by sink; the notice is retried.",
      {"sink"}};
  metrics::CounterFamily given_up_{
      "berth_notifications_given_up_total",
      "Notifications given up on (refused for good, or failing for --notify-give-up), by sink.",
      {"sink"}};
};

}  // namespace berth
