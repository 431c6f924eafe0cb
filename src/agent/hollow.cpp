#include "agent/hollow.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "agent/node_gpus.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/strings.h"
#include "spec/job_spec.h"

namespace berth {

HollowNodes::HollowNodes(AgentOptions options, int count, const Clock& clock)
    : options_(std::move(options)),
      count_(count),
      clock_(clock),
      server_urls_(SplitServerUrls(options_.server_url)) {
  if (server_urls_.empty()) server_urls_.push_back(options_.server_url);
  connection_ = std::make_unique<FailoverAgentConnection>(server_urls_, options_.token,
                                                          options_.tls_fingerprint);
}

HollowNodes::~HollowNodes() = default;

void HollowNodes::RequestStop() {
  stop_ = true;
  {
    // Under the lock: a waiter between its check of stop_ and its wait sees it, and Run() either
    // has set streams_ or will see stop_ once it does.
    std::lock_guard lock(mu_);
    if (streams_) streams_->Stop();
  }
  cv_.notify_all();
  registrations_cv_.notify_all();
  messages_cv_.notify_all();
  connection_->AbortWatch();
}

Status HollowNodes::Register(size_t index, FailoverAgentConnection& connection) {
  proto::RegisterRequest request;
  {
    std::lock_guard lock(mu_);
    request.name = nodes_[index].name;
    request.node_id = nodes_[index].node_id;
    for (const auto& [job, attempt, rank] : nodes_[index].running) {
      request.running.push_back({job, attempt, rank});
    }
  }
  request.address = options_.address.empty() ? "127.0.0.1" : options_.address;
  request.pool = options_.pool;
  request.labels = options_.labels;
  request.cpus_milli = options_.cpus.value_or(8 * kMilliPerCpu);
  request.memory_mib = options_.memory.value_or(64 * kMibPerGib);
  if (!options_.gpus.empty()) {
    // No device files: the declared GPUs and MIG slices are only offered.
    auto gpus = LoadNodeGpus(options_.gpus, options_.mig, request.name, {}, "/nonexistent");
    if (!gpus.ok()) return gpus.status();
    request.gpus = gpus->offered();
  }
  auto answer = connection.Register(request);
  const size_t server = connection.current_index();
  if (!answer.ok()) {
    return Status(answer.status().code(), fmt::format("node {}: registration refused: {}",
                                                      request.name, answer.status().message()));
  }
  std::lock_guard lock(mu_);
  nodes_[index].session = answer->session;
  nodes_[index].server = server;
  nodes_[index].need_register = false;
  heartbeat_ms_ = answer->heartbeat_ms;
  return Status::Ok();
}

HollowNodes::HollowRun HollowNodes::RunOf(size_t index, const proto::LaunchMessage& launch) {
  const int64_t spec_id = launch.spec_id;
  {
    std::lock_guard lock(mu_);
    auto it = spec_runs_.find(spec_id);
    if (it != spec_runs_.end()) return it->second;
  }
  HollowRun run;
  SpecFetch fetch{.spec_id = spec_id, .job = launch.job};
  {
    std::lock_guard lock(mu_);
    fetch.node = nodes_[index].name;
    fetch.session = nodes_[index].session;
  }
  auto text = connection_->GetSpec(fetch);
  if (text.ok()) {
    auto v = ParseJson(*text, "spec");
    if (v.ok()) {
      auto spec = SpecFromJson(*v);
      if (spec.ok()) {
        for (const auto& [k, val] : spec->envs) {
          try {
            if (k == "BERTH_HOLLOW_SECONDS") run.seconds = std::stod(val);
            if (k == "BERTH_HOLLOW_EXIT") {
              const size_t slash = val.find('/');
              run.exit_code = std::stoi(val.substr(0, slash));
              if (slash != std::string::npos)
                run.every = std::max<int64_t>(1, std::stoll(val.substr(slash + 1)));
            }
          } catch (...) {
          }
        }
      }
    }
  }
  std::lock_guard lock(mu_);
  spec_runs_[spec_id] = run;
  return run;
}

void HollowNodes::OnMessage(size_t index, const proto::WatchMessage& m) {
  if (const auto* launch = std::get_if<proto::LaunchMessage>(&m)) {
    const HollowRun run = RunOf(index, *launch);
    proto::AttemptRank id = launch->id();
    auto key = std::make_tuple(id.job, id.attempt, id.rank);
    std::lock_guard lock(mu_);
    Node& node = nodes_[index];
    if (node.running.count(key)) return;
    node.running.insert(key);
    node.reports.push_back(proto::Report::Event(id, proto::ReportEvent::kAccepted));
    node.reports.push_back(proto::Report::Event(id, proto::ReportEvent::kRunning));
    if (run.seconds) {
      timers_.push_back({clock_.Monotonic() + static_cast<int64_t>(*run.seconds * 1000), index,
                         id.job, id.attempt, id.rank, id.job % run.every == 0 ? run.exit_code : 0});
      std::push_heap(timers_.begin(), timers_.end());
    }
    cv_.notify_all();
  } else if (const auto* stop = std::get_if<proto::StopMessage>(&m)) {
    proto::AttemptRank id = stop->id();
    std::lock_guard lock(mu_);
    Node& node = nodes_[index];
    node.running.erase(std::make_tuple(id.job, id.attempt, id.rank));
    node.reports.push_back(proto::Report::Exited(id, 143, "run", "stopped"));
    cv_.notify_all();
  }
}

void HollowNodes::QueueRegistration(size_t index) {
  nodes_[index].need_register = true;
  if (!streams_ || nodes_[index].queued) return;
  nodes_[index].queued = true;
  to_register_.push_back(index);
  registrations_cv_.notify_one();
}

void HollowNodes::RegisterLoop(FailoverAgentConnection& connection) {
  while (!stop_) {
    size_t index;
    {
      std::unique_lock lock(mu_);
      registrations_cv_.wait(lock, [this] { return stop_ || !to_register_.empty(); });
      if (stop_) return;
      index = to_register_.front();
      to_register_.pop_front();
      nodes_[index].queued = false;
    }
    Status st = Register(index, connection);
    std::unique_lock lock(mu_);
    if (!st.ok()) {
      LogWarn("{}", st.message());
      // Try again in a second; other nodes go meanwhile on the other registrars.
      cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_.load(); });
      QueueRegistration(index);
      continue;
    }
    const Node& node = nodes_[index];
    streams_->Open(index, node.name, node.session, node.server);
  }
}

