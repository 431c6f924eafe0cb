#include "agent/agent.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/supervisor.h"
#include "common/clock.h"
#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"
#include "net/http_client.h"
#include "spec/job_spec.h"

extern char** environ;

namespace berth {

namespace {

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == EPERM;
  // A zombie counts as gone.
  std::string stat = ReadFileOr("/proc/" + std::to_string(pid) + "/stat");
  auto paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

// Records the end of a job whose supervisor is gone without having recorded it (SIGKILL, the OOM
// killer, a stop signal that reached it before it could block it): without an "exited" event the
// job is never reported gone, and the server holds its resources for good. `pid` is the
// supervisor's, or 0 to take it from <dir>/supervisor.pid. Returns true if it recorded an end.
bool RecordEndOfDeadSupervisor(const std::string& dir, pid_t pid) {
  if (pid <= 0) pid = std::atoi(Trim(ReadFileOr(dir + "/supervisor.pid")).c_str());
  if (ProcessAlive(pid)) return false;
  // Read only now that the process is seen dead: a supervisor appends its "exited" event before it
  // exits, so an event written by a live supervisor is never missed.
  for (const auto& e : ParseEvents(ReadFileOr(dir + "/events"))) {
    if (e.kind == "exited") return false;
  }
  AppendEvent(dir, {"exited", 137, "run", "the job's supervisor died"});
  return true;
}

// The environment jobs inherit: the agent's own, minus its secrets and berth's reserved names.
std::map<std::string, std::string> BaseEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string key = kv.substr(0, eq);
    if (StartsWith(key, "BERTH_") || StartsWith(key, "SKYPILOT_") || key == "CUDA_VISIBLE_DEVICES")
      continue;
    env[key] = kv.substr(eq + 1);
  }
  return env;
}

}  // namespace

Agent::Agent(AgentOptions options) : options_(std::move(options)) {}

Agent::~Agent() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
}

std::string Agent::KeyOf(int64_t job, int attempt, int rank) const {
  return fmt::format("{}-{}-{}", job, attempt, rank);
}

void Agent::RequestStop() {
  stop_ = true;
  cv_.notify_all();
  if (auto* c = static_cast<net::HttpClient*>(watch_client_.load())) c->Abort();
}

Status Agent::LoadIdentity() {
  std::error_code ec;
  std::filesystem::create_directories(options_.state_dir + "/jobs", ec);
  std::filesystem::create_directories(options_.state_dir + "/specs", ec);
  if (ec) return Status::Internal("cannot create " + options_.state_dir + ": " + ec.message());
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
  std::string path = options_.state_dir + "/node_id";
  node_id_ = Trim(ReadFileOr(path));
  if (node_id_.empty()) {
    node_id_ = RandomHex(16);
    std::ofstream out(path);
    out << node_id_ << "\n";
    if (!out) return Status::Internal("cannot write " + path);
  }
  return Status::Ok();
}

// Re-adopts the jobs a previous agent process left in the state dir: running ones are watched
// again, and exits that happened meanwhile get reported.
void Agent::AdoptExisting() {
  std::string root = options_.state_dir + "/jobs";
  DIR* d = opendir(root.c_str());
  if (!d) return;
  std::lock_guard lock(mu_);
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    auto parts = Split(name, '-');
    if (parts.size() != 3) continue;
    LocalJob job;
    try {
      job.job = std::stoll(parts[0]);
      job.attempt = std::stoi(parts[1]);
      job.rank = std::stoi(parts[2]);
    } catch (...) {
      continue;
    }
    job.dir = root + "/" + name;
    std::string pid = Trim(ReadFileOr(job.dir + "/supervisor.pid"));
    job.pid = pid.empty() ? 0 : std::atoi(pid.c_str());
    auto events = ParseEvents(ReadFileOr(job.dir + "/events"));
    bool exited = !events.empty() && events.back().kind == "exited";
    if (!exited && !ProcessAlive(job.pid)) {
      // The supervisor is gone without recording an exit (machine reboot, kill -9 of the
      // supervisor).
      AppendEvent(job.dir, {"exited", 137, "run", "the job's supervisor died"});
    }
    LogInfo("re-adopting job {} attempt {} rank {}{}", job.job, job.attempt, job.rank,
            exited ? " (exited)" : "");
    WatchDir(job, name);
    jobs_[name] = job;
  }
  closedir(d);
}

