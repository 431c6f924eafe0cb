// FakeChannel: an AgentChannel that records what the core sent, per node, in order. Tests read
// `sent` to see launches and stops, and check that a failed commit sent nothing. Thread-safe.
#pragma once

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/core/agent_channel.h"

namespace berth::testing {

class FakeChannel final : public AgentChannel {
 public:
  struct Sent {
    std::string node;
    proto::WatchMessage message;
  };

  void Open(const std::string& node, const std::string& session) override {
    std::lock_guard lock(mu_);
    opens_.emplace_back(node, session);
  }
  void Close(const std::string& node) override {
    std::lock_guard lock(mu_);
    closes_.push_back(node);
  }
  void Send(const std::string& node, const proto::WatchMessage& message) override {
    std::lock_guard lock(mu_);
    sent_.push_back({node, message});
  }

  // Everything sent so far, and how much: `count()` before and after a failing call must match.
  std::vector<Sent> sent() const {
    std::lock_guard lock(mu_);
    return sent_;
  }
  size_t count() const {
    std::lock_guard lock(mu_);
    return sent_.size() + opens_.size() + closes_.size();
  }
  // The launches sent to `node` (all nodes when empty), in order.
  std::vector<proto::LaunchMessage> Launches(const std::string& node = "") const {
    std::vector<proto::LaunchMessage> out;
    std::lock_guard lock(mu_);
    for (const auto& s : sent_) {
      if (!node.empty() && s.node != node) continue;
      if (const auto* l = std::get_if<proto::LaunchMessage>(&s.message)) out.push_back(*l);
    }
    return out;
  }
  std::vector<proto::StopMessage> Stops(const std::string& node = "") const {
    std::vector<proto::StopMessage> out;
    std::lock_guard lock(mu_);
    for (const auto& s : sent_) {
      if (!node.empty() && s.node != node) continue;
      if (const auto* m = std::get_if<proto::StopMessage>(&s.message)) out.push_back(*m);
    }
    return out;
  }
  std::vector<std::string> closes() const {
    std::lock_guard lock(mu_);
    return closes_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, std::string>> opens_;
  std::vector<std::string> closes_;
  std::vector<Sent> sent_;
};

}  // namespace berth::testing