void HollowNodes::DispatchLoop() {
  while (!stop_) {
    std::deque<std::pair<size_t, proto::WatchMessage>> batch;
    {
      std::unique_lock lock(mu_);
      messages_cv_.wait(lock, [this] { return stop_ || !messages_.empty(); });
      if (stop_) return;
      batch.swap(messages_);
    }
    for (const auto& [index, message] : batch) OnMessage(index, message);
  }
}

void HollowNodes::WatchLoop(size_t index) {
  while (!stop_) {
    bool must_register;
    std::string session;
    std::string name;
    {
      std::lock_guard lock(mu_);
      must_register = nodes_[index].need_register;
      session = nodes_[index].session;
      name = nodes_[index].name;
    }
    if (must_register) {
      Status st = Register(index, *connection_);
      if (!st.ok()) {
        LogWarn("{}", st.message());
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_.load(); });
        continue;
      }
      std::lock_guard lock(mu_);
      session = nodes_[index].session;
    }
    connection_->Watch(name, session, [&](const proto::WatchMessage& m) {
      OnMessage(index, m);
      return !stop_.load();
    });
    std::lock_guard lock(mu_);
    nodes_[index].need_register = true;
  }
}

void HollowNodes::HeartbeatLoop() {
  while (!stop_) {
    DurationMs interval;
    {
      std::unique_lock lock(mu_);
      interval = heartbeat_ms_;
      cv_.wait_for(lock, std::chrono::milliseconds(interval), [this] { return stop_.load(); });
      if (stop_) return;
    }
    for (size_t i = 0; i < nodes_.size() && !stop_; ++i) {
      proto::HeartbeatRequest request;
      {
        std::lock_guard lock(mu_);
        request = {nodes_[i].name, nodes_[i].session};
      }
      if (request.session.empty()) continue;
      Status st = connection_->Heartbeat(request);
      if (st.code() == Code::kConflict) {
        std::lock_guard lock(mu_);
        QueueRegistration(i);
      }
    }
  }
}

