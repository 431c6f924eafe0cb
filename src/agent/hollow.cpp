#include "agent/hollow.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "common/clock.h"
#include "common/log.h"
#include "common/strings.h"
#include "net/http_client.h"
#include "spec/job_spec.h"

namespace berth {

HollowNodes::HollowNodes(AgentOptions options, int count)
    : options_(std::move(options)), count_(count) {}

HollowNodes::~HollowNodes() = default;

void HollowNodes::RequestStop() {
  stop_ = true;
  cv_.notify_all();
}

Status HollowNodes::Register(size_t index) {
  json::object body;
  std::string name;
  std::string node_id;
  {
    std::lock_guard lock(mu_);
    name = nodes_[index].name;
    node_id = nodes_[index].node_id;
  }
  body["name"] = name;
  body["node_id"] = node_id;
  body["address"] = options_.address.empty() ? "127.0.0.1" : options_.address;
  body["pool"] = options_.pool;
  json::object labels;
  for (const auto& [k, v] : options_.labels) labels[k] = v;
  body["labels"] = std::move(labels);
  body["cpus_milli"] = options_.cpus.value_or(8 * kMilliPerCpu);
  body["memory_mib"] = options_.memory.value_or(64 * kMibPerGib);
  json::array gpus;
  if (!options_.gpus.empty()) {
    auto declared = ParseGpuDeclaration(options_.gpus);
    if (!declared.ok()) return declared.status();
    for (const auto& g : *declared)
      gpus.push_back(json::object{{"index", g.index}, {"type", g.type}});
  }
  body["gpus"] = std::move(gpus);
  json::array running;
  {
    std::lock_guard lock(mu_);
    for (const auto& [job, attempt, rank] : nodes_[index].running) {
      running.push_back(json::object{{"job", job}, {"attempt", attempt}, {"rank", rank}});
    }
  }
  body["running"] = std::move(running);
  net::HttpClient client(options_.server_url, options_.token);
  auto res = client.Request("POST", "/v1/agent/register", json::serialize(body), 30'000);
  if (!res.ok()) return res.status();
  auto v = ParseJson(res->body, "register answer");
  if (res->status != 200 || !v.ok() || !v->is_object()) {
    return Status(
        res->status == 409 ? Code::kConflict : Code::kInvalidArgument,
        fmt::format("node {}: registration refused ({}): {}", name, res->status, res->body));
  }
  std::lock_guard lock(mu_);
  nodes_[index].session = GetString(v->as_object(), "session").value();
  nodes_[index].need_register = false;
  heartbeat_ms_ = GetInt(v->as_object(), "heartbeat_ms", 5000).value();
  return Status::Ok();
}

std::optional<double> HollowNodes::HollowSeconds(int64_t spec_id) {
  {
    std::lock_guard lock(mu_);
    auto it = spec_seconds_.find(spec_id);
    if (it != spec_seconds_.end()) return it->second;
  }
  thread_local std::unique_ptr<net::HttpClient> client;
  if (!client) client = std::make_unique<net::HttpClient>(options_.server_url, options_.token);
  std::optional<double> seconds;
  auto res = client->Request("GET", fmt::format("/v1/specs/{}", spec_id), "", 30'000);
  if (res.ok() && res->status == 200) {
    auto v = ParseJson(res->body, "spec");
    if (v.ok()) {
      auto spec = SpecFromJson(*v);
      if (spec.ok()) {
        for (const auto& [k, val] : spec->envs) {
          if (k == "BERTH_HOLLOW_SECONDS") {
            try {
              seconds = std::stod(val);
            } catch (...) {
            }
          }
        }
      }
    }
  }
  std::lock_guard lock(mu_);
  spec_seconds_[spec_id] = seconds;
  return seconds;
}

void HollowNodes::OnMessage(size_t index, const json::object& m) {
  std::string type = GetString(m, "type").value();
  if (type != "launch" && type != "stop") return;
  int64_t job = GetInt(m, "job").value();
  int attempt = static_cast<int>(GetInt(m, "attempt").value());
  int rank = static_cast<int>(GetInt(m, "rank").value());
  auto key = std::make_tuple(job, attempt, rank);
  json::object base{{"job", job}, {"attempt", attempt}, {"rank", rank}};
  if (type == "launch") {
    std::optional<double> seconds = HollowSeconds(GetInt(m, "spec_id").value());
    std::lock_guard lock(mu_);
    Node& node = nodes_[index];
    if (node.running.count(key)) return;
    node.running.insert(key);
    json::object accepted = base;
    accepted["event"] = "accepted";
    json::object running = base;
    running["event"] = "running";
    node.reports.push_back(std::move(accepted));
    node.reports.push_back(std::move(running));
    if (seconds) {
      timers_.push_back(
          {MonotonicMs() + static_cast<int64_t>(*seconds * 1000), index, job, attempt, rank});
      std::push_heap(timers_.begin(), timers_.end());
    }
    cv_.notify_all();
  } else {
    std::lock_guard lock(mu_);
    Node& node = nodes_[index];
    node.running.erase(key);
    json::object exited = base;
    exited["event"] = "exited";
    exited["exit_code"] = 143;
    exited["phase"] = "run";
    exited["reason"] = "stopped";
    node.reports.push_back(std::move(exited));
    cv_.notify_all();
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
      Status st = Register(index);
      if (!st.ok()) {
        LogWarn("{}", st.message());
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_.load(); });
        continue;
      }
      std::lock_guard lock(mu_);
      session = nodes_[index].session;
    }
    net::HttpClient client(options_.server_url, options_.token);
    std::string pending;
    int status = 0;
    client.Stream(
        "GET", "/v1/agent/watch?node=" + net::UrlEncode(name) + "&session=" + session, "", 20'000,
        [&](std::string_view data) {
          pending.append(data);
          size_t nl;
          while ((nl = pending.find('\n')) != std::string::npos) {
            auto v = ParseJson(pending.substr(0, nl), "watch message");
            pending.erase(0, nl + 1);
            if (v.ok() && v->is_object()) OnMessage(index, v->as_object());
          }
          return !stop_.load();
        },
        &status);
    std::lock_guard lock(mu_);
    nodes_[index].need_register = true;
  }
}

