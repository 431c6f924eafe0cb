// FakeConnection: an AgentConnection that plays the server for the agent's unit tests. It records
// what the agent sends (registrations, heartbeats, reports, log bytes) and answers as the test set
// it up: sessions "session-1", "session-2", ... for each registration; kOk for every report, or
// kStop for a rank the test marked stale; specs the test added. The watch stream is a queue the
// test pushes messages into; the agent's Watch call delivers them in order and returns when the
// agent aborts it or the test ends the stream.
//
// WaitFor() polls a condition until it holds or a timeout passes: the agent works on its own
// threads, so tests wait for what it does instead of sleeping a guessed time.
//
// Thread-safety: every method is thread-safe (the agent calls from four threads while the test
// reads); accessors return copies.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/connection.h"

namespace berth::testing {

// Polls `cond` every 2 ms until it holds (true) or `timeout_ms` have passed (false).
inline bool WaitFor(const std::function<bool()>& cond, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!cond()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

class FakeConnection final : public AgentConnection {
 public:
  // --- the server's side, as the agent sees it ---

  Result<proto::RegisterAnswer> Register(const proto::RegisterRequest& request) override {
    std::lock_guard lock(mu_);
    registers_.push_back(request);
    if (!register_status_.ok()) return register_status_;
    proto::RegisterAnswer answer;
    answer.session = fmt::format("session-{}", ++sessions_);
    answer.heartbeat_ms = heartbeat_ms_;
    return answer;
  }

  Status Heartbeat(const proto::HeartbeatRequest& request) override {
    std::lock_guard lock(mu_);
    heartbeats_.push_back(request);
    return heartbeat_status_;
  }

  Result<proto::HealthAnswer> SendHealth(const proto::HealthRequest& request) override {
    std::lock_guard lock(mu_);
    health_requests_.push_back(request);
    cv_.notify_all();
    return proto::HealthAnswer{server_now_ms_};
  }

  Result<proto::ReportAnswer> Report(const proto::ReportRequest& request, int64_t) override {
    std::lock_guard lock(mu_);
    report_requests_.push_back(request);
    proto::ReportAnswer answer;
    for (const auto& r : request.reports) {
      journal_.push_back(fmt::format("report {} {}", Key(r.id()), proto::ReportEventName(r.event)));
      bool stale = stale_.count(r.id()) > 0;
      answer.results.push_back({r.job, r.attempt, r.rank,
                                stale ? proto::ReportAction::kStop : proto::ReportAction::kOk});
    }
    return answer;
  }

  // Appends each piece at its offset when it is the size held; otherwise answers the size held
  // with an error, as the server does; a piece of a refused rank (Refuse) gets its own offset and
  // an error. Fails with the status the test set (SetLogStatus). A batch over the protocol's caps
  // fails the test.
  Result<proto::LogBatchAnswer> AppendLogs(const std::string&, const std::string&,
                                           const std::vector<proto::LogPiece>& pieces,
                                           int64_t) override {
    std::lock_guard lock(mu_);
    if (!log_status_.ok()) return log_status_;
    ++log_batches_;
    size_t bytes = 0;
    for (const proto::LogPiece& p : pieces) bytes += p.data.size();
    EXPECT_LE(pieces.size(), proto::kMaxLogPieces);
    EXPECT_LE(bytes, proto::kMaxLogBatchBytes);
    proto::LogBatchAnswer answer;
    for (const proto::LogPiece& p : pieces) {
      ++pieces_sent_[{p.job, p.attempt, p.rank}];
      if (refused_.count({p.job, p.attempt, p.rank})) {
        answer.results.push_back({p.offset, "not this node's rank"});
        continue;
      }
      std::string& log = logs_[{p.job, p.attempt, p.rank}];
      if (p.offset != static_cast<int64_t>(log.size())) {
        answer.results.push_back({static_cast<int64_t>(log.size()), "offset is not the size"});
        continue;
      }
      log.append(p.data);
      journal_.push_back(fmt::format("log {} {}", Key({p.job, p.attempt, p.rank}), log.size()));
      answer.results.push_back({static_cast<int64_t>(log.size()), ""});
    }
    return answer;
  }

  // Frames of the blobs the test added (AddBlob), whole from each offset; NotFound for others.
  // Blocks while blobs are held (HoldBlobs).
  Result<std::string> FetchBlobs(const BlobFetch& fetch) override {
    std::unique_lock lock(mu_);
    ++blob_fetches_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !hold_blobs_; });
    std::string body;
    for (const auto& [digest, offset] : fetch.want) {
      auto it = blobs_.find(digest);
      if (it == blobs_.end()) return Status::NotFound("no blob " + digest);
      std::string_view data(it->second);
      std::string line = fmt::format("{} {} {}\n", digest, offset, data.size() - offset);
      body += line;
      body += data.substr(static_cast<size_t>(offset));
    }
    return body;
  }
  void AddBlob(const std::string& digest, std::string data) {
    std::lock_guard lock(mu_);
    blobs_[digest] = std::move(data);
  }
  int blob_fetches() {
    std::lock_guard lock(mu_);
    return blob_fetches_;
  }

