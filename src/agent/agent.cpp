#include "agent/agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/discovery.h"
#include "agent/file_mounts.h"
#include "agent/gpu_topology.h"
#include "agent/mig_layout.h"
#include "agent/port_owner.h"
#include "agent/session_pump.h"
#include "common/files.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/tree_removal.h"
#include "net/ws_stream.h"
#include "protocol/job_env.h"
#include "spec/idle_policy.h"
#include "spec/job_spec.h"
#include "supervise/cpu_set.h"
#include "supervise/supervisor.h"
#include "supervise/terminal.h"

namespace berth {

namespace {

// Specs kept in memory; the server assumes a node still has the last few it sent (16), so this
// must stay well above that.
constexpr size_t kMaxCachedSpecs = 1024;
// ... and within this much of their text (a spec may be up to the server's body limit, 64 MiB).
constexpr size_t kMaxCachedSpecBytes = 64 << 20;
// A user's account (uid, gid, groups, home) as looked up for a launch is reused for this long: a
// 1000-job burst reads /etc/passwd and /etc/group once, not 1000 times. Unknown users are not
// remembered.
constexpr int64_t kAccountCacheMs = 2000;
constexpr size_t kMaxCachedAccounts = 4096;

}  // namespace

Agent::Agent(AgentOptions options, const Clock& clock, AgentConnection& connection,
             Launcher& launcher)
    : options_(std::move(options)),
      clock_(clock),
      connection_(connection),
      launcher_(launcher),
      specs_(kMaxCachedSpecs, kMaxCachedSpecBytes),
      accounts_(options_.lookup_account, kAccountCacheMs, kMaxCachedAccounts),
      // The idle threshold is the policy's default (the server's own is not sent to agents yet).
      gpu_watch_(clock_, options_.gpu_sample_interval, IdlePolicy{}.below),
      uploads_(options_.state_dir + "/uploads", options_.upload_cache_bytes),
      spare_dirs_(options_.state_dir + "/jobs"),
      health_({options_.health, options_.state_dir, options_.name, options_.only_user,
               options_.command_runner, options_.kernel_log, options_.node_system},
              clock_, connection_, stop_,
              {.session =
                   [this] {
                     MutexLock lock(mu_);
                     return session_;
                   },
               .register_again =
                   [this] {
                     MutexLock lock(mu_);
                     need_register_ = true;
                   },
               .node_idle = [this] { return NodeIdle(); }}),
      relays_({options_.state_dir, options_.name, &containers_, &cgroups_}, launcher_, connection_,
              stop_,
              {.session =
                   [this] {
                     MutexLock lock(mu_);
                     return session_;
                   },
               .runs =
                   [this](const std::string& key) {
                     MutexLock lock(mu_);
                     auto it = jobs_.find(key);
                     return it != jobs_.end() && !it->second.exited;
                   }}) {}

bool Agent::NodeIdle() {
  MutexLock lock(mu_);
  return launches_.empty() && launching_.empty() &&
         std::all_of(jobs_.begin(), jobs_.end(), [](const auto& j) { return j.second.exited; });
}

Agent::~Agent() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
}

std::string Agent::KeyOf(const proto::AttemptRank& id) { return RankKey(id); }

void Agent::RequestStop() {
  stop_ = true;
  WakeAll();
  connection_.AbortWatch();
}

void Agent::WakeAll() {
  // Under the lock: a loop that saw stop_ unset under it is then surely waiting, and gets this.
  {
    MutexLock lock(mu_);
    for (CondVar* cv : {&launch_cv_, &upload_cv_, &ship_cv_, &stop_cv_}) cv->SignalAll();
  }
  health_.WakeAll();
}

void Agent::Pause(CondVar& wake, int64_t ms) {
  MutexLock lock(mu_);
  if (!stop_) wake.WaitFor(mu_, ms);
}

Status Agent::LoadIdentity() {
  std::error_code ec;
  std::filesystem::create_directories(options_.state_dir + "/jobs", ec);
  if (ec) return Status::Internal("cannot create " + options_.state_dir + ": " + ec.message());
  // The state dir holds the jobs' run plans and environments: the agent's alone. When jobs run as
  // other users, they may pass through it (search) to their own work dirs, never list or read it.
  mode_t pass = options_.lookup_account ? 0711 : 0700;
  ::chmod(options_.state_dir.c_str(), pass);
  ::chmod((options_.state_dir + "/jobs").c_str(), pass);
  // One agent per state dir: two would adopt, stop and report the same jobs, and keep taking the
  // node's session from each other. The lock dies with this process (supervisors do not inherit the
  // fd).
  std::string lock_path = options_.state_dir + "/agent.lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) return Status::Internal("cannot open " + lock_path + ": " + strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    std::string holder = Trim(ReadFileOr(lock_path));
    return Status::Conflict("another agent" + (holder.empty() ? "" : " (pid " + holder + ")") +
                            " is running with state dir " + options_.state_dir);
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) < 0) {
    LogWarn("cannot write {}", lock_path);
  }
  // Earlier versions kept specs on disk, one file per submission, never removed: the server now
  // sends them on the watch stream, and they are kept in memory. Moved aside at once (a rename),
  // removed once the node has registered: there may be a million of them, and deleting them here
  // would keep the node from renewing its jobs' lease.
  if (::rename((options_.state_dir + "/specs").c_str(),
               (options_.state_dir + "/specs.old").c_str()) == 0 ||
      std::filesystem::exists(options_.state_dir + "/specs.old", ec)) {
    old_specs_ = options_.state_dir + "/specs.old";
  }
  std::string path = options_.state_dir + "/node_id";
  ::chmod(path.c_str(), 0600);  // written 0644 by older agents
  node_id_ = Trim(ReadFileOr(path));
  if (node_id_.empty()) {
    node_id_ = RandomHex(16);
    if (!WriteFileAtomic(path, node_id_ + "\n", /*sync=*/true, 0600)) {
      return Status::Internal("cannot write " + path);
    }
  }
  return Status::Ok();
}