void HollowNodes::HeartbeatLoop() {
  net::HttpClient client(options_.server_url, options_.token);
  while (!stop_) {
    DurationMs interval;
    {
      std::unique_lock lock(mu_);
      interval = heartbeat_ms_;
      cv_.wait_for(lock, std::chrono::milliseconds(interval), [this] { return stop_.load(); });
      if (stop_) return;
    }
    for (size_t i = 0; i < nodes_.size() && !stop_; ++i) {
      std::string name;
      std::string session;
      {
        std::lock_guard lock(mu_);
        name = nodes_[i].name;
        session = nodes_[i].session;
      }
      if (session.empty()) continue;
      auto res = client.Request("POST", "/v1/agent/heartbeat",
                                json::serialize(json::object{{"node", name}, {"session", session}}),
                                10'000);
      if (res.ok() && res->status == 409) {
        std::lock_guard lock(mu_);
        nodes_[i].need_register = true;
      }
    }
  }
}

void HollowNodes::ReporterLoop() {
  net::HttpClient client(options_.server_url, options_.token);
  while (!stop_) {
    std::vector<std::tuple<size_t, std::string, std::string, std::vector<json::object>>> batches;
    {
      std::unique_lock lock(mu_);
      int64_t wait = 50;
      if (!timers_.empty())
        wait = std::clamp<int64_t>(timers_.front().due_ms - MonotonicMs(), 0, 50);
      cv_.wait_for(lock, std::chrono::milliseconds(wait), [this] { return stop_.load(); });
      if (stop_) return;
      int64_t now = MonotonicMs();
      while (!timers_.empty() && timers_.front().due_ms <= now) {
        std::pop_heap(timers_.begin(), timers_.end());
        Timer t = timers_.back();
        timers_.pop_back();
        Node& node = nodes_[t.node];
        if (node.running.erase({t.job, t.attempt, t.rank})) {
          node.reports.push_back(json::object{{"job", t.job},
                                              {"attempt", t.attempt},
                                              {"rank", t.rank},
                                              {"event", "exited"},
                                              {"exit_code", 0},
                                              {"phase", "run"}});
        }
      }
      for (size_t i = 0; i < nodes_.size(); ++i) {
        if (nodes_[i].reports.empty() || nodes_[i].session.empty()) continue;
        batches.emplace_back(i, nodes_[i].name, nodes_[i].session, std::move(nodes_[i].reports));
        nodes_[i].reports.clear();
      }
    }
    for (auto& [index, name, session, reports] : batches) {
      json::array arr;
      for (auto& r : reports) arr.push_back(r);
      auto res = client.Request(
          "POST", "/v1/agent/report",
          json::serialize(json::object{{"node", name}, {"session", session}, {"reports", arr}}),
          30'000);
      if (!res.ok() || res->status != 200) {
        std::lock_guard lock(mu_);
        auto& pending = nodes_[index].reports;
        pending.insert(pending.begin(), reports.begin(), reports.end());  // resend next round
        if (res.ok() && res->status == 409) nodes_[index].need_register = true;
        continue;
      }
      auto v = ParseJson(res->body, "report answer");
      if (!v.ok() || !v->is_object()) continue;
      const json::value* results = v->as_object().if_contains("results");
      if (!results || !results->is_array()) continue;
      std::lock_guard lock(mu_);
      for (const auto& r : results->as_array()) {
        if (!r.is_object() || GetString(r.as_object(), "action").value() != "stop") continue;
        const auto& o = r.as_object();
        auto key = std::make_tuple(GetInt(o, "job").value(),
                                   static_cast<int>(GetInt(o, "attempt").value()),
                                   static_cast<int>(GetInt(o, "rank").value()));
        if (nodes_[index].running.erase(key)) {
          nodes_[index].reports.push_back(json::object{{"job", std::get<0>(key)},
                                                       {"attempt", std::get<1>(key)},
                                                       {"rank", std::get<2>(key)},
                                                       {"event", "exited"},
                                                       {"exit_code", 143},
                                                       {"phase", "run"},
                                                       {"reason", "stopped"}});
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
  Status first = Register(0);
  if (!first.ok() && first.code() != Code::kUnavailable) return first;
  std::vector<std::thread> threads;
  threads.reserve(nodes_.size() + 2);
  for (size_t i = 0; i < nodes_.size(); ++i) threads.emplace_back([this, i] { WatchLoop(i); });
  threads.emplace_back([this] { HeartbeatLoop(); });
  threads.emplace_back([this] { ReporterLoop(); });
  LogInfo("{} hollow nodes joining {}", count_, options_.server_url);
  for (auto& t : threads) t.join();
  return Status::Ok();
}

}  // namespace berth