Status Agent::Run() {
  SetLogPrefix("agent " + options_.name);
  if (!IsValidName(options_.name))
    return Status::Invalid("--name: invalid node name '" + options_.name + "'");
  if (options_.state_dir.empty()) return Status::Invalid("the agent needs a --state-dir");
  std::error_code abs_ec;
  options_.state_dir = std::filesystem::absolute(options_.state_dir, abs_ec).string();
  BERTH_RETURN_IF_ERROR(LoadIdentity());
  resources_ = DiscoverNode(options_.gpus);
  if (options_.cpus) resources_.cpus = *options_.cpus;
  if (options_.memory) resources_.memory = *options_.memory;
  if (!options_.gpus.empty()) {
    auto gpus = ParseGpuDeclaration(options_.gpus);
    if (!gpus.ok()) return gpus.status();
    resources_.gpus = *gpus;
  }
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0)
    LogWarn("inotify unavailable ({}); scanning job directories instead", strerror(errno));
  AdoptExisting();
  spawner_ = std::make_unique<Spawner>(options_.self_exe);

  // The first registration decides whether this node may join at all.
  Status first = Register();
  while (!first.ok() && first.code() == Code::kUnavailable && !stop_) {
    LogWarn("{}; retrying", first.message());
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_.load(); });
    lock.unlock();
    first = Register();
  }
  if (!first.ok() && !stop_) return first;

  std::thread heartbeat([this] { HeartbeatLoop(); });
  std::thread launcher([this] { LauncherLoop(); });
  std::thread shipper([this] { ShipperLoop(); });
  ControlLoop();
  cv_.notify_all();
  heartbeat.join();
  launcher.join();
  shipper.join();
  ShipOnce(true);  // flush what the jobs wrote and reported up to now
  LogInfo("stopped; {} job(s) keep running under their supervisors", jobs_.size());
  return Status::Ok();
}

Status Agent::Register() {
  json::object body;
  body["name"] = options_.name;
  body["node_id"] = node_id_;
  body["address"] = options_.address;
  body["pool"] = options_.pool;
  json::object labels;
  for (const auto& [k, v] : options_.labels) labels[k] = v;
  body["labels"] = std::move(labels);
  body["cpus_milli"] = resources_.cpus;
  body["memory_mib"] = resources_.memory;
  json::array gpus;
  for (const auto& g : resources_.gpus)
    gpus.push_back(json::object{{"index", g.index}, {"type", g.type}});
  body["gpus"] = std::move(gpus);
  json::array running;
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, job] : jobs_) {
      running.push_back(
          json::object{{"job", job.job}, {"attempt", job.attempt}, {"rank", job.rank}});
    }
  }
  body["running"] = std::move(running);
  net::HttpClient client(options_.server_url, options_.token);
  int64_t sent_at = MonotonicMs();  // the server's lease starts no earlier than this
  auto res = client.Request("POST", "/v1/agent/register", json::serialize(body), 10'000);
  if (!res.ok()) return res.status();
  auto v = ParseJson(res->body, "register answer");
  std::string error =
      v.ok() && v->is_object() ? GetString(v->as_object(), "error").value() : res->body;
  if (res->status == 409) return Status::Conflict(error);
  if (res->status == 401) return Status::Unauthorized(error);
  if (res->status != 200 || !v.ok() || !v->is_object()) {
    return Status::Invalid(fmt::format("server refused registration ({}): {}", res->status, error));
  }
  const json::object& o = v->as_object();
  std::lock_guard lock(mu_);
  session_ = GetString(o, "session").value();
  lease_ms_ = GetInt(o, "lease_ms", 30'000).value();
  heartbeat_ms_ = GetInt(o, "heartbeat_ms", lease_ms_ / 4).value();
  last_renewal_ = sent_at;
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
      std::lock_guard lock(mu_);
      must_register = need_register_;
      session = session_;
    }
    if (must_register) {
      Status st = Register();
      if (!st.ok()) {
        if (st.code() == Code::kConflict) LogError("{}", st.message());
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stop_.load(); });
        continue;
      }
      std::lock_guard lock(mu_);
      session = session_;
    }
    net::HttpClient client(options_.server_url, options_.token);
    watch_client_ = &client;
    if (stop_) {
      watch_client_ = nullptr;
      break;
    }
    std::string pending;
    int status = 0;
    Status st = client.Stream(
        "GET",
        "/v1/agent/watch?node=" + net::UrlEncode(options_.name) +
            "&session=" + net::UrlEncode(session),
        "", 20'000,
        [&](std::string_view data) {
          pending.append(data);
          size_t nl;
          while ((nl = pending.find('\n')) != std::string::npos) {
            std::string line = pending.substr(0, nl);
            pending.erase(0, nl + 1);
            auto v = ParseJson(line, "watch message");
            if (v.ok() && v->is_object()) HandleMessage(v->as_object());
          }
          return !stop_.load();
        },
        &status);
    watch_client_ = nullptr;
    if (stop_) break;
    if (!st.ok()) LogWarn("watch stream: {}", st.message());
    {
      std::lock_guard lock(mu_);
      need_register_ =
          true;  // the server may have restarted: register again, which also reconciles
    }
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_.load(); });
  }
}