// Re-adopts the jobs a previous agent process left in the state dir: running ones are watched
// again, and exits that happened meanwhile get reported.
void Agent::AdoptExisting() {
  std::string root = options_.state_dir + "/jobs";
  DIR* d = opendir(root.c_str());
  if (!d) return;
  MutexLock lock(mu_);
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (spare_dirs_.Adopt(name)) continue;
    auto parts = Split(name, '-');
    if (parts.size() != 3) continue;
    LocalJob job;
    try {
      job.id = {std::stoll(parts[0]), std::stoi(parts[1]), std::stoi(parts[2])};
    } catch (...) {
      continue;
    }
    job.dir = root + "/" + name;
    std::string pid = Trim(ReadFileOr(job.dir + "/supervisor.pid"));
    job.pid = pid.empty() ? 0 : std::atoi(pid.c_str());
    auto events = ParseEvents(ReadFileOr(job.dir + "/events"));
    bool exited = !events.empty() && events.back().kind == "exited";
    // The supervisor may be gone without recording an exit (machine reboot, kill -9).
    if (!exited) exited = RecordEndOfDeadSupervisor(job);
    // A job known to be over is never signalled: its supervisor's pid may belong to another
    // process by now (after a reboot, surely), and a stop can come before the exit is shipped.
    job.exited = exited;
    bool lost_share = false;
    if (!exited) {
      if (auto plan = ReadRunPlan(job.dir); plan.ok()) {
        // Its CPUs stay its own: a later pinned rank must not get them.
        if (!plan->limits.cpus.empty()) cpu_pins_.Adopt(name, plan->limits.cpus);
        // And its GPU share the MPS daemon's it runs under, unless that died meanwhile.
        lost_share = !mps_.Adopt(name, plan->run_env);
      }
      // Its GPUs are sampled again (docs/idle.md).
      if (auto hold = GpuWatch::ParseHold(ReadFileOr(job.dir + "/" + GpuWatch::kHoldFile))) {
        gpu_watch_.Hold(job.id, hold->first, hold->second);
      }
    }
    LogInfo("re-adopting job {} attempt {} rank {}{}", job.id.job, job.id.attempt, job.id.rank,
            exited ? " (exited)" : "");
    WatchDir(job, name);
    jobs_[name] = job;
    if (lost_share) {
      EndRank(name, "the MPS daemon enforcing its GPU share died while the agent was down");
    }
  }
  closedir(d);
}

