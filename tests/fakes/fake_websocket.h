// FakeWebSocket: a net::WebSocket in memory for the server's relays
// (server/http/terminal_bridges.h). What the test pushes is what Read gives (at once if a Read
// waits); Write records and succeeds at once while open. Callbacks run on the calling thread.
//
// Thread-safety: every method is thread-safe (one mutex, never held while calling back).
#pragma once

#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "net/http.h"

namespace berth::testing {

class FakeWebSocket : public net::WebSocket {
 public:
  void Read(std::function<void(std::optional<std::string>)> done) override {
    std::unique_lock lock(mu_);
    if (!inbox_.empty()) {
      std::string message = std::move(inbox_.front());
      inbox_.pop_front();
      lock.unlock();
      done(std::move(message));
    } else if (closed_) {
      lock.unlock();
      done(std::nullopt);
    } else {
      reader_ = std::move(done);
    }
  }
  void Write(std::string message, std::function<void(bool)> done) override {
    std::unique_lock lock(mu_);
    const bool open = !closed_;
    if (open) sent_.push_back(std::move(message));
    lock.unlock();
    if (done) done(open);
  }
  void Close(int code, std::string reason) override { End(code, std::move(reason)); }
  bool closed() const override {
    std::lock_guard lock(mu_);
    return closed_;
  }
  int close_code() const override {
    std::lock_guard lock(mu_);
    return code_;
  }
  size_t backlog() const override { return 0; }

  // --- the test's side ---
  // A message from the peer.
  void Push(std::string message) {
    std::unique_lock lock(mu_);
    if (auto reader = std::exchange(reader_, nullptr)) {
      lock.unlock();
      reader(std::move(message));
    } else {
      inbox_.push_back(std::move(message));
    }
  }
  // The peer closes (or the connection breaks) with `code`.
  void PeerCloses(int code, std::string reason = "") { End(code, std::move(reason)); }
  std::vector<std::string> sent() const {
    std::lock_guard lock(mu_);
    return sent_;
  }
  std::string close_reason() const override {
    std::lock_guard lock(mu_);
    return reason_;
  }

 private:
  void End(int code, std::string reason) {
    std::unique_lock lock(mu_);
    if (closed_) return;
    closed_ = true;
    code_ = code;
    reason_ = std::move(reason);
    auto reader = std::exchange(reader_, nullptr);
    lock.unlock();
    if (reader) reader(std::nullopt);
  }

  mutable std::mutex mu_;
  std::deque<std::string> inbox_;
  std::function<void(std::optional<std::string>)> reader_;
  std::vector<std::string> sent_;
  bool closed_ = false;
  int code_ = 0;
  std::string reason_;
};

}  // namespace berth::testing
