// Fakes of the seams of the agent's health probes (agent/health_probes.h): commands answered from
// a script the test writes, a kernel log the test appends to, and file systems whose free space,
// writable directories and executables the test sets. Each records what it was asked.
//
// Thread-safety: every method is thread-safe (one mutex each).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/health_probes.h"
#include "supervise/timed_command.h"

namespace berth::testing {

class FakeCommandRunner final : public CommandRunner {
 public:
  using Answer = std::function<CommandOutcome(const TimedCommand&)>;

  // Commands whose argv[0] is `path` get `answer`'s outcome; others fail to start.
  void On(const std::string& path, Answer answer) {
    std::lock_guard lock(mu_);
    answers_[path] = std::move(answer);
  }
  // An outcome with exit code `code` and `output`.
  static CommandOutcome Exit(int code, std::string output = "") {
    CommandOutcome o;
    o.exit_code = code;
    o.output = std::move(output);
    return o;
  }
  static CommandOutcome TimedOut(int64_t after_ms) {
    CommandOutcome o;
    o.timed_out = true;
    o.duration_ms = after_ms;
    o.timeout_ms = after_ms;
    return o;
  }

  CommandOutcome Run(const TimedCommand& command, const std::function<bool()>& abort) override {
    Answer answer;
    {
      std::lock_guard lock(mu_);
      calls_.push_back(command);
      auto it = answers_.find(command.argv.empty() ? "" : command.argv[0]);
      if (it != answers_.end()) answer = it->second;
    }
    if (abort && abort()) {
      CommandOutcome o;
      o.aborted = true;
      return o;
    }
    if (!answer) {
      CommandOutcome o;
      o.start_error = "cannot run " + (command.argv.empty() ? "" : command.argv[0]);
      return o;
    }
    return answer(command);
  }

  std::vector<TimedCommand> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, Answer> answers_;
  std::vector<TimedCommand> calls_;
};

class FakeKernelLog final : public KernelLog {
 public:
  void Append(const std::string& line) {
    std::lock_guard lock(mu_);
    pending_.push_back(line);
  }
  std::vector<std::string> ReadNew() override {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    out.swap(pending_);
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> pending_;
};

class FakeNodeSystem final : public NodeSystem {
 public:
  void SetFreeMib(const std::string& path, int64_t mib) {
    std::lock_guard lock(mu_);
    free_[path] = mib;
  }
  void SetWritable(const std::string& dir, bool writable) {
    std::lock_guard lock(mu_);
    writable_[dir] = writable;
  }
  void SetExecutables(const std::string& dir, std::vector<std::string> paths) {
    std::lock_guard lock(mu_);
    executables_[dir] = std::move(paths);
  }

  std::optional<int64_t> FreeMib(const std::string& path) override {
    std::lock_guard lock(mu_);
    auto it = free_.find(path);
    return it == free_.end() ? std::nullopt : std::optional<int64_t>(it->second);
  }
  bool Writable(const std::string& dir) override {
    std::lock_guard lock(mu_);
    auto it = writable_.find(dir);
    return it == writable_.end() || it->second;
  }
  std::vector<std::string> Executables(const std::string& dir) override {
    std::lock_guard lock(mu_);
    auto it = executables_.find(dir);
    return it == executables_.end() ? std::vector<std::string>{} : it->second;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int64_t> free_;
  std::map<std::string, bool> writable_;
  std::map<std::string, std::vector<std::string>> executables_;
};

}  // namespace berth::testing