Status Agent::Run() {
  SetLogPrefix("agent " + options_.name);
  if (!IsValidName(options_.name)) {
    return Status::Invalid("--name: invalid node name '" + options_.name + "'");
  }
  if (options_.state_dir.empty()) return Status::Invalid("the agent needs a --state-dir");
  std::error_code abs_ec;
  options_.state_dir = std::filesystem::absolute(options_.state_dir, abs_ec).string();
  BERTH_RETURN_IF_ERROR(LoadIdentity());
  resources_ = DiscoverNode(options_.gpus);
  if (options_.cpus) resources_.cpus = *options_.cpus;
  if (options_.memory) resources_.memory = *options_.memory;
  Result<NodeGpus> gpus = LoadNodeGpus(options_.gpus, options_.mig, options_.name, resources_.gpus,
                                       options_.gpu_device_dir, options_.gpu_topology);
  if (!gpus.ok()) return gpus.status();
  {
    MutexLock lock(gpus_mu_);
    gpus_ = std::make_shared<const NodeGpus>(std::move(*gpus));
    resources_.gpus = gpus_->offered();
  }
  // GPU utilisation (agent/gpu_watch.h): sampled where nvidia-smi answers, declared GPUs too.
  if (options_.gpu_sample_interval > 0 && !resources_.gpus.empty() &&
      !FindExecutable("nvidia-smi").empty()) {
    if (!gpu_runner_) gpu_runner_ = options_.command_runner;
    if (!gpu_runner_) gpu_runner_ = std::make_shared<ProcessRunner>();
    gpu_watch_.SetSampler(std::make_unique<NvidiaSmiSampler>(*gpu_runner_, clock_));
    LogInfo("GPU utilisation sampled every {}", FormatDuration(options_.gpu_sample_interval));
  }
  // Across nodes: the NVLink domain (an NVL72 rack), a topology level's value; --label wins.
  if (!resources_.gpus.empty() && !options_.labels.count(kNvlinkDomainLabel)) {
    if (std::optional<std::string> domain = DiscoverNvlinkDomain()) {
      LogInfo("GPUs in NVLink domain {} (label {})", *domain, kNvlinkDomainLabel);
      options_.labels[kNvlinkDomainLabel] = *domain;
    }
  }
  cgroups_ =
      options_.isolation ? DetectCgroups() : CgroupHost{.reason = "turned off (--isolation off)"};
  if (cgroups_.layout == CgroupLayout::kNone && options_.require_isolation) {
    return Status::Unavailable("--require-isolation: jobs cannot be isolated here (" +
                               cgroups_.Describe() + ")");
  }
  LogInfo("isolation: {}", cgroups_.Describe());
  if (!cgroups_.undelegated.empty()) {
    LogWarn("isolation: {} is not given the {} controller(s): jobs run without {}",
            cgroups_.unified_dir, Join(cgroups_.undelegated, ", "),
            "the CPU limits, process limits or CPU pinning these hold (Delegate=yes gives them)");
  }
  SetUpContainers();
  std::vector<int> node_cpus = AllowedCpus();
  std::map<int, std::string> cores = ReadCoreIds("/sys/devices/system/cpu", node_cpus);
  cpu_pins_.Configure(std::move(node_cpus), std::move(cores));
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) {
    LogWarn("inotify unavailable ({}); scanning job directories instead", strerror(errno));
  }
  mps_.Configure(FindExecutable(kMpsControl), options_.state_dir + "/mps");
  LogInfo("GPU sharing: {}", mps_.Sharing());
  AdoptExisting();
  health_.SetUp(Gpus()->gpu_indices(), cgroups_);

  // The first registration decides whether this node may join at all.
  Status first = Register();
  while (!first.ok() && first.code() == Code::kUnavailable && !stop_) {
    LogWarn("{}; retrying", first.message());
    Pause(1000);
    first = Register();
  }
  if (!first.ok() && !stop_) return first;
  std::thread cleanup;
  if (!old_specs_.empty()) {
    cleanup = std::thread([dir = old_specs_] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
  }

  std::thread heartbeat([this] { HeartbeatLoop(); });
  std::thread launcher([this] { LauncherLoop(); });
  std::thread upload_launcher([this] { UploadLauncherLoop(); });
  std::thread shipper([this] { ShipperLoop(); });
  std::thread health([this] { health_.Loop(); });
  std::thread epilogs([this] { health_.EpilogLoop(); });
  std::thread gpu_sampler([this] { gpu_watch_.Loop(); });
  ControlLoop();
  WakeAll();
  gpu_watch_.Stop();
  gpu_sampler.join();
  heartbeat.join();
  launcher.join();
  upload_launcher.join();
  shipper.join();
  health.join();
  epilogs.join();
  if (cleanup.joinable()) cleanup.join();
  ShipOnce(true);  // flush what the jobs wrote and reported up to now
  // Relays see the stop within half a second; the sessions' jobs run on.
  relays_.WaitForAll(5000);
  MutexLock lock(mu_);
  LogInfo("stopped; {} job(s) keep running under their supervisors", jobs_.size());
  return Status::Ok();
}

Status Agent::Register() {
  proto::RegisterRequest request;
  request.name = options_.name;
  request.node_id = node_id_;
  request.address = options_.address;
  request.pool = options_.pool;
  request.labels = options_.labels;
  if (!containers_.runtime.empty()) {
    request.labels[kContainerRuntimeLabel] = containers_.runtime;
    request.labels[kContainerVersionLabel] = containers_.version;
    request.container_mounts = containers_.allowed_mounts;
  }
  request.cpus_milli = resources_.cpus;
  request.memory_mib = resources_.memory;
  request.gpus = resources_.gpus;
  request.isolation = cgroups_.Describe();
  request.sharing = mps_.Sharing();
  request.mig_reconfigure = options_.mig_reconfigure;
  request.mig_error = mig_error_;
  if (cgroups_.layout != CgroupLayout::kNone) {
    request.job_memory_default_mib = options_.job_memory_default.value_or(resources_.memory);
  }
  {
    // Launches being started or still queued count too: the server then stops those it no longer
    // wants (a stop sent to the old session is lost with it) instead of freeing their resources
    // while they start.
    MutexLock lock(mu_);
    for (const auto& [key, job] : jobs_) request.running.push_back(job.id);
    for (const auto& launch : launches_) request.running.push_back(launch.id());
    for (const auto& [key, id] : launching_) request.running.push_back(id);
  }
  request.health = health_.Health();
  int64_t sent_at = clock_.Monotonic();  // the server's lease starts no earlier than this
  auto answer = connection_.Register(request);
  if (!answer.ok()) return answer.status();
  MutexLock lock(mu_);
  session_ = answer->session;
  specs_.Clear();  // the new session gets every spec it uses again
  lease_ms_ = answer->lease_ms;
  heartbeat_ms_ = answer->heartbeat_ms;
  WriteLeaseFile(options_.state_dir + "/lease", sent_at, lease_ms_);
  need_register_ = false;
  LogInfo("registered with {} ({} GPUs, {} CPUs, {} memory)", options_.server_url,
          resources_.gpus.size(), FormatMilli(resources_.cpus), FormatMib(resources_.memory));
  return Status::Ok();
}

