// Notices (server/core/notices.h): what a change writes to the outbox, in the change's own commit.
#include "server/core/notices.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "common/json_util.h"
#include "core_fixture.h"
#include "spec/idle_policy.h"

namespace berth::testing {
namespace {

using proto::ReportEvent;

class NoticesTest : public CoreTest {
 protected:
  void SetSink(const std::string& user, const std::string& events = "") {
    NotifySinkRow row{.user = user, .kind = "email", .target = user + "@example.com"};
    row.events = events;
    ASSERT_TRUE(core_->notices().SetSink(row).ok());
  }

  JobSpec Notifying(const std::string& events) {
    JobSpec spec = Spec();
    spec.notify = events;
    return spec;
  }

  std::vector<NoticeRow> Notices(const std::string& user = "alice") {
    auto rows = store_->inner().ListNotices(user, std::nullopt, 1000);
    EXPECT_TRUE(rows.ok());
    std::vector<NoticeRow> out = rows.ok() ? *rows : std::vector<NoticeRow>{};
    std::reverse(out.begin(), out.end());  // oldest first
    return out;
  }

  std::vector<std::string> Ids(const std::string& user = "alice") {
    std::vector<std::string> ids;
    for (const NoticeRow& row : Notices(user)) ids.push_back(row.event_id);
    return ids;
  }

  void Exit(const std::string& node, int64_t job, int code) {
    ASSERT_TRUE(Report(node, {Entry(job, 1, 0, ReportEvent::kExited, code)}).ok());
  }

