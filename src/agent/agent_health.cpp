// The agent's side of node health (docs/operators.md "Node health"): probe rounds on an interval,
// heavy probes while the node is idle, the prolog before each rank and the epilog after it, and
// the health sent to the server. What the probes check is agent/health_probes.h; when a fault is
// forgotten, agent/health_book.h.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "agent/agent.h"
#include "common/files.h"
#include "common/json_util.h"
#include "common/log.h"

namespace berth {

namespace {

constexpr char kStickyFile[] = "health.json";

}  // namespace

void Agent::SetUpHealth() {
  if (!options_.command_runner) options_.command_runner = std::make_shared<ProcessRunner>();
  if (!options_.node_system) options_.node_system = std::make_shared<LocalNodeSystem>();
  if (!options_.kernel_log && !options_.health.kernel_log.empty()) {
    options_.kernel_log = std::make_shared<FileKernelLog>(options_.health.kernel_log);
  }
  ProbeTargets targets;
  for (const auto& gpu : resources_.gpus) targets.gpus.push_back(gpu.index);
  targets.disk_paths.push_back(options_.state_dir);
  if (!cgroups_.unified_dir.empty()) targets.cgroup_dirs.push_back(cgroups_.unified_dir);
  for (const auto& [controller, dir] : cgroups_.v1_dirs) targets.cgroup_dirs.push_back(dir);
  prober_ =
      std::make_unique<HealthProber>(options_.health, std::move(targets), *options_.command_runner,
                                     options_.kernel_log.get(), *options_.node_system);
  {
    MutexLock lock(mu_);
    health_ = HealthBook(options_.health.clean_runs);
    auto text = ReadFileOr(options_.state_dir + "/" + kStickyFile);
    if (!text.empty()) {
      auto json = ParseJson(text, kStickyFile);
      auto saved = json.ok() ? proto::NodeHealth::Decode(*json, kStickyFile)
                             : Result<proto::NodeHealth>(json.status());
      if (!saved.ok()) {
        LogWarn("{}: {}; its faults are forgotten", kStickyFile, saved.status().message());
      } else {
        for (const auto& f : saved->faults) {
          health_.AddSticky(f.probe, f.gpu, f.reason, f.since_ms);
        }
      }
    }
  }
  if (!options_.health.enabled) return;
  ProbeRound(/*send=*/false);  // registration carries it
  MutexLock lock(mu_);
  if (health_.NodeFaulty()) {
    LogWarn("unhealthy at start: {}; the node joins drained", health_.Health().NodeReason());
  }
}

bool Agent::NodeIdle() {
  MutexLock lock(mu_);
  return launches_.empty() && launching_.empty() &&
         std::all_of(jobs_.begin(), jobs_.end(), [](const auto& j) { return j.second.exited; });
}

void Agent::ProbeRound(bool send) {
  std::optional<int64_t> skew;
  bool idle_due = false;
  {
    MutexLock lock(mu_);
    skew = clock_skew_ms_;
    idle_due = last_idle_probe_ == 0 ||
               clock_.Monotonic() - last_idle_probe_ >= options_.health.idle_interval_ms;
  }
  std::vector<ProbeRun> runs = prober_->RunLight(skew);
  if (idle_due && NodeIdle()) {
    // A launch stops a heavy probe: the job has the GPUs, the probe runs at the next idle time.
    bool aborted = false;
    auto idle = prober_->RunIdle([this] { return stop_.load() || !NodeIdle(); }, &aborted);
    for (auto& run : idle) runs.push_back(std::move(run));
    MutexLock lock(mu_);
    if (!aborted) last_idle_probe_ = clock_.Monotonic();
  }
  bool changed = false;
  {
    MutexLock lock(mu_);
    const TimeMs now = clock_.Now();
    for (const auto& run : runs) {
      if (!run.findings.empty()) {
        LogWarn("health: {}", run.findings.front().reason);
      }
      changed = health_.Record(run, now) || changed;
    }
  }
  if (changed) LogInfo("health changed; telling the server");
  if (send) SendHealth();
}

void Agent::SendHealth() {
  MutexLock sending(health_send_mu_);
  proto::HealthRequest request;
  {
    MutexLock lock(mu_);
    if (session_.empty()) return;
    request = {options_.name, session_, health_.Health()};
  }
  const TimeMs sent = clock_.Now();
  auto answer = connection_.SendHealth(request);
  if (!answer.ok()) {
    if (answer.status().code() == Code::kConflict) {
      MutexLock lock(mu_);
      need_register_ = true;
    }
    return;
  }
  const TimeMs received = clock_.Now();
  if (answer->now_ms > 0 && received - sent < 2000) {
    MutexLock lock(mu_);
    clock_skew_ms_ = (sent + received) / 2 - answer->now_ms;
  }
}

void Agent::HealthLoop() {
  const HealthSettings& settings = options_.health;
  while (!stop_) {
    bool reset = false;
    {
      MutexLock lock(mu_);
      const int64_t since = clock_.Monotonic();
      for (int64_t now = since;
           !stop_ && !health_reset_ && (!settings.enabled || now < since + settings.interval_ms);
           now = clock_.Monotonic()) {
        health_cv_.WaitFor(mu_, settings.enabled ? since + settings.interval_ms - now : 60'000);
      }
      if (stop_) return;
      reset = health_reset_;
      health_reset_ = false;
      if (reset) {
        health_.Reset();
        SaveStickyFaults();
      }
    }
    if (reset) LogInfo("health: an operator cleared the node's faults; probing afresh");
    if (settings.enabled) {
      ProbeRound(/*send=*/true);
    } else {
      SendHealth();
    }
  }
}

void Agent::ResetHealth() {
  MutexLock lock(mu_);
  health_reset_ = true;
  health_cv_.Signal();
}

void Agent::AddStickyFault(const std::string& probe, const std::string& reason) {
  {
    MutexLock lock(mu_);
    health_.AddSticky(probe, -1, reason, clock_.Now());
    SaveStickyFaults();
  }
  LogError("health: {}; the node is drained until an operator clears it", reason);
  SendHealth();
}

void Agent::SaveStickyFaults() {
  proto::NodeHealth sticky;
  sticky.faults = health_.StickyFaults();
  const std::string path = options_.state_dir + "/" + kStickyFile;
  if (sticky.faults.empty()) {
    ::unlink(path.c_str());
    return;
  }
  if (!WriteFileAtomic(path, SerializeJson(sticky.Encode()))) {
    LogError("cannot write {}: a restarted agent forgets its prolog and epilog faults", path);
  }
}

std::map<std::string, std::string> Agent::HookEnvironment(const RunPlan& plan) const {
  std::map<std::string, std::string> env;
  const char* path = ::getenv("PATH");
  env["PATH"] = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  env["BERTH_NODE"] = options_.name;
  env["BERTH_USER"] = plan.run_as ? plan.run_as->user : options_.only_user;
  for (const char* key : {"BERTH_JOB_ID", "BERTH_ATTEMPT", "BERTH_NODE_RANK", "BERTH_JOB_NAME",
                          "CUDA_VISIBLE_DEVICES"}) {
    auto it = plan.run_env.find(key);
    if (it != plan.run_env.end()) env[key] = it->second;
  }
  env["BERTH_GPUS"] = env.count("CUDA_VISIBLE_DEVICES") ? env["CUDA_VISIBLE_DEVICES"] : "";
  return env;
}

std::string Agent::RunProlog(const RunPlan& plan) {
  std::string failed =
      prober_->RunHooks(options_.health.prolog_dir, "prolog", HookEnvironment(plan));
  if (failed.empty()) return "";
  AddStickyFault("prolog", failed);
  return failed;
}

void Agent::QueueEpilog(const std::string& dir, int exit_code) {
  if (options_.node_system->Executables(options_.health.epilog_dir).empty()) return;
  auto plan = ReadRunPlan(dir);
  if (!plan.ok()) return;
  auto env = HookEnvironment(*plan);
  env["BERTH_EXIT_CODE"] = std::to_string(exit_code);
  MutexLock lock(mu_);
  if (epilogs_.size() >= kMaxQueuedEpilogs) {
    LogError("{} epilogs wait already; the epilog of {} does not run", epilogs_.size(), dir);
    return;
  }
  epilogs_.push_back(std::move(env));
  epilog_cv_.Signal();
}

void Agent::EpilogLoop() {
  while (true) {
    std::map<std::string, std::string> env;
    {
      MutexLock lock(mu_);
      while (!stop_ && epilogs_.empty()) epilog_cv_.Wait(mu_);
      if (stop_) return;
      env = std::move(epilogs_.front());
      epilogs_.pop_front();
    }
    std::string failed = prober_->RunHooks(options_.health.epilog_dir, "epilog", env);
    if (!failed.empty()) AddStickyFault("epilog", failed);
  }
}

}  // namespace berth