void Agent::ControlLoop() {
  while (!stop_) {
    bool must_register;
    std::string session;
    {
      MutexLock lock(mu_);
      must_register = need_register_;
      session = session_;
    }
    if (must_register) {
      Status st = Register();
      if (!st.ok()) {
        if (st.code() == Code::kConflict) LogError("{}", st.message());
        Pause(500);
        continue;
      }
      MutexLock lock(mu_);
      session = session_;
    }
    Status st = connection_.Watch(options_.name, session, [this](const proto::WatchMessage& m) {
      HandleMessage(m);
      return !stop_.load() && !reregister_.exchange(false);
    });
    if (stop_) break;
    if (!st.ok()) LogWarn("watch stream: {}", st.message());
    {
      // The server may have restarted: register again, which also reconciles.
      MutexLock lock(mu_);
      need_register_ = true;
    }
    Pause(200);
  }
}

void Agent::HandleMessage(const proto::WatchMessage& message) {
  if (const auto* spec = std::get_if<proto::SpecMessage>(&message)) {
    specs_.Put(spec->id, ParsedSpecs::Parse(spec->text));
    return;
  }
  if (const auto* launch = std::get_if<proto::LaunchMessage>(&message)) {
    MutexLock lock(mu_);
    launches_.push_back(*launch);
    launch_cv_.Signal();
    return;
  }
  if (const auto* layout = std::get_if<proto::MigLayoutMessage>(&message)) {
    ApplyMigLayout(*layout);
    return;
  }
  if (std::holds_alternative<proto::HealthResetMessage>(message)) {
    health_.Reset();
    return;
  }
  if (const auto* session = std::get_if<proto::SessionMessage>(&message)) {
    relays_.Terminal(*session);
    return;
  }
  if (const auto* exec = std::get_if<proto::ExecMessage>(&message)) {
    relays_.Exec(*exec);
    return;
  }
  if (const auto* forward = std::get_if<proto::ForwardMessage>(&message)) {
    relays_.Forward(*forward);
    return;
  }
  const auto* stop = std::get_if<proto::StopMessage>(&message);
  if (!stop) return;  // hello, ping
  std::string key = KeyOf(stop->id());
  MutexLock lock(mu_);
  auto it = jobs_.find(key);
  if (it != jobs_.end()) {
    StopJob(it->second);
  } else if (launching_.count(key)) {
    // Being launched right now: Launch() drops it and reports it never ran (before its supervisor
    // starts), or stops its supervisor (once it has). Saying so here would let the server free its
    // GPUs while the launch still starts the job.
    stopped_launches_.insert(key);
  } else {
    // Maybe still queued for launch (maybe twice: a launch sent again): drop it, and tell the
    // server it never ran.
    std::erase_if(launches_, [&](const proto::LaunchMessage& q) { return q.id() == stop->id(); });
    reports_.push_back(proto::Report::Exited(stop->id(), std::nullopt, "run", "was not running"));
    ship_cv_.Signal();
  }
}

RankLimits Agent::LimitsOf(const proto::LaunchMessage& m, const ResourceRequest& request) const {
  RankLimits limits;
  const Mib memory =
      request.memory > 0 ? request.memory : options_.job_memory_default.value_or(resources_.memory);
  limits.memory_bytes = memory * 1024 * 1024;
  limits.cpu_milli = request.cpus;
  limits.pids_max = options_.job_pids_max;
  limits.node_cpu_milli = resources_.cpus;
  limits.denied_devices = Gpus()->Denied(m.gpus);
  return limits;
}

void Agent::FenceGpuEnvironment(const proto::LaunchMessage& m, RunPlan& plan) const {
  // A MIG slice is named by its UUID, fenced or not (CUDA enumerates slices by UUID only). With
  // the other devices fenced off, CUDA sees only the rank's own whole GPUs, numbered from 0
  // (Slurm's rule). BERTH_GPU_IDS keeps their indices on the node, always: also where nothing is
  // denied (no device files found: GPUs declared on a machine without them; or the node's only
  // GPU), and there CUDA_VISIBLE_DEVICES keeps the node's indices.
  if (m.gpus.empty()) return;
  std::vector<std::string> physical, visible;
  for (size_t i = 0; i < m.gpus.size(); ++i) {
    physical.push_back(std::to_string(m.gpus[i]));
    visible.push_back(std::to_string(i));
  }
  plan.run_env["BERTH_GPU_IDS"] = Join(physical, ",");
  if (std::optional<std::string> uuids = Gpus()->SliceUuids(m.gpus)) {
    plan.run_env["CUDA_VISIBLE_DEVICES"] = *uuids;
    return;
  }
  if (plan.limits.denied_devices.empty()) return;
  plan.run_env["CUDA_VISIBLE_DEVICES"] = Join(visible, ",");
}

