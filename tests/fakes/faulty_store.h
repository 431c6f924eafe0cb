// FaultyStore: a Store that forwards every call to a real one (SQLite in a temp dir, in tests) and
// fails or delays the calls a test asks it to — LevelDB's EnvWrapper idea: wrap, forward, override
// the one thing under test. Writes are SubmitMany() and Commit(); reads are everything else.
//
//   store.FailWrites(1);        // the next write fails with Unavailable, then writes work again
//   store.FailWriteNumber(3);   // the third write from now fails
//   store.SetWriteDelayMs(50);  // every write sleeps first (a slow disk, a remote database)
//   store.FailReads(true);
//   store.HoldWrites(true);     // writes wait (held_writes() counts them) until HoldWrites(false)
//   store.HoldAfterSubmit(true);  // a SubmitMany that committed waits before it returns
//
// Thread-safe: the counters are atomic; the wrapped store is thread-safe by contract.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "store/store.h"

namespace berth::testing {

class FaultyStore final : public Store {
 public:
  explicit FaultyStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}

  void FailWrites(int count) { fail_writes_ = count; }
  void FailWriteNumber(int n) { fail_at_ = writes_ + n; }
  void SetWriteDelayMs(int ms) { delay_ms_ = ms; }
  void FailReads(bool fail) { fail_reads_ = fail; }
  void HoldWrites(bool hold) {
    std::lock_guard lock(gate_mu_);
    hold_ = hold;
    gate_cv_.notify_all();
  }
  int held_writes() {
    std::lock_guard lock(gate_mu_);
    return held_;
  }
  void HoldAfterSubmit(bool hold) {
    std::lock_guard lock(gate_mu_);
    hold_after_submit_ = hold;
    gate_cv_.notify_all();
  }
  int held_after_submit() {
    std::lock_guard lock(gate_mu_);
    return held_after_;
  }
  int writes() const { return writes_; }  // writes attempted
  int failed_writes() const { return failed_writes_; }
  int submit_calls() const { return submit_calls_; }  // SubmitMany calls (group commits)
  int get_jobs_calls() const { return get_jobs_calls_; }
  Store& inner() { return *inner_; }

