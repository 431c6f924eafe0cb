// HealthKeeper: node health's probe rounds, hooks, sticky faults and sends (health_keeper.h).
#include "agent/health_keeper.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "common/files.h"
#include "common/json_util.h"
#include "common/log.h"

namespace berth {

namespace {

constexpr char kStickyFile[] = "health.json";

}  // namespace

HealthKeeper::HealthKeeper(Settings settings, const Clock& clock, AgentConnection& connection,
                           const std::atomic<bool>& stop, AgentSide side)
    : settings_(std::move(settings)),
      clock_(clock),
      connection_(connection),
      stop_(stop),
      side_(std::move(side)) {
  if (!settings_.command_runner) settings_.command_runner = std::make_shared<ProcessRunner>();
  if (!settings_.node_system) settings_.node_system = std::make_shared<LocalNodeSystem>();
  if (!settings_.kernel_log && !settings_.health.kernel_log.empty()) {
    settings_.kernel_log = std::make_shared<FileKernelLog>(settings_.health.kernel_log);
  }
}

void HealthKeeper::SetUp(const std::vector<int>& gpus, const CgroupHost& cgroups) {
  ProbeTargets targets;
  targets.gpus = gpus;
  targets.disk_paths.push_back(settings_.state_dir);
  if (!cgroups.unified_dir.empty()) targets.cgroup_dirs.push_back(cgroups.unified_dir);
  for (const auto& [controller, dir] : cgroups.v1_dirs) targets.cgroup_dirs.push_back(dir);
  prober_ = std::make_unique<HealthProber>(settings_.health, std::move(targets),
                                           *settings_.command_runner, settings_.kernel_log.get(),
                                           *settings_.node_system);
  {
    MutexLock lock(mu_);
    book_ = HealthBook(settings_.health.clean_runs);
    auto text = ReadFileOr(settings_.state_dir + "/" + kStickyFile);
    if (!text.empty()) {
      auto json = ParseJson(text, kStickyFile);
      auto saved = json.ok() ? proto::NodeHealth::Decode(*json, kStickyFile)
                             : Result<proto::NodeHealth>(json.status());
      if (!saved.ok()) {
        LogWarn("{}: {}; its faults are forgotten", kStickyFile, saved.status().message());
      } else {
        for (const auto& f : saved->faults) {
          book_.AddSticky(f.probe, f.gpu, f.reason, f.since_ms);
        }
      }
    }
  }
  if (!settings_.health.enabled) return;
  ProbeRound(/*send=*/false);  // registration carries it
  MutexLock lock(mu_);
  if (book_.NodeFaulty()) {
    LogWarn("unhealthy at start: {}; the node joins drained", book_.Health().NodeReason());
  }
}

proto::NodeHealth HealthKeeper::Health() const {
  MutexLock lock(mu_);
  return book_.Health();
}

void HealthKeeper::WakeAll() {
  MutexLock lock(mu_);
  health_cv_.SignalAll();
  epilog_cv_.SignalAll();
}

void HealthKeeper::ProbeRound(bool send) {
  std::optional<int64_t> skew;
  bool idle_due = false;
  {
    MutexLock lock(mu_);
    skew = clock_skew_ms_;
    idle_due = last_idle_probe_ == 0 ||
               clock_.Monotonic() - last_idle_probe_ >= settings_.health.idle_interval_ms;
  }
  std::vector<ProbeRun> runs = prober_->RunLight(skew);
  if (idle_due && side_.node_idle()) {
    // A launch stops a heavy probe: the job has the GPUs, the probe runs at the next idle time.
    bool aborted = false;
    auto idle = prober_->RunIdle([this] { return stop_.load() || !side_.node_idle(); }, &aborted);
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
      changed = book_.Record(run, now) || changed;
    }
  }
  if (changed) LogInfo("health changed; telling the server");
  if (send) Send();
}