void Agent::HandleMessage(const json::object& m) {
  std::string type = GetString(m, "type").value();
  if (type == "launch") {
    std::lock_guard lock(mu_);
    launches_.push_back(m);
    cv_.notify_all();
  } else if (type == "stop") {
    auto job = GetInt(m, "job").value();
    auto attempt = static_cast<int>(GetInt(m, "attempt").value());
    auto rank = static_cast<int>(GetInt(m, "rank").value());
    std::lock_guard lock(mu_);
    auto it = jobs_.find(KeyOf(job, attempt, rank));
    if (it != jobs_.end()) {
      StopJob(it->second);
    } else if (launching_.count(KeyOf(job, attempt, rank))) {
      // Being launched right now (spec fetch, run plan): Launch() drops it and reports it never
      // ran. Saying so here would let the server free its GPUs while the launch still starts the
      // job.
      stopped_launches_.insert(KeyOf(job, attempt, rank));
    } else {
      // Maybe still queued for launch: drop it, and tell the server it never ran.
      for (auto q = launches_.begin(); q != launches_.end(); ++q) {
        if (GetInt(*q, "job").value() == job && GetInt(*q, "attempt").value() == attempt &&
            GetInt(*q, "rank").value() == rank) {
          launches_.erase(q);
          break;
        }
      }
      reports_.push_back(json::object{{"job", job},
                                      {"attempt", attempt},
                                      {"rank", rank},
                                      {"event", "exited"},
                                      {"exit_code", nullptr},
                                      {"phase", "run"},
                                      {"reason", "was not running"}});
      cv_.notify_all();
    }
  }
}

void Agent::StopJob(LocalJob& job) {
  if (job.exited) return;
  if (job.pid > 0) ::kill(job.pid, SIGTERM);
  job.stop_sent = true;
}