void HollowNodes::ReporterLoop() {
  while (!stop_) {
    std::vector<proto::ReportRequest> batches;
    std::vector<size_t> batch_nodes;
    {
      std::unique_lock lock(mu_);
      int64_t wait = 50;
      if (!timers_.empty()) {
        wait = std::clamp<int64_t>(timers_.front().due_ms - clock_.Monotonic(), 0, 50);
      }
      cv_.wait_for(lock, std::chrono::milliseconds(wait), [this] { return stop_.load(); });
      if (stop_) return;
      int64_t now = clock_.Monotonic();
      while (!timers_.empty() && timers_.front().due_ms <= now) {
        std::pop_heap(timers_.begin(), timers_.end());
        Timer t = timers_.back();
        timers_.pop_back();
        Node& node = nodes_[t.node];
        if (node.running.erase({t.job, t.attempt, t.rank})) {
          node.reports.push_back(
              proto::Report::Exited({t.job, t.attempt, t.rank}, t.exit_code, "run", ""));
        }
      }
      for (size_t i = 0; i < nodes_.size(); ++i) {
        if (nodes_[i].reports.empty() || nodes_[i].session.empty()) continue;
        batches.push_back({nodes_[i].name, nodes_[i].session, std::move(nodes_[i].reports)});
        batch_nodes.push_back(i);
        nodes_[i].reports.clear();
      }
    }
    for (size_t b = 0; b < batches.size(); ++b) {
      size_t index = batch_nodes[b];
      const auto& reports = batches[b].reports;
      auto answer = connection_->Report(batches[b], 30'000);
      if (!answer.ok()) {
        std::lock_guard lock(mu_);
        auto& pending = nodes_[index].reports;
        pending.insert(pending.begin(), reports.begin(), reports.end());  // resend next round
        if (answer.status().code() == Code::kConflict) QueueRegistration(index);
        continue;
      }
      std::lock_guard lock(mu_);
      for (const auto& r : answer->results) {
        if (r.action != proto::ReportAction::kStop) continue;
        if (nodes_[index].running.erase(std::make_tuple(r.job, r.attempt, r.rank))) {
          nodes_[index].reports.push_back(
              proto::Report::Exited({r.job, r.attempt, r.rank}, 143, "run", "stopped"));
        }
      }
    }
  }
}

Status HollowNodes::Run() {
  SetLogPrefix("hollow " + options_.name);
  if (count_ < 1 || count_ > 100'000) return Status::Invalid("--hollow: expected 1..100000 nodes");
  if (!IsValidName(options_.name))
    return Status::Invalid("--name: invalid prefix '" + options_.name + "'");
  nodes_.resize(static_cast<size_t>(count_));
  // Identities are derived from the prefix: a restarted hollow agent replaces its old sessions at
  // once.
  std::string base = options_.server_url + "/" + options_.name;
  for (int i = 0; i < count_; ++i) {
    nodes_[i].name = fmt::format("{}-{}", options_.name, i);
    nodes_[i].node_id =
        fmt::format("hollow-{:016x}", std::hash<std::string>{}(base + nodes_[i].name));
  }
  Status first = Register(0, *connection_);
  if (!first.ok() && first.code() != Code::kUnavailable) return first;
  auto streams = WatchMux::Make(server_urls_, options_.token,
                                {.on_message =
                                     [this](size_t index, const proto::WatchMessage& m) {
                                       std::lock_guard lock(mu_);
                                       messages_.emplace_back(index, m);
                                       messages_cv_.notify_one();
                                     },
                                 .on_end =
                                     [this](size_t index, const Status&) {
                                       std::lock_guard lock(mu_);
                                       QueueRegistration(index);
                                     }});
  std::vector<std::thread> threads;
  if (streams.ok()) {
    {
      std::lock_guard lock(mu_);
      streams_ = std::move(*streams);
      if (stop_) streams_->Stop();  // a stop that came before streams_ was set
      if (first.ok()) streams_->Open(0, nodes_[0].name, nodes_[0].session, nodes_[0].server);
      for (size_t i = first.ok() ? 1 : 0; i < nodes_.size(); ++i) QueueRegistration(i);
    }
    const size_t registrars = std::min<size_t>(nodes_.size(), 8);
    for (size_t i = 0; i < registrars; ++i) {
      registrar_connections_.push_back(std::make_unique<FailoverAgentConnection>(
          server_urls_, options_.token, options_.tls_fingerprint));
    }
    for (size_t i = 0; i < registrars; ++i) {
      threads.emplace_back([this, i] { RegisterLoop(*registrar_connections_[i]); });
    }
    threads.emplace_back([this] { DispatchLoop(); });
    threads.emplace_back([this] { streams_->Run(); });
  } else {
    LogInfo("{}; each node reads its watch stream on a thread of its own",
            streams.status().message());
    for (size_t i = 0; i < nodes_.size(); ++i) threads.emplace_back([this, i] { WatchLoop(i); });
  }
  threads.emplace_back([this] { HeartbeatLoop(); });
  threads.emplace_back([this] { ReporterLoop(); });
  LogInfo("{} hollow nodes joining {}", count_, options_.server_url);
  for (auto& t : threads) t.join();
  return Status::Ok();
}

}  // namespace berth