bool Agent::RecordEndOfDeadSupervisor(const LocalJob& job) {
  pid_t pid =
      job.pid > 0 ? job.pid : std::atoi(Trim(ReadFileOr(job.dir + "/supervisor.pid")).c_str());
  if (launcher_.Alive(pid)) return false;
  // Read only now that the process is seen dead: a supervisor appends its "exited" event before it
  // exits, so an event written by a live supervisor is never missed.
  for (const auto& e : ParseEvents(ReadFileOr(job.dir + "/events"))) {
    if (e.kind == "exited") return true;
  }
  AppendEvent(job.dir, {"exited", 137, "supervisor", "the job's supervisor died"});
  LogWarn("job {} attempt {} rank {}: its supervisor died without recording an exit", job.id.job,
          job.id.attempt, job.id.rank);
  return true;
}

std::shared_ptr<const NodeGpus> Agent::Gpus() const {
  MutexLock lock(gpus_mu_);
  return gpus_;
}

void Agent::ApplyMigLayout(const proto::MigLayoutMessage& m) {
  const std::shared_ptr<const NodeGpus> now = Gpus();
  const std::vector<MigSlice> old = now->SlicesOf(m.gpu);
  Status st;
  if (!options_.mig_reconfigure) {
    st = Status::Forbidden("this node does not allow re-slicing (agent --mig-reconfigure)");
  } else if (old.empty()) {
    st = Status::Invalid("GPU " + std::to_string(m.gpu) + " is not in MIG mode");
  } else if (!std::all_of(m.profiles.begin(), m.profiles.end(), IsMigProfile)) {
    st = Status::Invalid("not a MIG layout: " + Join(m.profiles, ","));
  }
  // A declared layout has no driver behind it: the change is simulated (the commands recorded in
  // <state>/mig-commands.log); a real node's runs nvidia-smi.
  const bool declared = !options_.gpus.empty();
  std::vector<MigSlice> fresh;
  if (st.ok()) {
    std::unique_ptr<CommandRunner> own;
    CommandRunner* runner = options_.command_runner.get();
    if (declared) {
      own = std::make_unique<RecordingCommandRunner>(options_.state_dir + "/mig-commands.log");
      runner = own.get();
    } else if (!runner) {
      own = std::make_unique<ProcessRunner>();
      runner = own.get();
    }
    st = berth::ApplyMigLayout(*runner, m.gpu, old, m.profiles);
  }
  if (st.ok()) {
    if (declared) {
      fresh = DeclaredSlices(options_.name, m.gpu, m.profiles);
    } else {
      for (MigSlice& s : DiscoverMigSlices()) {
        if (s.gpu == m.gpu) fresh.push_back(std::move(s));
      }
    }
    auto next = std::make_shared<const NodeGpus>(
        now->WithSlices(m.gpu, fresh, ParseMigMinors(ReadMigMinorsTable(options_.gpu_device_dir))));
    {
      MutexLock lock(gpus_mu_);
      gpus_ = next;
    }
    resources_.gpus = next->offered();
    mig_error_.clear();
    LogInfo("MIG: GPU {} re-sliced to {}", m.gpu, Join(m.profiles, ","));
  } else {
    mig_error_ = "GPU " + std::to_string(m.gpu) + ": " + st.message();
    LogWarn("MIG: re-slicing GPU {} to {} failed: {}", m.gpu, Join(m.profiles, ","), st.message());
  }
  // Registered again at once: the server learns the new slices (or the error) and ends the change.
  reregister_ = true;
}

void Agent::StopJob(LocalJob& job) {
  if (job.exited) return;
  launcher_.Stop(job.pid, job.dir);
}

void Agent::EndRank(const std::string& key, const std::string& reason) {
  if (launching_.count(key)) {
    stopped_launches_.insert(key);  // (reported as never run: it goes elsewhere)
    return;
  }
  auto it = jobs_.find(key);
  if (it == jobs_.end() || it->second.exited) return;
  LogWarn("job {} attempt {} rank {}: ending it: {}", it->second.id.job, it->second.id.attempt,
          it->second.id.rank, reason);
  WriteFileAtomic(it->second.dir + "/" + kStopReasonFile, reason + "\n", /*sync=*/false);
  StopJob(it->second);
}

// Renews the node's lease. Each renewal is also written to <state>/lease, which every job's
// supervisor watches: without renewals (server unreachable, agent frozen or dead) the supervisors
// stop their jobs before the server's lease runs out, so that no job ever runs twice.
void Agent::HeartbeatLoop() {
  while (!stop_) {
    std::string session;
    {
      MutexLock lock(mu_);
      // Whatever wakes this one before stop_ (a session ending), it waits out the interval (the
      // one a registration answered last). It once sent a heartbeat, and rewrote the lease file,
      // on every wake-up.
      const int64_t since = MonotonicMs();
      for (int64_t now = since; !stop_ && now < since + heartbeat_ms_; now = MonotonicMs()) {
        stop_cv_.WaitFor(mu_, since + heartbeat_ms_ - now);
      }
      if (stop_) return;
      session = session_;
    }
    if (session.empty()) continue;
    int64_t sent_at = clock_.Monotonic();
    proto::HeartbeatRequest beat{options_.name, session};
    beat.gpu_usage = gpu_watch_.Usage();
    beat.gpus_now = gpu_watch_.GpusNow();
    Status st = connection_.Heartbeat(beat);
    if (st.code() == Code::kUnavailable) continue;
    bool abort_watch = false;
    {
      MutexLock lock(mu_);
      if (st.ok()) {
        WriteLeaseFile(options_.state_dir + "/lease", sent_at, lease_ms_);
      } else if (st.code() == Code::kConflict && session == session_) {
        need_register_ = true;
        abort_watch = true;
      }
    }
    if (abort_watch) connection_.AbortWatch();
  }
}