  std::pair<int64_t, std::vector<int64_t>> SubmitGroup(int count, const std::string& events) {
    SubmitRequest r;
    r.spec = Notifying(events);
    r.user = "alice";
    r.count = count;
    r.as_group = true;
    auto answer = core_->admission().Submit(std::move(r));
    EXPECT_TRUE(answer.ok() && answer->group);
    return answer.ok() && answer->group ? std::make_pair(*answer->group, answer->ids)
                                        : std::make_pair(int64_t{0}, std::vector<int64_t>{});
  }
};

// A failure the job asked to hear of writes one notice per sink, typed by what happened, with the
// event's JSON (id, type, job, status); a success it asked only `fail` of writes none.
TEST_F(NoticesTest, AnEndWritesOneNoticeOfItsMostSpecificType) {
  SetSink("alice");
  Register("n1");
  const int64_t bad = Submit(Notifying("end,fail"));
  const int64_t good = Submit(Notifying("fail"));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", bad);
  Run("n1", good);
  Exit("n1", bad, 3);
  Exit("n1", good, 0);
  std::vector<NoticeRow> notices = Notices();
  ASSERT_EQ(notices.size(), 1u);
  const NoticeRow& n = notices[0];
  EXPECT_EQ(n.event_id, "job-" + std::to_string(bad) + ".1.fail");
  EXPECT_EQ(n.type, "fail");
  EXPECT_EQ(n.sink, "email");
  EXPECT_EQ(n.state, "pending");
  EXPECT_EQ(n.next_at, clock_.Now());
  json::object event = json::parse(n.payload).as_object();
  EXPECT_EQ(event.at("id").as_string(), n.event_id);
  EXPECT_EQ(event.at("job").as_int64(), bad);
  EXPECT_EQ(event.at("status").as_string(), "FAILED");
  EXPECT_EQ(event.at("exit_code").as_int64(), 3);
  EXPECT_EQ(event.at("nodes").as_array().size(), 1u);
}

// The notice is part of the change's commit: a commit that fails leaves neither the job's end nor
// its notice, and the report sent again writes both.
TEST_F(NoticesTest, ANoticeCommitsWithItsChangeOrNotAtAll) {
  SetSink("alice");
  Register("n1");
  const int64_t job = Submit(Notifying("end"));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  store_->FailWrites(1);
  EXPECT_FALSE(Report("n1", {Entry(job, 1, 0, ReportEvent::kExited, 0)}).ok());
  EXPECT_EQ(Stored(job).status, JobStatus::kRunning);
  EXPECT_TRUE(Notices().empty());
  Exit("n1", job, 0);
  EXPECT_EQ(Stored(job).status, JobStatus::kSucceeded);
  EXPECT_EQ(Ids(), std::vector<std::string>{"job-" + std::to_string(job) + ".1.end"});
}

// Without a sink nothing is written; a job without `notify:` uses its owner's default events.
TEST_F(NoticesTest, NoSinkNothingAndDefaultsApplyToJobsThatAskNothing) {
  Register("n1");
  const int64_t unseen = Submit(Notifying("end"));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", unseen);
  Exit("n1", unseen, 0);
  EXPECT_TRUE(Notices().empty());
  SetSink("alice", "started");
  const int64_t job = Submit(Spec());
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  EXPECT_EQ(Ids(), std::vector<std::string>{"job-" + std::to_string(job) + ".1.started"});
}

// A group without `each` is told once: its first start, then one summary when its last job ends,
// with its counts — not one notice per job.
TEST_F(NoticesTest, AGroupSendsOneStartAndOneSummary) {
  SetSink("alice");
  Register("n1", 8);
  auto [group, ids] = SubmitGroup(5, "started,end,fail");
  ASSERT_TRUE(core_->scheduling().RunPass());
  for (int64_t id : ids) Run("n1", id);
  for (size_t i = 0; i + 1 < ids.size(); ++i) Exit("n1", ids[i], i == 0 ? 1 : 0);
  const std::string g = std::to_string(group);
  EXPECT_EQ(Ids(), std::vector<std::string>{"group-" + g + ".started"});
  Exit("n1", ids.back(), 0);
  EXPECT_EQ(Ids(), (std::vector<std::string>{"group-" + g + ".started", "group-" + g + ".end"}));
  json::object summary = json::parse(Notices().back().payload).as_object();
  EXPECT_EQ(summary.at("type").as_string(), "summary");
  EXPECT_EQ(summary.at("status").as_string(), "FAILED");
  EXPECT_EQ(summary.at("group_size").as_int64(), 5);
  EXPECT_EQ(json::serialize(summary.at("counts")), R"({"SUCCEEDED":4,"FAILED":1})");
}

// A cancelled group ends in one txn: one summary.
TEST_F(NoticesTest, AGroupCancelledAtOnceSendsOneSummary) {
  SetSink("alice");
  Register("n1", 8);
  auto [group, ids] = SubmitGroup(300, "end");
  CancelRequest cancel{.group = group, .user = "alice"};
  ASSERT_TRUE(core_->admission().Cancel(cancel).ok());
  EXPECT_EQ(Ids(), std::vector<std::string>{"group-" + std::to_string(group) + ".end"});
  json::object summary = json::parse(Notices().back().payload).as_object();
  EXPECT_EQ(json::serialize(summary.at("counts")), R"({"CANCELLED":300})");
  EXPECT_EQ(summary.at("status").as_string(), "CANCELLED");
}

// `pending>1m`: a job still waiting a minute after its submission is told once; one placed before
// is not.
TEST_F(NoticesTest, PendingTooLongIsToldOnce) {
  SetSink("alice");
  Register("n1", 8);
  Submit(Spec(8));  // holds n1
  ASSERT_TRUE(core_->scheduling().RunPass());
  JobSpec big = Notifying("pending>1m");
  big.resources.cpus = 8'000;
  const int64_t waiting = Submit(big);
  core_->notices().CheckPending();
  EXPECT_TRUE(Notices().empty());
  clock_.Advance(60'000);
  core_->notices().CheckPending();
  core_->notices().CheckPending();
  EXPECT_EQ(Ids(), std::vector<std::string>{"job-" + std::to_string(waiting) + ".pending"});
  Register("n2", 2);
  const int64_t placed = Submit(Notifying("pending>1m"));
  ASSERT_TRUE(core_->scheduling().RunPass());
  clock_.Advance(120'000);
  core_->notices().CheckPending();
  EXPECT_EQ(Ids().size(), 1u) << placed;
}

// The idle policy's warning is an `idle` notice for a job that asked (once per attempt).
TEST_F(NoticesTest, AnIdleWarningIsToldToThoseWhoAsked) {
  options_.idle_policies.cluster =
      ParseIdlePolicy("below=5,warn=10m,act=30m,action=requeue", 10'000).value();
  Restart();
  SetSink("alice");
  Register("n1");
  const int64_t job = Submit(Notifying("idle"));
  const int64_t quiet = Submit(Notifying("end"));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", job);
  Run("n1", quiet);
  std::map<std::pair<int64_t, int>, IdleVerdict> told;
  using Idle = Lifecycle::GpuReading;
  core_->lifecycle().NoteGpuUse({Idle{job, 1, 600'000, 0.5}, Idle{quiet, 1, 600'000, 0.5}}, told);
  ASSERT_EQ(Ids(), std::vector<std::string>{"job-" + std::to_string(job) + ".1.idle"});
  json::object event = json::parse(Notices()[0].payload).as_object();
  EXPECT_NE(
      std::string(event.at("reason").as_string()).find("it will be requeued once idle for 30m"),
      std::string::npos);
}

// An operator whose sink asks for `nodes` hears of drains and of nodes going down; a user's job
// cannot ask for them.
TEST_F(NoticesTest, OperatorsHearOfDrainedAndDownNodes) {
  SetSink("ops", "nodes");
  SetSink("alice", "end");
  Register("n1");
  ASSERT_TRUE(core_->agents().Drain("n1", true, "bob", false).ok());
  clock_.Advance(options_.lease_ms + 1);
  core_->agents().CheckLeases();
  std::vector<NoticeRow> notices = Notices("ops");
  ASSERT_EQ(notices.size(), 2u);
  EXPECT_EQ(notices[0].type, "node_drained");
  EXPECT_EQ(notices[1].type, "node_down");
  json::object drained = json::parse(notices[0].payload).as_object();
  EXPECT_EQ(drained.at("node").as_string(), "n1");
  EXPECT_EQ(drained.at("status").as_string(), "DRAINING");
  EXPECT_EQ(drained.at("reason").as_string(), "drained by bob");
  EXPECT_TRUE(drained.at("job").is_null());
  EXPECT_TRUE(Notices("alice").empty());
  JobSpec spec = Spec();
  spec.notify = "end,nodes";
  EXPECT_NE(ValidateSpec(spec).message().find("an operator's event"), std::string::npos);
  core_->notices().RemoveSink("ops", "email");
  ASSERT_TRUE(core_->agents().Drain("n1", false, "bob", false).ok());
  ASSERT_TRUE(core_->agents().Drain("n1", true, "bob", false).ok());
  EXPECT_EQ(Notices("ops").size(), 2u);  // no longer a watcher
}

// Sinks survive a restart; removing one stops its notices.
TEST_F(NoticesTest, SinksAreDurableAndRemovable) {
  SetSink("alice");
  Restart();
  EXPECT_EQ(core_->notices().SinksOf("alice").size(), 1u);
  EXPECT_TRUE(core_->notices().SinksOf("alice")[0].secret.empty());
  ASSERT_TRUE(core_->notices().SendTest("alice").ok());
  EXPECT_EQ(Notices().size(), 1u);
  EXPECT_TRUE(core_->notices().RemoveSink("alice", "email").ok());
  EXPECT_EQ(core_->notices().RemoveSink("alice", "email").code(), Code::kNotFound);
  EXPECT_EQ(core_->notices().SendTest("alice").status().code(), Code::kConflict);
}

TEST(ValidateSinkTest, RefusesWhatCannotBeDeliveredSafely) {
  NotifySinkRow hook{.user = "a", .kind = "webhook", .target = "https://hooks.example.com/x"};
  hook.secret = std::string(20, 's');
  hook.format = "json";
  EXPECT_TRUE(ValidateSink(hook).ok());
  NotifySinkRow plain = hook;
  plain.target = "http://hooks.example.com/x";
  EXPECT_NE(ValidateSink(plain).message().find("must be https://"), std::string::npos);
  plain.target = "http://127.0.0.1:9/x";
  EXPECT_TRUE(ValidateSink(plain).ok());  // loopback, for tests
  NotifySinkRow weak = hook;
  weak.secret = "short";
  EXPECT_FALSE(ValidateSink(weak).ok());
  NotifySinkRow slack = hook;
  slack.format = "teams";
  EXPECT_FALSE(ValidateSink(slack).ok());
  NotifySinkRow mail{.user = "a", .kind = "email", .target = "bob@example.com"};
  EXPECT_TRUE(ValidateSink(mail).ok());
  for (const char* bad : {"bob", "@example.com", "bob@", "bob@example.com\r\nBcc: x@y", "a b@c"}) {
    mail.target = bad;
    EXPECT_FALSE(ValidateSink(mail).ok()) << bad;
  }
  mail.target = "bob@example.com";
  mail.events = "end,never";
  EXPECT_FALSE(ValidateSink(mail).ok());
  NotifySinkRow pager{.user = "a", .kind = "pager", .target = "x"};
  EXPECT_FALSE(ValidateSink(pager).ok());
}

}  // namespace
}  // namespace berth::testing
