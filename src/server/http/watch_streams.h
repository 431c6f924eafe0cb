// WatchStreams: the AgentChannel of the HTTP server. Each node's agent holds one long-lived watch
// stream (GET /v1/agent/watch); messages for the node's current session are written to it, or wait
// in a queue until the agent attaches. A new session (registration) ends the old stream and drops
// what was queued for it.
//
// Bounded: a stream whose peer stopped reading (TCP open, nothing read) holds at most
// kMaxBacklogBytes, and a node's queue while no stream is attached kMaxQueuedBytes. Past either,
// the stream is ended, the queue dropped and the session forgotten here, so that the agent must
// register again — and registration reconciles (server/core/core.h): the launches it missed are
// sent again and the attempts it should not run are stopped. Nothing is lost; memory stays bounded.
//
// Thread-safety: every method is thread-safe (one internal mutex, never held while calling out of
// this class except into Responders, which only queue bytes).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "net/http.h"
#include "server/core/agent_channel.h"

namespace berth {

class WatchStreams final : public AgentChannel {
 public:
  static constexpr size_t kMaxBacklogBytes = 16 << 20;
  static constexpr size_t kMaxQueuedBytes = 16 << 20;

  void Open(const std::string& node, const std::string& session) override EXCLUDES(mu_);
  void Close(const std::string& node) override EXCLUDES(mu_);
  void Send(const std::string& node, const proto::WatchMessage& message) override EXCLUDES(mu_);

  // Makes `stream` the node's watch stream if `session` is its current session: starts it with a
  // hello and flushes what was queued. Returns false (and leaves `stream` alone) otherwise.
  bool Attach(const std::string& node, const std::string& session,
              std::shared_ptr<net::Responder> stream) EXCLUDES(mu_);
  // A ping on the next `fraction`-th of the attached streams, round robin (keeps idle connections
  // and their proxies alive). Called every tick with fraction n, each stream gets a ping once
  // every n ticks, however few streams there are; spreading them keeps a thousand pings from
  // landing on the I/O threads at once.
  void PingSome(size_t fraction) EXCLUDES(mu_);
  // Ends every stream (server shutdown).
  void EndAll() EXCLUDES(mu_);

 private:
  struct Stream {
    std::string session;
    std::shared_ptr<net::Responder> watch;
    std::deque<std::string> outbox;  // lines waiting for the session's stream
    size_t outbox_bytes = 0;
  };
  // Ends the node's stream and forgets its session and queue (the agent registers again).
  static void Overflow(const std::string& node, Stream& s, const char* what);
  Mutex mu_;
  std::map<std::string, Stream> streams_ GUARDED_BY(mu_);
  std::string last_pinged_ GUARDED_BY(mu_);  // PingSome's round-robin cursor
  size_t ping_tick_ GUARDED_BY(mu_) = 0;     // PingSome's place in its cycle of `fraction` ticks
};

}  // namespace berth