void Agent::LauncherLoop() {
  while (true) {
    proto::LaunchMessage launch;
    {
      MutexLock lock(mu_);
      while (!stop_ && launches_.empty()) launch_cv_.Wait(mu_);
      if (stop_) return;
      launch = std::move(launches_.front());
      launches_.pop_front();
      launching_.emplace(KeyOf(launch.id()), launch.id());
    }
    std::optional<ParsedSpecs::Entry> spec = specs_.Find(launch.spec_id);
    if (!spec) {
      // The server sends each spec before the launches that use it; one that did not come (an
      // older server, a spec fallen out of the cache) is fetched, once however many jobs share it.
      SpecFetch fetch{.spec_id = launch.spec_id, .node = options_.name, .job = launch.job};
      {
        MutexLock lock(mu_);
        fetch.session = session_;
      }
      auto fetched = connection_.GetSpec(fetch);
      if (!fetched.ok()) {
        spec = ParsedSpecs::Entry{.error =
                                      "cannot fetch the job's spec: " + fetched.status().message()};
      } else {
        spec = ParsedSpecs::Parse(*fetched);
        specs_.Put(launch.spec_id, *spec);
      }
    }
    if (spec->spec && (!spec->spec->workdir_upload.empty() || !spec->spec->file_mounts.empty())) {
      MutexLock lock(mu_);
      upload_launches_.emplace_back(std::move(launch), spec->spec);
      upload_cv_.Signal();
      continue;
    }
    Launch(launch, spec->spec, spec->error);
  }
}

void Agent::UploadLauncherLoop() {
  while (true) {
    std::pair<proto::LaunchMessage, std::shared_ptr<const JobSpec>> next;
    {
      MutexLock lock(mu_);
      while (!stop_ && upload_launches_.empty()) upload_cv_.Wait(mu_);
      if (stop_) return;
      next = std::move(upload_launches_.front());
      upload_launches_.pop_front();
    }
    Launch(next.first, next.second, "");
  }
}