// Renews the node's lease. Each renewal is also written to <state>/lease, which every job's
// supervisor watches: without renewals (server unreachable, agent frozen or dead) the supervisors
// stop their jobs before the server's lease runs out, so that no job ever runs twice.
void Agent::HeartbeatLoop() {
  net::HttpClient client(options_.server_url, options_.token);
  while (!stop_) {
    DurationMs interval;
    std::string session;
    {
      std::unique_lock lock(mu_);
      interval = heartbeat_ms_;
      cv_.wait_for(lock, std::chrono::milliseconds(interval), [this] { return stop_.load(); });
      if (stop_) return;
      session = session_;
    }
    if (session.empty()) continue;
    int64_t sent_at = MonotonicMs();
    json::object body{{"node", options_.name}, {"session", session}};
    auto res = client.Request("POST", "/v1/agent/heartbeat", json::serialize(body),
                              std::max<DurationMs>(interval, 1000));
    if (!res.ok()) continue;
    std::lock_guard lock(mu_);
    if (res->status == 200) {
      last_renewal_ = sent_at;
      WriteLeaseFile(options_.state_dir + "/lease", sent_at, lease_ms_);
    } else if (res->status == 409 && session == session_) {
      need_register_ = true;
      if (auto* c = static_cast<net::HttpClient*>(watch_client_.load())) c->Abort();
    }
  }
}

void Agent::LauncherLoop() {
  net::HttpClient client(options_.server_url, options_.token);
  while (true) {
    json::object launch;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !launches_.empty(); });
      if (stop_) return;
      launch = std::move(launches_.front());
      launches_.pop_front();
      launching_.insert(KeyOf(GetInt(launch, "job").value(),
                              static_cast<int>(GetInt(launch, "attempt").value()),
                              static_cast<int>(GetInt(launch, "rank").value())));
    }
    int64_t spec_id = GetInt(launch, "spec_id").value();
    std::string spec_text;
    {
      std::lock_guard lock(mu_);
      auto it = spec_cache_.find(spec_id);
      if (it != spec_cache_.end()) spec_text = it->second;
    }
    std::string error;
    if (spec_text.empty()) {
      // Agents fetch a spec once, however many jobs share it.
      std::string cached = ReadFileOr(fmt::format("{}/specs/{}.json", options_.state_dir, spec_id));
      if (!cached.empty()) {
        spec_text = cached;
      } else {
        auto res = client.Request("GET", fmt::format("/v1/specs/{}", spec_id), "", 30'000);
        if (!res.ok()) {
          error = "cannot fetch the job's spec: " + res.status().message();
        } else if (res->status != 200) {
          error = fmt::format("cannot fetch the job's spec (HTTP {})", res->status);
        } else {
          spec_text = res->body;
          std::ofstream(fmt::format("{}/specs/{}.json", options_.state_dir, spec_id)) << spec_text;
        }
      }
      if (!spec_text.empty()) {
        std::lock_guard lock(mu_);
        spec_cache_[spec_id] = spec_text;
      }
    }
    launch["spec_text"] = spec_text;
    launch["error"] = error;
    Launch(launch);
  }
}

