#include "server/http/watch_streams.h"

#include <algorithm>

#include "common/log.h"

namespace berth {

void WatchStreams::Open(const std::string& node, const std::string& session) {
  MutexLock lock(mu_);
  Stream& s = streams_[node];
  if (s.watch) s.watch->End();
  s.watch.reset();
  s.outbox.clear();
  s.outbox_bytes = 0;
  s.session = session;
}

void WatchStreams::Overflow(const std::string& node, Stream& s, const char* what) {
  LogWarn("node {}: {}; its watch stream is ended and it must register again", node, what);
  if (s.watch) s.watch->End();
  s.watch.reset();
  s.outbox.clear();
  s.outbox_bytes = 0;
  s.session.clear();
}

void WatchStreams::Close(const std::string& node) {
  MutexLock lock(mu_);
  auto it = streams_.find(node);
  if (it == streams_.end()) return;
  if (it->second.watch) it->second.watch->End();
  streams_.erase(it);
}

void WatchStreams::Send(const std::string& node, const proto::WatchMessage& message) {
  std::string line = proto::EncodeWatchLine(message);
  MutexLock lock(mu_);
  auto it = streams_.find(node);
  if (it == streams_.end() || it->second.session.empty()) return;  // it registers again first
  Stream& s = it->second;
  if (s.watch && !s.watch->closed()) {
    if (s.watch->backlog() + line.size() > kMaxBacklogBytes) {
      return Overflow(node, s, "its agent stopped reading (over 16 MiB unread)");
    }
    s.watch->Write(std::move(line));
  } else {
    if (s.outbox_bytes + line.size() > kMaxQueuedBytes) {
      return Overflow(node, s, "over 16 MiB queued for it while it had no watch stream");
    }
    s.outbox_bytes += line.size();
    s.outbox.push_back(std::move(line));
  }
}

bool WatchStreams::Attach(const std::string& node, const std::string& session,
                          std::shared_ptr<net::Responder> stream) {
  MutexLock lock(mu_);
  auto it = streams_.find(node);
  if (it == streams_.end() || it->second.session.empty() || it->second.session != session) {
    return false;
  }
  Stream& s = it->second;
  if (s.watch) s.watch->End();
  s.watch = std::move(stream);
  s.watch->StartStream(200, "application/x-ndjson");
  s.watch->Write(proto::EncodeWatchLine(proto::HelloMessage{}));
  while (!s.outbox.empty()) {
    s.watch->Write(std::move(s.outbox.front()));
    s.outbox.pop_front();
  }
  s.outbox_bytes = 0;
  return true;
}

void WatchStreams::PingSome(size_t fraction) {
  std::string ping = proto::EncodeWatchLine(proto::PingMessage{});
  MutexLock lock(mu_);
  fraction = std::max<size_t>(1, fraction);
  const size_t tick = ping_tick_;
  ping_tick_ = (tick + 1) % fraction;
  if (streams_.empty()) return;
  // This tick's share of a cycle of `fraction` ticks that pings each stream once: with fewer
  // streams than ticks, most ticks ping none (rounding each tick's share up pinged a lone stream
  // at every tick, 25 times as often as meant).
  const size_t n = streams_.size();
  size_t count = n * (tick + 1) / fraction - n * tick / fraction;
  auto it = streams_.upper_bound(last_pinged_);
  for (size_t i = 0; i < count; ++i) {
    if (it == streams_.end()) it = streams_.begin();
    if (it->second.watch && !it->second.watch->closed()) it->second.watch->Write(ping);
    last_pinged_ = it->first;
    ++it;
  }
}

void WatchStreams::EndAll() {
  MutexLock lock(mu_);
  for (auto& [node, s] : streams_) {
    if (s.watch) s.watch->End();
    s.watch.reset();
  }
}

}  // namespace berth