// The run plan of launch `m` (rank `key`, in `job_dir`): whom it runs as, where, with what
// environment and limits; an error that fails the launch, saying why.
Result<RunPlan> Agent::PlanRun(const proto::LaunchMessage& m, const JobSpec& spec,
                               const std::string& key, const std::string& job_dir) {
  RunPlan plan;
  plan.workdir = spec.workdir.empty() ? job_dir : spec.workdir;
  if (spec.interactive) plan.tty = RunPlan::Tty{};  // sized by the first client that attaches
  std::optional<JobAccount> account;
  if (!options_.only_user.empty() && m.user != options_.only_user) {
    return Status::Unavailable("the agent of " + options_.name + " runs as " + options_.only_user +
                               ", not root, so it runs only " + options_.only_user +
                               "'s jobs, not " + m.user + "'s");
  }
  if (options_.lookup_account) {
    auto found = accounts_.Get(m.user, MonotonicMs());
    if (!found.ok()) {
      return Status::Unavailable(found.status().message() + " (" + options_.name + ")");
    }
    if (found->uid == 0 && m.user != "root") {
      // The server refuses root's jobs unless told otherwise, by name: another name for uid 0
      // must not get past that.
      return Status::Unavailable("user '" + m.user + "' is uid 0 on " + options_.name +
                                 ": only jobs of 'root' itself may run as root");
    }
    account = *found;
  }
  if (account) {
    plan.run_as = RunPlan::RunAs{account->user, account->uid, account->gid, account->groups};
    if (spec.workdir.empty() && spec.workdir_upload.empty()) {
      // The job dir is the agent's; the job gets a work dir of its own inside it.
      plan.workdir = job_dir + "/work";
      if (::mkdir(plan.workdir.c_str(), 0700) != 0 && errno != EEXIST) {
        return Status::Internal("cannot create " + plan.workdir + ": " + strerror(errno));
      }
      if (::chown(plan.workdir.c_str(), account->uid, account->gid) != 0) {
        return Status::Internal("cannot give " + plan.workdir + " to " + account->user + ": " +
                                strerror(errno));
      }
    }
  }
  if (!spec.workdir_upload.empty()) {
    plan.workdir = job_dir + "/work";
    BERTH_RETURN_IF_ERROR(BuildUpload(m, spec.workdir_upload, plan.workdir, account));
  }
  proto::Environment base = options_.base_environment;
  if (account && account->uid != ::geteuid()) {
    base = AccountEnvironment(*account, options_.base_environment);
  } else if (account) {
    for (auto& [k, v] : AccountEnvironment(*account, {})) base[k] = v;
  }
  proto::JobEnvironment env = proto::BuildJobEnvironment(m, spec.envs, base);
  plan.setup_env = std::move(env.setup_env);
  plan.run_env = std::move(env.run_env);
  // Every job learns the node's name; on a node that runs containers, where the user's podman is
  // (agent/container.h kPodmanEnv: there once a container job of theirs ran here).
  const uid_t uid = account ? account->uid : ::geteuid();
  const std::string podman = UserStoreDir(containers_, uid) + "/podman";
  for (auto* e : {&plan.setup_env, &plan.run_env}) {
    (*e)["BERTH_NODE"] = options_.name;
    if (!containers_.runtime.empty()) (*e)[kPodmanEnv] = podman;
  }
  // That podman needs its run dir, which a reboot takes (/run): made again, where it is missing,
  // for a job of a user who has a store here. (One stat per launch on a node that runs containers.)
  if (!containers_.runtime.empty() && ::access(UserRunDir(containers_, uid).c_str(), F_OK) != 0 &&
      ::access(podman.c_str(), F_OK) == 0) {
    if (Status made = MakeContainerDirs(uid, account ? account->gid : ::getegid()); !made.ok()) {
      LogWarn("job {}: {}", m.job, made.message());
    }
  }
  plan.setup = spec.setup;
  plan.run = spec.run;
  std::string mount_script;
  if (!spec.file_mounts.empty()) {
    auto script = BuildFileMounts(m, spec, job_dir, account);
    if (!script.ok()) return script.status();
    mount_script = std::move(*script);
    // A container job's are placed on the node before its pull (PlanContainer).
    if (!spec.container) plan.setup = mount_script + plan.setup;
  }
  plan.kill_grace_ms = m.kill_grace_ms;
  plan.warn_signal = m.warn_signal;
  plan.warn_after_ms = m.warn_after_ms;
  plan.lease_file = options_.state_dir + "/lease";
  if (cgroups_.layout != CgroupLayout::kNone) {
    plan.cgroup = RankCgroupName(options_.state_dir, key);
    plan.limits = LimitsOf(m, spec.resources);
    FenceGpuEnvironment(m, plan);
    if (spec.cpu_binding == CpuBinding::kCores) {
      auto cpus = cpu_pins_.Pin(key, static_cast<int>(spec.resources.cpus / kMilliPerCpu),
                                Gpus()->NearCpus(m.gpus));
      if (!cpus.ok()) return cpus.status();
      plan.limits.cpus = *cpus;
    }
  }
  // A fraction of a GPU runs under its device's MPS daemon, which enforces the share; without MPS
  // on this node the share is unenforced (RegisterRequest::sharing "none").
  if (spec.resources.fractional_gpu() && m.gpus.size() == 1 && mps_.Sharing() == "mps") {
    auto mps = mps_.Acquire(key, Gpus()->MpsShareOf(m.gpus[0], spec.resources.gpu_milli));
    if (!mps.ok()) return mps.status();
    for (const auto& [k, v] : *mps) plan.setup_env[k] = plan.run_env[k] = v;
  }
  if (spec.container) {
    BERTH_RETURN_IF_ERROR(PlanContainer(m, spec, key, job_dir, account, mount_script, plan));
  }
  return plan;
}

Status Agent::BuildUpload(const proto::LaunchMessage& m, const std::string& manifest,
                          const std::string& dest, const std::optional<JobAccount>& account) {
  BlobFetch base{.node = options_.name, .session = "", .job = m.job, .want = {}};
  {
    MutexLock lock(mu_);
    base.session = session_;
  }
  // A copy left by an earlier launch of this rank (a resent launch) is rebuilt; it is the user's.
  if (!RemoveTreeAsOwner(dest)) RemoveTreeNoFollow(dest);
  std::optional<NodeUploads::Owner> owner;
  if (account && account->uid != ::geteuid())
    owner = NodeUploads::Owner{account->uid, account->gid};
  // A stop of this launch (a cancel) or of the agent ends the fetch at its next round.
  const std::string key = KeyOf(m.id());
  auto cancelled = [this, &key] {
    MutexLock lock(mu_);
    return stop_.load() || stopped_launches_.count(key) > 0;
  };
  auto built = uploads_.Build(connection_, base, manifest, dest, owner, cancelled);
  if (!built.ok()) {
    return Status::Unavailable("cannot set up the uploaded workdir: " + built.status().message());
  }
  LogInfo("job {}: workdir of {} files ({} bytes) built in {}, {} bytes fetched", m.job,
          built->files, built->bytes, dest, built->fetched_bytes);
  return Status::Ok();
}