void Agent::Launch(const json::object& m) {
  int64_t job_id = GetInt(m, "job").value();
  int attempt = static_cast<int>(GetInt(m, "attempt").value());
  int rank = static_cast<int>(GetInt(m, "rank").value());
  std::string key = KeyOf(job_id, attempt, rank);
  {
    std::lock_guard lock(mu_);
    if (jobs_.count(key)) {  // already have it (a resent launch): its reports will follow
      launching_.erase(key);
      stopped_launches_.erase(key);
      return;
    }
  }
  LocalJob job;
  job.job = job_id;
  job.attempt = attempt;
  job.rank = rank;
  job.dir = options_.state_dir + "/jobs/" + key;
  std::error_code ec;
  std::filesystem::create_directories(job.dir, ec);
  std::string error = GetString(m, "error").value();
  if (ec) error = "cannot create " + job.dir + ": " + ec.message();

  RunPlan plan;
  if (error.empty()) {
    auto spec_json = ParseJson(GetString(m, "spec_text").value(), "spec");
    Result<JobSpec> spec =
        spec_json.ok() ? SpecFromJson(*spec_json) : Result<JobSpec>(spec_json.status());
    if (!spec.ok()) {
      error = "the job's spec is unreadable: " + spec.status().message();
    } else {
      int num_nodes = static_cast<int>(GetInt(m, "num_nodes", 1).value());
      std::vector<std::string> ips;
      if (const auto* a = m.if_contains("node_ips"); a && a->is_array()) {
        for (const auto& ip : a->as_array())
          ips.push_back(ip.is_string() ? std::string(ip.as_string()) : "");
      }
      std::vector<std::string> devices;
      if (const auto* a = m.if_contains("gpus"); a && a->is_array()) {
        for (const auto& g : a->as_array()) devices.push_back(std::to_string(AsInt(g).value_or(0)));
      }
      bool grouped = m.contains("group");
      std::string job_rank = grouped ? std::to_string(GetInt(m, "group_rank").value()) : "0";
      std::string num_jobs = grouped ? std::to_string(GetInt(m, "num_jobs").value()) : "1";
      std::map<std::string, std::string> env = BaseEnvironment();
      for (const auto& [k, v] : spec->envs) env[k] = v;
      std::string gpus_per_node = std::to_string(GetInt(m, "gpus_per_node", 0).value());
      std::string node_ips = Join(ips, "\n");
      std::map<std::string, std::string> berth = {
          {"BERTH_JOB_ID", std::to_string(job_id)},
          {"BERTH_JOB_NAME", GetString(m, "name").value()},
          {"BERTH_ATTEMPT", std::to_string(attempt)},
          {"BERTH_NODE_RANK", std::to_string(rank)},
          {"BERTH_NUM_NODES", std::to_string(num_nodes)},
          {"BERTH_NODE_IPS", node_ips},
          {"BERTH_NUM_GPUS_PER_NODE", gpus_per_node},
          {"BERTH_JOB_RANK", job_rank},
          {"BERTH_NUM_JOBS", num_jobs},
          {"SKYPILOT_NODE_RANK", std::to_string(rank)},
          {"SKYPILOT_NUM_NODES", std::to_string(num_nodes)},
          {"SKYPILOT_NODE_IPS", node_ips},
          {"SKYPILOT_NUM_GPUS_PER_NODE", gpus_per_node},
          {"SKYPILOT_JOB_RANK", job_rank},
          {"SKYPILOT_NUM_JOBS", num_jobs},
          {"SKYPILOT_TASK_ID", fmt::format("berth-{}-{}", job_id, attempt)},
      };
      for (const auto& [k, v] : berth) env[k] = v;
      plan.setup_env = env;
      plan.setup_env["BERTH_SETUP_NODE_RANK"] = std::to_string(rank);
      plan.setup_env["SKYPILOT_SETUP_NODE_RANK"] = std::to_string(rank);
      plan.run_env = env;
      plan.run_env["CUDA_VISIBLE_DEVICES"] = Join(devices, ",");
      plan.workdir = spec->workdir.empty() ? job.dir : spec->workdir;
      plan.setup = spec->setup;
      plan.run = spec->run;
      plan.kill_grace_ms = GetInt(m, "kill_grace_ms", 10'000).value();
      plan.lease_file = options_.state_dir + "/lease";
      Status st = WriteRunPlan(job.dir, plan);
      if (!st.ok()) error = st.message();
    }
  }
  std::lock_guard lock(mu_);
  launching_.erase(key);
  bool stopped = stopped_launches_.erase(key) > 0;
  if (jobs_.count(key)) return;
  if (stopped) {
    std::filesystem::remove_all(job.dir, ec);
    reports_.push_back(json::object{{"job", job_id},
                                    {"attempt", attempt},
                                    {"rank", rank},
                                    {"event", "exited"},
                                    {"exit_code", nullptr},
                                    {"phase", "run"},
                                    {"reason", "was not running"}});
    cv_.notify_all();
    return;
  }
  reports_.push_back(
      json::object{{"job", job_id}, {"attempt", attempt}, {"rank", rank}, {"event", "accepted"}});
  if (!error.empty()) {
    AppendEvent(job.dir, {"exited", 127, "launch", error});
  } else {
    auto pid = spawner_->Spawn(job.dir);
    if (!pid.ok()) pid = SpawnSupervisor(options_.self_exe, job.dir);
    if (!pid.ok()) {
      AppendEvent(job.dir, {"exited", 127, "launch", pid.status().message()});
    } else {
      job.pid = *pid;
    }
  }
  WatchDir(job, key);
  jobs_[key] = job;
  dirty_.insert(key);
  cv_.notify_all();
}

void Agent::WatchDir(LocalJob& job, const std::string& key) {
  if (inotify_fd_ < 0) return;
  job.watch = inotify_add_watch(inotify_fd_, job.dir.c_str(),
                                IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE);
  if (job.watch >= 0) watch_keys_[job.watch] = key;
}

void Agent::ShipperLoop() {
  int64_t last_full = 0;
  alignas(inotify_event) char buf[16384];
  while (!stop_) {
    bool full = inotify_fd_ < 0 || MonotonicMs() - last_full >= 1000;
    std::set<std::string> dirty;
    if (!full) {
      pollfd p{inotify_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        ::usleep(2000);  // let a burst of changes arrive, to ship them in one round
        ssize_t n;
        std::lock_guard lock(mu_);
        while ((n = ::read(inotify_fd_, buf, sizeof(buf))) > 0) {
          for (char* at = buf; at < buf + n;) {
            auto* e = reinterpret_cast<inotify_event*>(at);
            if (e->mask & IN_Q_OVERFLOW) full = true;
            auto it = watch_keys_.find(e->wd);
            if (it != watch_keys_.end()) dirty.insert(it->second);
            at += sizeof(inotify_event) + e->len;
          }
        }
      }
    }
    bool reports_waiting;
    {
      std::lock_guard lock(mu_);
      dirty.insert(dirty_.begin(), dirty_.end());
      dirty_.clear();
      reports_waiting = !reports_.empty();
    }
    if (full) {
      last_full = MonotonicMs();
      ShipOnce(false);
    } else if (!dirty.empty() || reports_waiting) {
      ShipOnce(false, &dirty);
    }
    if (inotify_fd_ < 0) {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stop_.load(); });
    }
  }
}