  Result<std::vector<SubmitResult>> SubmitMany(const std::vector<Submission>& s) override {
    ++submit_calls_;
    if (Status st = BeforeWrite(); !st.ok()) return st;
    auto result = inner_->SubmitMany(s);
    std::unique_lock lock(gate_mu_);
    ++held_after_;
    gate_cv_.notify_all();
    gate_cv_.wait(lock, [this] { return !hold_after_submit_; });
    --held_after_;
    return result;
  }
  Status Commit(const Batch& batch) override {
    if (Status st = BeforeWrite(); !st.ok()) return st;
    return inner_->Commit(batch);
  }
  Result<std::optional<KeyedSubmission>> FindSubmission(const std::string& user,
                                                        const std::string& key) override {
    if (fail_reads_) return ReadError();
    return inner_->FindSubmission(user, key);
  }
  Result<std::vector<JobRow>> LoadActiveJobs() override {
    if (fail_reads_) return ReadError();
    return inner_->LoadActiveJobs();
  }
  Result<std::vector<JobRow>> ListJobs(const JobQuery& q) override {
    if (fail_reads_) return ReadError();
    return inner_->ListJobs(q);
  }
  Result<std::vector<JobRow>> GetJobs(const std::vector<int64_t>& ids) override {
    ++get_jobs_calls_;
    if (fail_reads_) return ReadError();
    return inner_->GetJobs(ids);
  }
  Result<std::vector<JobEvent>> GetEvents(int64_t job) override {
    if (fail_reads_) return ReadError();
    return inner_->GetEvents(job);
  }
  Result<std::vector<AttemptRow>> GetAttempts(int64_t job) override {
    if (fail_reads_) return ReadError();
    return inner_->GetAttempts(job);
  }
  Result<std::string> GetSpec(int64_t spec_id) override {
    if (fail_reads_) return ReadError();
    return inner_->GetSpec(spec_id);
  }
  Result<int> GroupSize(int64_t group) override {
    if (fail_reads_) return ReadError();
    return inner_->GroupSize(group);
  }
  Result<std::map<int64_t, std::map<JobStatus, int>>> GroupStatusCounts(
      const std::vector<int64_t>& groups) override {
    if (fail_reads_) return ReadError();
    return inner_->GroupStatusCounts(groups);
  }
  Result<GroupInfo> GetGroup(int64_t group) override {
    if (fail_reads_) return ReadError();
    return inner_->GetGroup(group);
  }
  Result<std::map<int64_t, int>> LoadGroupLimits() override {
    if (fail_reads_) return ReadError();
    return inner_->LoadGroupLimits();
  }
  Result<std::vector<NodeRow>> LoadNodes() override {
    if (fail_reads_) return ReadError();
    return inner_->LoadNodes();
  }
  Result<std::vector<UserRow>> LoadUsers() override {
    if (fail_reads_) return ReadError();
    return inner_->LoadUsers();
  }
  Result<std::vector<TokenRow>> LoadTokens() override {
    if (fail_reads_) return ReadError();
    return inner_->LoadTokens();
  }
  Result<std::vector<AuditRow>> ListAudit(int limit) override {
    if (fail_reads_) return ReadError();
    return inner_->ListAudit(limit);
  }
  Result<std::vector<TeamRow>> LoadTeams() override {
    if (fail_reads_) return ReadError();
    return inner_->LoadTeams();
  }
  Result<std::vector<UsageRow>> QueryUsage(const UsageQuery& q) override {
    if (fail_reads_) return ReadError();
    return inner_->QueryUsage(q);
  }
  Result<std::vector<UsageBucket>> LoadUsageBuckets(TimeMs since) override {
    if (fail_reads_) return ReadError();
    return inner_->LoadUsageBuckets(since);
  }
  Result<std::vector<ReservationRow>> LoadReservations() override {
    if (fail_reads_) return ReadError();
    return inner_->LoadReservations();
  }
  Result<std::vector<NotifySinkRow>> LoadNotifySinks() override {
    if (fail_reads_) return ReadError();
    return inner_->LoadNotifySinks();
  }
  Result<std::vector<NoticeRow>> DueNotices(TimeMs now, int limit) override {
    if (fail_reads_) return ReadError();
    return inner_->DueNotices(now, limit);
  }
  Status UpdateNotice(const NoticeUpdate& update) override {
    BERTH_RETURN_IF_ERROR(BeforeWrite());
    return inner_->UpdateNotice(update);
  }
  Result<std::vector<NoticeRow>> ListNotices(const std::string& user, std::optional<int64_t> job,
                                             int limit) override {
    if (fail_reads_) return ReadError();
    return inner_->ListNotices(user, job, limit);
  }

 private:
  Status BeforeWrite() {
    {
      std::unique_lock lock(gate_mu_);
      ++held_;
      gate_cv_.wait(lock, [this] { return !hold_; });
      --held_;
    }
    int n = ++writes_;
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_.load()));
    bool fail = n == fail_at_;
    int left = fail_writes_.load();
    while (!fail && left > 0 && !fail_writes_.compare_exchange_weak(left, left - 1)) {
    }
    fail = fail || left > 0;
    if (!fail) return Status::Ok();
    ++failed_writes_;
    return Status::Unavailable("injected write failure #" + std::to_string(n));
  }
  static Status ReadError() { return Status::Unavailable("injected read failure"); }

  std::unique_ptr<Store> inner_;
  std::atomic<int> fail_writes_{0};
  std::atomic<int> fail_at_{-1};
  std::atomic<int> delay_ms_{0};
  std::atomic<bool> fail_reads_{false};
  std::atomic<int> writes_{0};
  std::atomic<int> failed_writes_{0};
  std::atomic<int> get_jobs_calls_{0};
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool hold_ = false;               // guarded by gate_mu_
  int held_ = 0;                    // guarded by gate_mu_; writes waiting at the gate
  bool hold_after_submit_ = false;  // guarded by gate_mu_
  int held_after_ = 0;              // guarded by gate_mu_; committed submissions waiting
  std::atomic<int> submit_calls_{0};
};

}  // namespace berth::testing
