#include "server/server.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/cpu_budget.h"
#include "common/files.h"
#include "common/log.h"
#include "common/strings.h"

namespace berth {

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || StartsWith(host, "127.");
}

namespace {

// Reads the token file, or creates it (mode 0600) with a fresh random token.
Result<std::string> LoadOrCreateToken(const std::string& path) {
  std::string existing = Trim(ReadFileOr(path));
  if (!existing.empty()) return existing;
  std::string token = RandomHex(24);
  if (!WriteFileAtomic(path, token + "\n", /*sync=*/true, 0600)) {
    return Status::Internal("cannot write " + path + ": " + strerror(errno));
  }
  return token;
}

}  // namespace

Server::Server(ServerOptions options, const Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

Server::~Server() { Stop(); }

Status Server::Start() {
  if (options_.state_dir.empty()) return Status::Invalid("the server needs a --state-dir");
  std::error_code ec;
  std::filesystem::create_directories(options_.state_dir, ec);
  if (ec)
    return Status::Internal("cannot create state dir " + options_.state_dir + ": " + ec.message());

  if (!IsLoopbackHost(options_.host)) options_.require_token = true;
  if (options_.require_token) {
    if (!options_.token.empty()) {
      token_ = options_.token;
    } else {
      auto token = LoadOrCreateToken(options_.state_dir + "/token");
      if (!token.ok()) return token.status();
      token_ = *token;
    }
  }

  auto store = OpenSqliteStore(options_.state_dir + "/berth.db");
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  logs_ = std::make_unique<LogStore>(options_.state_dir + "/logs");
  BERTH_RETURN_IF_ERROR(LoadState());

  net::HttpServerOptions http;
  http.host = options_.host;
  http.port = options_.port;
  http.max_body_bytes = options_.max_body_bytes;
  http.threads = options_.threads > 0 ? options_.threads : ReadCpuBudget().usable;
  http_ = std::make_unique<net::HttpServer>(
      http, [this](net::HttpRequest&& req, std::shared_ptr<net::Responder> res) {
        Handle(std::move(req), res);
      });
  BERTH_RETURN_IF_ERROR(http_->Start());
  started_ = true;
  scheduler_thread_ = std::thread([this] { SchedulerLoop(); });
  housekeeping_thread_ = std::thread([this] { HousekeepingLoop(); });
  KickScheduler();
  LogInfo("listening on {} ({} worker threads{})", url(), http.threads,
          options_.require_token ? ", token required" : "");
  return Status::Ok();
}

int Server::port() const { return http_ ? http_->port() : 0; }

std::string Server::url() const {
  std::string host = options_.host;
  if (host == "0.0.0.0" || host == "::") host = "127.0.0.1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(port());
}

void Server::Stop() {
  if (!started_.exchange(false)) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    // End every stream and long poll so that clients notice at once and reconnect elsewhere/later.
    for (auto& [name, node] : nodes_) {
      if (node.watch) node.watch->End();
      node.watch.reset();
    }
    for (auto& [job, waiter] : log_waiters_) waiter.responder->End();
    log_waiters_.clear();
  }
  sched_cv_.notify_all();
  housekeeping_cv_.notify_all();
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  if (housekeeping_thread_.joinable()) housekeeping_thread_.join();
  http_->Stop();
  std::lock_guard lock(mu_);
  for (auto& [name, node] : nodes_) node.watch.reset();
}

Status Server::LoadState() {
  TimeMs now = clock_.Now();
  auto nodes = store_->LoadNodes();
  if (!nodes.ok()) return nodes.status();
  std::lock_guard lock(mu_);
  for (auto& row : *nodes) {
    NodeRuntime node;
    node.row = row;
    // Agents get one lease period after a server restart to reconnect before their nodes count as
    // down.
    if (row.state != NodeState::kDown) node.lease_expires = now + options_.lease_ms;
    nodes_[row.name] = std::move(node);
  }
  auto jobs = store_->LoadActiveJobs();
  if (!jobs.ok()) return jobs.status();
  std::map<int64_t, int> group_sizes;
  for (auto& row : *jobs) {
    ActiveJob job;
    job.row = row;
    job.spec = SpecFor(row.spec_id);
    if (!job.spec) {
      LogError("job {}: spec {} is unreadable; it stays pending", row.id, row.spec_id);
      continue;
    }
    job.ranks.resize(static_cast<size_t>(row.num_nodes));
    if (row.group) {
      auto size = group_sizes.find(*row.group);
      if (size == group_sizes.end()) {
        auto stored = store_->GroupSize(*row.group);
        size = group_sizes.emplace(*row.group, stored.ok() ? *stored : 0).first;
      }
      job.group_size = size->second;
    }
    if (row.status == JobStatus::kRunning) {
      for (auto& r : job.ranks) r.running = true;
    }
    if (IsActive(row.status)) Allocate(row, +1);
    jobs_[row.id] = std::move(job);
  }
  LogInfo("loaded {} nodes and {} active jobs", nodes_.size(), jobs_.size());
  return Status::Ok();
}