void Agent::ShipOnce(bool final, const std::set<std::string>* only) {
  // Reap supervisors that were our children (they exit after recording the job's end).
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  thread_local std::unique_ptr<net::HttpClient> client;
  if (!client) client = std::make_unique<net::HttpClient>(options_.server_url, options_.token);
  std::string session;
  std::vector<LocalJob> snapshot;
  {
    std::lock_guard lock(mu_);
    session = session_;
    if (only) {
      for (const auto& key : *only) {
        auto it = jobs_.find(key);
        if (it != jobs_.end()) snapshot.push_back(it->second);
      }
    } else {
      for (const auto& [key, job] : jobs_) snapshot.push_back(job);
    }
  }
  if (!only) {  // the full scan: also look for supervisors that died without a word
    for (const auto& job : snapshot) {
      if (!job.exited && RecordEndOfDeadSupervisor(job.dir, job.pid)) {
        LogWarn("job {} attempt {} rank {}: its supervisor died without recording an exit", job.job,
                job.attempt, job.rank);
      }
    }
  }
  if (session.empty()) return;
  DurationMs timeout = final ? 2000 : 10'000;
  // For each job: new events first, then its output up to now, so that an exit is reported only
  // after all output written before it has been shipped.
  std::vector<json::object> new_reports;
  for (auto& job : snapshot) {
    auto events = ParseEvents(ReadFileOr(job.dir + "/events"));
    std::vector<SupervisorEvent> fresh(events.begin() + std::min(job.events_seen, events.size()),
                                       events.end());
    struct stat st {};
    int64_t size = ::stat((job.dir + "/output.log").c_str(), &st) == 0 ? st.st_size : 0;
    bool shipped_all = true;
    for (int round = 0; job.log_shipped < size; ++round) {
      if (round == 16) {  // the server keeps refusing: try again next time
        shipped_all = false;
        break;
      }
      int fd = ::open((job.dir + "/output.log").c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) break;
      std::string buf(static_cast<size_t>(std::min<int64_t>(size - job.log_shipped, 1 << 20)),
                      '\0');
      ssize_t n = ::pread(fd, buf.data(), buf.size(), job.log_shipped);
      ::close(fd);
      if (n <= 0) break;
      buf.resize(static_cast<size_t>(n));
      auto res = client->Request(
          "POST",
          fmt::format("/v1/agent/logs?node={}&session={}&job={}&attempt={}&rank={}&offset={}",
                      net::UrlEncode(options_.name), session, job.job, job.attempt, job.rank,
                      job.log_shipped),
          buf, timeout);
      if (!res.ok()) {
        shipped_all = false;
        break;
      }
      auto v = ParseJson(res->body, "logs answer");
      int64_t server_size =
          v.ok() && v->is_object() ? GetInt(v->as_object(), "size", -1).value() : -1;
      if ((res->status == 200 || res->status == 409) && server_size >= 0) {
        // 409: the server holds a different amount (e.g. it lost a tail in a crash): resume from
        // its size.
        job.log_shipped = std::min<int64_t>(server_size, size);
        if (res->status == 409 && server_size > size) break;
      } else {
        shipped_all = false;
        break;
      }
    }
    size_t reported = job.events_seen;
    if (shipped_all) {
      for (const auto& e : fresh) {
        json::object r{
            {"job", job.job}, {"attempt", job.attempt}, {"rank", job.rank}, {"event", e.kind}};
        if (e.kind == "exited") {
          r["exit_code"] = e.exit_code;
          r["phase"] = e.phase;
          r["reason"] = e.reason;
        }
        new_reports.push_back(std::move(r));
      }
      reported = events.size();
    }
    std::lock_guard lock(mu_);
    auto it = jobs_.find(KeyOf(job.job, job.attempt, job.rank));
    if (it == jobs_.end()) continue;
    it->second.log_shipped = job.log_shipped;
    it->second.events_seen = reported;
    for (const auto& e : fresh) {
      if (shipped_all && e.kind == "exited") it->second.exited = true;
    }
  }
  std::vector<json::object> batch;
  {
    std::lock_guard lock(mu_);
    for (auto& r : new_reports) reports_.push_back(std::move(r));
    batch.assign(reports_.begin(), reports_.end());
  }
  if (batch.empty()) return;
  json::array arr;
  for (const auto& r : batch) arr.push_back(r);
  json::object body{{"node", options_.name}, {"session", session}, {"reports", std::move(arr)}};
  auto res = client->Request("POST", "/v1/agent/report", json::serialize(body), timeout);
  if (!res.ok() || res->status != 200) {
    if (res.ok() && res->status == 409) {
      std::lock_guard lock(mu_);
      need_register_ = true;
    }
    return;  // kept; sent again next round
  }
  auto v = ParseJson(res->body, "report answer");
  std::lock_guard lock(mu_);
  reports_.erase(reports_.begin(),
                 reports_.begin() + static_cast<long>(std::min(batch.size(), reports_.size())));
  if (!v.ok() || !v->is_object()) return;
  const json::value* results = v->as_object().if_contains("results");
  if (!results || !results->is_array()) return;
  for (size_t i = 0; i < results->as_array().size() && i < batch.size(); ++i) {
    const auto& r = results->as_array()[i];
    if (!r.is_object()) continue;
    std::string action = GetString(r.as_object(), "action").value();
    const json::object& sent = batch[i];
    std::string key =
        KeyOf(GetInt(sent, "job").value(), static_cast<int>(GetInt(sent, "attempt").value()),
              static_cast<int>(GetInt(sent, "rank").value()));
    auto it = jobs_.find(key);
    if (it == jobs_.end()) continue;
    if (action == "stop") StopJob(it->second);
    if (GetString(sent, "event").value() == "exited" && it->second.exited) {
      // The server has the exit and all output: the record can go.
      std::error_code ec;
      std::filesystem::remove_all(it->second.dir, ec);
      if (it->second.watch >= 0) {
        inotify_rm_watch(inotify_fd_, it->second.watch);
        watch_keys_.erase(it->second.watch);
      }
      jobs_.erase(it);
    }
  }
}

}  // namespace berth