Result<std::string> Agent::BuildFileMounts(const proto::LaunchMessage& m, const JobSpec& spec,
                                           const std::string& job_dir,
                                           const std::optional<JobAccount>& account) {
  const std::string dir = job_dir + "/mounts";
  std::error_code ec;
  RemoveTreeNoFollow(dir);  // root's, with trees of the user's inside: no link is followed
  // Root's, searchable: each mount inside is its user's.
  if (::mkdir(dir.c_str(), 0711) != 0) {
    return Status::Internal("cannot create " + dir + ": " + strerror(errno));
  }
  std::vector<MountPlacement> placements;
  for (size_t i = 0; i < spec.file_mounts.size(); ++i) {
    const FileMount& mount = spec.file_mounts[i];
    std::string built = fmt::format("{}/{}", dir, i);
    Status st = BuildUpload(m, mount.upload, built, account);
    if (!st.ok()) {
      return Status(st.code(), "file_mounts: " + mount.target + ": " + st.message());
    }
    if (mount.file) {
      // The tree of a file source holds just that file.
      auto it = std::filesystem::directory_iterator(built, ec);
      if (ec || it == std::filesystem::directory_iterator()) {
        return Status::Internal("file_mounts: " + mount.target + ": the uploaded file is missing");
      }
      built = it->path().string();
    }
    placements.push_back({.built = built, .target = mount.target, .file = mount.file});
  }
  return FileMountScript(placements);
}

void Agent::Launch(const proto::LaunchMessage& m, std::shared_ptr<const JobSpec> spec,
                   std::string error) {
  std::string key = KeyOf(m.id());
  {
    MutexLock lock(mu_);
    if (jobs_.count(key)) {  // already have it (a resent launch): its reports will follow
      launching_.erase(key);
      stopped_launches_.erase(key);
      return;
    }
  }
  LocalJob job;
  job.id = m.id();
  job.dir = options_.state_dir + "/jobs/" + key;
  std::error_code ec;
  if (!spare_dirs_.Take(job.dir)) std::filesystem::create_directories(job.dir, ec);
  if (ec) error = "cannot create " + job.dir + ": " + ec.message();
  // Jobs of other users must reach their work dir inside (search), never list or read it.
  ::chmod(job.dir.c_str(), options_.lookup_account ? 0711 : 0700);

  std::string prolog_failure;
  bool has_pull = false;  // a container rank (RunPlan::pull)
  if (error.empty() && !spec) error = "the job's spec is unavailable";
  if (error.empty()) {
    if (Result<RunPlan> plan = PlanRun(m, *spec, key, job.dir); !plan.ok()) {
      error = plan.status().message();
    } else {
      has_pull = !plan->pull.empty();
      // (Released with its CPU pins, when its processes are gone; kept in its dir for a restart.)
      if (gpu_watch_.Hold(m.id(), m.gpus, m.idle_below)) {
        WriteFileAtomic(job.dir + "/" + GpuWatch::kHoldFile,
                        GpuWatch::HoldText(m.gpus, m.idle_below), /*sync=*/false);
      }
      Status st = WriteRunPlan(job.dir, *plan);
      if (!st.ok()) error = st.message();
      if (error.empty()) prolog_failure = health_.RunProlog(*plan);
    }
  }
  MutexLock lock(mu_);
  if (jobs_.count(key)) {
    launching_.erase(key);
    stopped_launches_.erase(key);
    return;
  }
  if (stopped_launches_.erase(key) > 0) {
    launching_.erase(key);
    cpu_pins_.Release(key);
    gpu_watch_.Release(job.id);
    lock.Unlock();
    mps_.Release(key);  // (may quit a daemon: not under the lock)
    lock.Lock();
    reports_.push_back(proto::Report::Exited(job.id, std::nullopt, "run", "was not running"));
    ship_cv_.Signal();
    lock.Unlock();
    spare_dirs_.Recycle(job.dir, /*reusable=*/true);  // no supervisor ever ran in it
    return;
  }
  if (!error.empty()) {
    AppendEvent(job.dir, {"exited", 127, "launch", error});
  } else if (!prolog_failure.empty()) {
    // The job never started; the node is drained already (RunProlog), so it goes elsewhere.
    AppendEvent(job.dir, {"exited", 1, "prolog", prolog_failure});
  } else {
    // The supervisor starts without the lock (starting a node supervisor takes a while, which the
    // shipper and the watch stream need not wait for). The job stays in launching_ meanwhile: a
    // stop that arrives is noted in stopped_launches_ and sent to the supervisor below, which
    // holds it pending from its birth until it has recorded it.
    lock.Unlock();
    auto pid = has_pull ? launcher_.StartWithPull(job.dir) : launcher_.Start(job.dir);
    lock.Lock();
    if (!pid.ok()) {
      AppendEvent(job.dir, {"exited", 127, "launch", pid.status().message()});
    } else {
      job.pid = *pid;
    }
  }
  launching_.erase(key);
  const bool stop = stopped_launches_.erase(key) > 0;
  // Reported once the job is in jobs_, so that the server's answer ("stop": a stale attempt)
  // finds it.
  reports_.push_back(proto::Report::Event(job.id, proto::ReportEvent::kAccepted));
  WatchDir(job, key);
  LocalJob& added = jobs_[key] = job;
  if (stop) StopJob(added);
  dirty_.insert(key);
  ship_cv_.Signal();
}

}  // namespace berth