void HealthKeeper::Send() {
  MutexLock sending(send_mu_);
  const std::string session = side_.session();
  if (session.empty()) return;
  proto::HealthRequest request{settings_.node_name, session, Health()};
  const TimeMs sent = clock_.Now();
  auto answer = connection_.SendHealth(request);
  if (!answer.ok()) {
    if (answer.status().code() == Code::kConflict) side_.register_again();
    return;
  }
  const TimeMs received = clock_.Now();
  if (answer->now_ms > 0 && received - sent < 2000) {
    MutexLock lock(mu_);
    clock_skew_ms_ = (sent + received) / 2 - answer->now_ms;
  }
}

void HealthKeeper::Loop() {
  const HealthSettings& settings = settings_.health;
  while (!stop_) {
    bool reset = false;
    {
      MutexLock lock(mu_);
      const int64_t since = clock_.Monotonic();
      for (int64_t now = since;
           !stop_ && !reset_ && (!settings.enabled || now < since + settings.interval_ms);
           now = clock_.Monotonic()) {
        health_cv_.WaitFor(mu_, settings.enabled ? since + settings.interval_ms - now : 60'000);
      }
      if (stop_) return;
      reset = reset_;
      reset_ = false;
      if (reset) {
        book_.Reset();
        SaveStickyFaults();
      }
    }
    if (reset) LogInfo("health: an operator cleared the node's faults; probing afresh");
    if (settings.enabled) {
      ProbeRound(/*send=*/true);
    } else {
      Send();
    }
  }
}

void HealthKeeper::Reset() {
  MutexLock lock(mu_);
  reset_ = true;
  health_cv_.Signal();
}

void HealthKeeper::AddStickyFault(const std::string& probe, const std::string& reason) {
  {
    MutexLock lock(mu_);
    book_.AddSticky(probe, -1, reason, clock_.Now());
    SaveStickyFaults();
  }
  LogError("health: {}; the node is drained until an operator clears it", reason);
  Send();
}

void HealthKeeper::SaveStickyFaults() {
  proto::NodeHealth sticky;
  sticky.faults = book_.StickyFaults();
  const std::string path = settings_.state_dir + "/" + kStickyFile;
  if (sticky.faults.empty()) {
    ::unlink(path.c_str());
    return;
  }
  if (!WriteFileAtomic(path, SerializeJson(sticky.Encode()))) {
    LogError("cannot write {}: a restarted agent forgets its prolog and epilog faults", path);
  }
}

std::map<std::string, std::string> HealthKeeper::HookEnvironment(const RunPlan& plan) const {
  std::map<std::string, std::string> env;
  const char* path = ::getenv("PATH");
  env["PATH"] = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  env["BERTH_NODE"] = settings_.node_name;
  env["BERTH_USER"] = plan.run_as ? plan.run_as->user : settings_.only_user;
  for (const char* key : {"BERTH_JOB_ID", "BERTH_ATTEMPT", "BERTH_NODE_RANK", "BERTH_JOB_NAME",
                          "CUDA_VISIBLE_DEVICES"}) {
    auto it = plan.run_env.find(key);
    if (it != plan.run_env.end()) env[key] = it->second;
  }
  env["BERTH_GPUS"] = env.count("CUDA_VISIBLE_DEVICES") ? env["CUDA_VISIBLE_DEVICES"] : "";
  return env;
}

std::string HealthKeeper::RunProlog(const RunPlan& plan) {
  std::string failed =
      prober_->RunHooks(settings_.health.prolog_dir, "prolog", HookEnvironment(plan));
  if (failed.empty()) return "";
  AddStickyFault("prolog", failed);
  return failed;
}

void HealthKeeper::QueueEpilog(const std::string& dir, int exit_code) {
  if (settings_.node_system->Executables(settings_.health.epilog_dir).empty()) return;
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

void HealthKeeper::EpilogLoop() {
  while (true) {
    std::map<std::string, std::string> env;
    {
      MutexLock lock(mu_);
      while (!stop_ && epilogs_.empty()) epilog_cv_.Wait(mu_);
      if (stop_) return;
      env = std::move(epilogs_.front());
      epilogs_.pop_front();
    }
    std::string failed = prober_->RunHooks(settings_.health.epilog_dir, "epilog", env);
    if (!failed.empty()) AddStickyFault("epilog", failed);
  }
}

}  // namespace berth