std::shared_ptr<const JobSpec> Server::SpecFor(int64_t spec_id) {
  auto it = specs_.find(spec_id);
  if (it != specs_.end()) return it->second;
  auto text = store_->GetSpec(spec_id);
  if (!text.ok()) return nullptr;
  auto value = ParseJson(*text, "stored spec");
  if (!value.ok()) return nullptr;
  auto spec = SpecFromJson(*value);
  if (!spec.ok()) return nullptr;
  auto shared = std::make_shared<const JobSpec>(std::move(*spec));
  specs_[spec_id] = shared;
  return shared;
}

void Server::KickScheduler() {
  {
    std::lock_guard lock(mu_);
    pass_requested_ = true;
  }
  sched_cv_.notify_one();
}

void Server::Allocate(const JobRow& row, int sign) {
  for (const auto& grant : row.placement) {
    auto it = nodes_.find(grant.node);
    if (it == nodes_.end()) continue;
    auto& node = it->second;
    node.cpus_used += sign * row.resources.cpus;
    node.memory_used += sign * row.resources.memory;
    for (const auto& g : grant.gpus) node.gpu_used[g.index] += sign * g.milli;
  }
}

void Server::SendToNode(NodeRuntime& node, const json::object& message) {
  std::string line = SerializeJson(message) + "\n";
  if (node.watch && !node.watch->closed()) {
    node.watch->Write(std::move(line));
  } else {
    node.outbox.push_back(std::move(line));
  }
}

void Server::WakeLogWaiters(int64_t job) {
  auto range = log_waiters_.equal_range(job);
  std::vector<std::function<void()>> fire;
  for (auto it = range.first; it != range.second; ++it) fire.push_back(std::move(it->second.fire));
  log_waiters_.erase(range.first, range.second);
  // The callbacks only read the log store and post a response; they take no lock of ours.
  for (auto& f : fire) http_->Post(std::move(f));
}

void Server::HousekeepingLoop() {
  int64_t last_ping = MonotonicMs();
  std::unique_lock lock(mu_);
  while (!stopping_) {
    housekeeping_cv_.wait_for(lock, std::chrono::milliseconds(200));
    if (stopping_) break;
    TimeMs now = clock_.Now();
    CheckLeases(now);
    CheckTimeLimits(now);
    if (MonotonicMs() - last_ping >= 5000) {
      last_ping = MonotonicMs();
      // Scheduling passes over a big queue build large short-lived snapshots; give the memory back
      // rather than keep the peak for ever (outside the lock: it may take milliseconds).
      lock.unlock();
      malloc_trim(0);
      lock.lock();
      json::object ping{{"type", "ping"}};
      for (auto& [name, node] : nodes_) {
        if (node.watch && !node.watch->closed()) SendToNode(node, ping);
      }
    }
  }
}

void Server::CheckLeases(TimeMs now) {
  Batch batch;
  bool changed = false;
  for (auto& [name, node] : nodes_) {
    if (node.row.state == NodeState::kDown || node.lease_expires > now) continue;
    LogWarn("node {}: lease expired; marking it down", name);
    node.row.state = NodeState::kDown;
    node.row.down_since = now;
    node.session.clear();
    if (node.watch) node.watch->End();
    node.watch.reset();
    node.outbox.clear();
    batch.nodes.push_back(node.row);
    changed = true;
    std::vector<std::tuple<int64_t, int, int>> gone;  // dying ranks that died with the node
    for (const auto& [key, dying] : dying_) {
      for (const auto& grant : dying.placement) {
        if (grant.node == name) gone.emplace_back(key.first, key.second, grant.rank);
      }
    }
    for (const auto& [job_id, attempt, rank] : gone) DyingRankGone(job_id, attempt, rank);
    for (auto& [id, job] : jobs_) {
      bool here = false;
      for (const auto& g : job.row.placement) here = here || g.node == name;
      if (!here || (!IsActive(job.row.status) && !job.terminating)) continue;
      if (job.terminating) {  // its processes died with the node
        Release(job);
        continue;
      }
      std::string why = "node " + name + " stopped answering (lease expired)";
      if (job.spec->on_node_lost == RecoveryAction::kRequeue) {
        Requeue(job, why + "; requeued", now, batch);
      } else {
        EndJob(job, JobStatus::kLost, why, std::nullopt, now, batch);
      }
    }
  }
  if (!changed) return;
  Status st = CommitLocked(batch);
  if (!st.ok()) LogError("recording lost nodes: {}", st.message());
  ReapFinished();
  pass_requested_ = true;
  sched_cv_.notify_one();
}

void Server::CheckTimeLimits(TimeMs now) {
  Batch batch;
  for (auto& [id, job] : jobs_) {
    if (job.terminating || !IsActive(job.row.status) || !job.spec->time_limit) continue;
    TimeMs since = job.row.started_at.value_or(0);
    if (!job.row.started_at || now - since <= *job.spec->time_limit) continue;
    EndJob(job, JobStatus::kFailed,
           "time limit " + FormatDuration(*job.spec->time_limit) + " exceeded", std::nullopt, now,
           batch);
  }
  if (batch.empty()) return;
  Status st = CommitLocked(batch);
  if (!st.ok()) LogError("recording time limits: {}", st.message());
  ReapFinished();
}

}  // namespace berth