  // NotFound for a spec the test did not add; blocks while specs are held (HoldSpecs).
  Result<std::string> GetSpec(const SpecFetch& fetch) override {
    const int64_t spec_id = fetch.spec_id;
    std::unique_lock lock(mu_);
    ++spec_requests_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !hold_specs_; });
    auto it = specs_.find(spec_id);
    if (it == specs_.end()) return Status::NotFound(fmt::format("no spec {}", spec_id));
    return it->second;
  }

  // Delivers pushed messages in order. Returns Unavailable when aborted or when the test ends the
  // stream (after the messages pushed before EndStream), and Ok when `on_message` returns false.
  Status Watch(const std::string& node, const std::string& session,
               const std::function<bool(const proto::WatchMessage&)>& on_message) override {
    std::unique_lock lock(mu_);
    watches_.push_back({node, session});
    if (abort_pending_) {
      abort_pending_ = false;
      return Status::Unavailable("the watch was aborted");
    }
    ++active_watches_;
    uint64_t generation = abort_generation_;
    while (true) {
      cv_.wait(lock,
               [&] { return abort_generation_ != generation || !queue_.empty() || end_stream_; });
      if (abort_generation_ != generation) {
        --active_watches_;
        return Status::Unavailable("the watch was aborted");
      }
      if (queue_.empty()) {  // ended by the test
        end_stream_ = false;
        --active_watches_;
        return Status::Unavailable("the stream ended");
      }
      proto::WatchMessage message = queue_.front();
      queue_.pop_front();
      lock.unlock();
      bool go_on = on_message(message);
      lock.lock();
      ++delivered_;
      cv_.notify_all();
      if (!go_on) {
        --active_watches_;
        return Status::Ok();
      }
    }
  }

  // Ends the Watch in progress, or the next one if none is (as HttpAgentConnection does).
  void AbortWatch() override {
    std::lock_guard lock(mu_);
    if (active_watches_ > 0) {
      ++abort_generation_;
    } else {
      abort_pending_ = true;
    }
    cv_.notify_all();
  }

  // --- what the test does ---

  void Push(const proto::WatchMessage& message) {
    std::lock_guard lock(mu_);
    queue_.push_back(message);
    cv_.notify_all();
  }
  // The server drops the stream (it restarted): the agent should register again.
  void EndStream() {
    std::lock_guard lock(mu_);
    end_stream_ = true;
    cv_.notify_all();
  }
  void AddSpec(int64_t spec_id, std::string text) {
    std::lock_guard lock(mu_);
    specs_[spec_id] = std::move(text);
  }
  // While held, GetSpec blocks (a slow server): the launch stays between queue and start.
  void HoldBlobs() {
    std::lock_guard lock(mu_);
    hold_blobs_ = true;
  }
  void ReleaseBlobs() {
    std::lock_guard lock(mu_);
    hold_blobs_ = false;
    cv_.notify_all();
  }
  void HoldSpecs() {
    std::lock_guard lock(mu_);
    hold_specs_ = true;
  }
  void ReleaseSpecs() {
    std::lock_guard lock(mu_);
    hold_specs_ = false;
    cv_.notify_all();
  }
  // Reports of `id` are answered kStop from now on: the server no longer runs that rank here.
  void MarkStale(const proto::AttemptRank& id) {
    std::lock_guard lock(mu_);
    stale_.insert(id);
  }
  void SetRegisterStatus(Status status) {
    std::lock_guard lock(mu_);
    register_status_ = std::move(status);
  }
  // What health answers give as the server's clock (0: none).
  void SetServerNow(int64_t now_ms) {
    std::lock_guard lock(mu_);
    server_now_ms_ = now_ms;
  }
  void SetHeartbeatStatus(Status status) {
    std::lock_guard lock(mu_);
    heartbeat_status_ = std::move(status);
  }
  // Log appends fail with `status` while it is not ok: output is not shipped, so no event after
  // it is reported either.
  void SetLogStatus(Status status) {
    std::lock_guard lock(mu_);
    log_status_ = std::move(status);
  }
  // Requests that shipped output so far (each a batch of pieces).
  int log_batches() const {
    std::lock_guard lock(mu_);
    return log_batches_;
  }
  // Pieces of rank `id`'s output received so far (applied or not).
  int pieces_sent(const proto::AttemptRank& id) const {
    std::lock_guard lock(mu_);
    auto it = pieces_sent_.find(id);
    return it == pieces_sent_.end() ? 0 : it->second;
  }
  // Output of rank `id` is refused from now on, as the server refuses a rank not placed on the
  // node.
  void Refuse(const proto::AttemptRank& id) {
    std::lock_guard lock(mu_);
    refused_.insert(id);
  }
  // What registrations answer as the heartbeat interval (the agent's default is 7.5 s).
  void SetHeartbeatMs(int64_t ms) {
    std::lock_guard lock(mu_);
    heartbeat_ms_ = ms;
  }

  // --- what the agent sent ---

  std::vector<proto::RegisterRequest> registers() const {
    std::lock_guard lock(mu_);
    return registers_;
  }
  std::vector<proto::HealthRequest> health_requests() const {
    std::lock_guard lock(mu_);
    return health_requests_;
  }
  std::vector<proto::HeartbeatRequest> heartbeats() const {
    std::lock_guard lock(mu_);
    return heartbeats_;
  }
  std::vector<proto::ReportRequest> report_requests() const {
    std::lock_guard lock(mu_);
    return report_requests_;
  }
  // Every report received, in order, across requests.
  std::vector<proto::Report> reports() const {
    std::lock_guard lock(mu_);
    std::vector<proto::Report> out;
    for (const auto& request : report_requests_) {
      out.insert(out.end(), request.reports.begin(), request.reports.end());
    }
    return out;
  }
  // The output the server holds for one rank.
  std::string log(const proto::AttemptRank& id) const {
    std::lock_guard lock(mu_);
    auto it = logs_.find(id);
    return it == logs_.end() ? "" : it->second;
  }
  // Log appends and reports in the order received: "log 1-1-0 6" (the size now held) and
  // "report 1-1-0 exited".
  std::vector<std::string> journal() const {
    std::lock_guard lock(mu_);
    return journal_;
  }
  int spec_requests() const {
    std::lock_guard lock(mu_);
    return spec_requests_;
  }
  // Watch messages the agent has handled (on_message returned).
  size_t delivered() const {
    std::lock_guard lock(mu_);
    return delivered_;
  }

  static std::string Key(const proto::AttemptRank& id) {
    return fmt::format("{}-{}-{}", id.job, id.attempt, id.rank);
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Everything below is guarded by mu_.
  std::vector<proto::RegisterRequest> registers_;
  std::vector<proto::HeartbeatRequest> heartbeats_;
  std::vector<proto::HealthRequest> health_requests_;
  int64_t server_now_ms_ = 0;
  std::vector<proto::ReportRequest> report_requests_;
  std::vector<std::pair<std::string, std::string>> watches_;  // node, session
  std::map<proto::AttemptRank, std::string> logs_;
  std::vector<std::string> journal_;
  std::map<std::string, std::string> blobs_;
  int blob_fetches_ = 0;
  std::map<int64_t, std::string> specs_;
  std::set<proto::AttemptRank> stale_;
  Status register_status_;
  Status heartbeat_status_;
  Status log_status_;
  int log_batches_ = 0;
  std::map<proto::AttemptRank, int> pieces_sent_;
  std::set<proto::AttemptRank> refused_;
  int64_t heartbeat_ms_ = 7'500;
  int sessions_ = 0;
  int spec_requests_ = 0;
  bool hold_specs_ = false;
  bool hold_blobs_ = false;
  std::deque<proto::WatchMessage> queue_;
  bool end_stream_ = false;
  bool abort_pending_ = false;
  int active_watches_ = 0;
  uint64_t abort_generation_ = 0;
  size_t delivered_ = 0;
};

}  // namespace berth::testing
