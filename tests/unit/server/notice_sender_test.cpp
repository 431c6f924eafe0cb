// NoticeSender (server/notify/notice_sender.h) and NoticeText: deliveries from the outbox through a
// fake transport — signatures, retries with backoff, giving up, refusals for good, the rate limit.
#include "server/notify/notice_sender.h"

#include <gtest/gtest.h>

#include "common/sha256.h"
#include "fakes/fake_clock.h"
#include "fakes/fake_notice_transport.h"
#include "fakes/temp_dir.h"
#include "server/notify/notice_text.h"

namespace berth::testing {
namespace {

const std::string kSecret = "a-secret-of-sixteen-or-more";

class NoticeSenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = OpenSqliteStore(dir_.File("berth.db"));
    ASSERT_TRUE(store.ok());
    store_ = std::move(*store);
    Batch sinks;
    sinks.notify_sinks.push_back({.user = "alice",
                                  .kind = "webhook",
                                  .target = "https://hooks.example.com/x",
                                  .secret = kSecret,
                                  .format = "json"});
    sinks.notify_sinks.push_back({.user = "alice", .kind = "email", .target = "alice@example.com"});
    ASSERT_TRUE(store_->Commit(sinks).ok());
    options_.retry_cap_ms = 8'000;
    options_.give_up_ms = 60'000;
  }

  void Write(const std::string& id, const std::string& sink, const std::string& user = "alice") {
    Batch b;
    NoticeRow row;
    row.event_id = id;
    row.user = user;
    row.sink = sink;
    row.type = "end";
    row.job = 7;
    row.created_at = clock_.Now();
    row.next_at = clock_.Now();
    row.payload = R"({"version":1,"id":")" + id +
                  R"(","type":"end","job":7,"name":"train","status":"FAILED","exit_code":2})";
    b.notices.push_back(row);
    ASSERT_TRUE(store_->Commit(b).ok());
  }

  NoticeRow Row(const std::string& id) {
    auto rows = store_->ListNotices("", std::nullopt, 100);
    EXPECT_TRUE(rows.ok());
    for (const NoticeRow& r : *rows) {
      if (r.event_id == id) return r;
    }
    ADD_FAILURE() << "no notice " << id;
    return {};
  }

  NoticeSender Sender() { return NoticeSender(*store_, clock_, transport_, options_); }

  TempDir dir_;
  FakeClock clock_;
  FakeNoticeTransport transport_;
  NoticeSenderOptions options_;
  std::unique_ptr<Store> store_;
};

// A webhook gets the event's JSON, signed: t=UNIX,v1=HMAC-SHA256(secret, "UNIX." + body).
TEST_F(NoticeSenderTest, AWebhookIsSignedOverTimestampAndBody) {
  Write("job-7.1.end", "webhook");
  NoticeSender sender = Sender();
  EXPECT_EQ(sender.Drain(), 1);
  ASSERT_EQ(transport_.posts.size(), 1u);
  const auto& post = transport_.posts[0];
  EXPECT_EQ(post.url, "https://hooks.example.com/x");
  EXPECT_EQ(post.Header("X-Berth-Delivery"), "job-7.1.end");
  const std::string t = std::to_string(clock_.Now() / 1000);
  EXPECT_EQ(post.Header("X-Berth-Signature"),
            "t=" + t + ",v1=" + HmacSha256Hex(kSecret, t + "." + post.body));
  EXPECT_EQ(json::parse(post.body).at("id").as_string(), "job-7.1.end");
  EXPECT_EQ(Row("job-7.1.end").state, "sent");
  EXPECT_EQ(sender.Drain(), 0);  // sent once
}

// A mail says what happened in its subject and body.
TEST_F(NoticeSenderTest, AMailSaysWhatHappened) {
  Write("job-7.1.end", "email");
  NoticeSender sender = Sender();
  sender.Drain();
  ASSERT_EQ(transport_.mails.size(), 1u);
  EXPECT_EQ(transport_.mails[0].to, "alice@example.com");
  EXPECT_EQ(transport_.mails[0].subject, "berth: job 7 (train) FAILED (exit 2)");
  EXPECT_EQ(transport_.mails[0].message_id, "<job-7.1.end@berth>");
  EXPECT_NE(transport_.mails[0].body.find("berth logs 7"), std::string::npos);
}

// A receiver that fails is tried again after 2 s, 4 s, ... (capped), then succeeds once.
TEST_F(NoticeSenderTest, FailuresAreRetriedWithBackoffUntilDelivered) {
  Write("job-7.1.end", "webhook");
  transport_.Answer({Status::Unavailable("refused"), Status::Unavailable("refused")});
  NoticeSender sender = Sender();
  sender.Drain();
  NoticeRow row = Row("job-7.1.end");
  EXPECT_EQ(row.state, "pending");
  EXPECT_EQ(row.attempts, 1);
  EXPECT_EQ(row.next_at, clock_.Now() + 2'000);
  EXPECT_EQ(row.last_error, "refused");
  clock_.Advance(1'999);
  EXPECT_EQ(sender.Drain(), 0);
  clock_.Advance(1);
  sender.Drain();
  EXPECT_EQ(Row("job-7.1.end").next_at, clock_.Now() + 4'000);
  clock_.Advance(4'000);
  sender.Drain();
  row = Row("job-7.1.end");
  EXPECT_EQ(row.state, "sent");
  EXPECT_EQ(row.attempts, 3);
  EXPECT_TRUE(row.last_error.empty());
  EXPECT_EQ(transport_.posts.size(), 3u);
}

// A receiver that fails is tried once a round: its other notices wait for the same retry.
TEST_F(NoticeSenderTest, AFailingSinkIsTriedOnceARound) {
  for (int i = 0; i < 5; ++i) Write("job-" + std::to_string(i) + ".1.end", "webhook");
  Write("job-9.1.end", "email");
  transport_.Answer({Status::Unavailable("timed out")});
  NoticeSender sender = Sender();
  EXPECT_EQ(sender.Drain(), 6);
  EXPECT_EQ(transport_.posts.size(), 1u);
  EXPECT_EQ(transport_.mails.size(), 1u);  // another sink goes on
  EXPECT_EQ(Row("job-3.1.end").attempts, 0);
  EXPECT_EQ(Row("job-3.1.end").next_at, clock_.Now() + 2'000);
  EXPECT_EQ(Row("job-3.1.end").last_error, "waiting: timed out");
  clock_.Advance(2'000);
  sender.Drain();
  EXPECT_EQ(transport_.posts.size(), 6u);
  EXPECT_EQ(Row("job-3.1.end").state, "sent");
}

// Still failing past give_up, or refused for good: failed, with the last error kept.
TEST_F(NoticeSenderTest, GivesUpAfterTheWindowOrAtARefusal) {
  Write("job-7.1.end", "webhook");
  Write("job-8.1.end", "email");
  std::vector<Status> down(20, Status::Unavailable("down"));
  down[1] = Status::Infeasible("smtp: 550 no such user");
  transport_.Answer(down);
  NoticeSender sender = Sender();
  sender.Drain();
  EXPECT_EQ(Row("job-8.1.end").state, "failed");
  EXPECT_EQ(Row("job-8.1.end").last_error, "smtp: 550 no such user");
  for (int i = 0; i < 20 && Row("job-7.1.end").state == "pending"; ++i) {
    clock_.Advance(8'000);
    sender.Drain();
  }
  EXPECT_EQ(Row("job-7.1.end").state, "failed");
  EXPECT_EQ(Row("job-7.1.end").last_error, "down");
  EXPECT_GE(Row("job-7.1.end").attempts, 60'000 / 8'000);
}

// More than the per-user rate wait for later minutes, `per_user_per_minute` a minute; nothing is
// dropped, and a deferred notice is written back once, not every minute.
TEST_F(NoticeSenderTest, TheRateLimitDefersAndDropsNothing) {
  options_.per_user_per_minute = 2;
  for (int i = 0; i < 7; ++i) Write("job-" + std::to_string(i) + ".1.end", "email");
  NoticeSender sender = Sender();
  sender.Drain();
  EXPECT_EQ(transport_.mails.size(), 2u);
  EXPECT_EQ(Row("job-2.1.end").state, "pending");
  EXPECT_EQ(Row("job-2.1.end").attempts, 0);
  EXPECT_EQ(Row("job-3.1.end").next_at, clock_.Now() + 60'000);
  EXPECT_EQ(Row("job-4.1.end").next_at, clock_.Now() + 120'000);
  EXPECT_EQ(Row("job-6.1.end").next_at, clock_.Now() + 180'000);
  for (size_t minute = 1; minute <= 3; ++minute) {
    clock_.Advance(60'000);
    EXPECT_EQ(sender.Drain(), minute < 3 ? 2 : 1);
    EXPECT_EQ(transport_.mails.size(), std::min<size_t>(2 + 2 * minute, 7));
  }
  EXPECT_EQ(Row("job-6.1.end").state, "sent");
}

// A notice whose user removed the sink fails, saying so.
TEST_F(NoticeSenderTest, ARemovedSinkFailsItsNotices) {
  Write("job-7.1.end", "webhook", "bob");
  NoticeSender sender = Sender();
  sender.Drain();
  EXPECT_EQ(Row("job-7.1.end").state, "failed");
  EXPECT_NE(Row("job-7.1.end").last_error.find("no webhook sink"), std::string::npos);
}

TEST(NoticeTextTest, SummariesCountEachCause) {
  std::vector<JobRow> jobs(5);
  jobs[0].status = JobStatus::kFailed;
  jobs[0].exit_code = 1;
  jobs[1].status = JobStatus::kFailed;
  jobs[1].exit_code = 1;
  jobs[2].status = JobStatus::kFailed;
  jobs[2].exit_code = 137;
  jobs[2].reason = "out of memory: rank 0";
  jobs[3].status = JobStatus::kSucceeded;
  jobs[4].status = JobStatus::kLost;
  const std::string breakdown = FailureBreakdown(jobs);
  EXPECT_EQ(breakdown, "exit 1: 2, lost: 1, oom: 1");
  json::object counts{{"SUCCEEDED", 97}, {"FAILED", 3}};
  EXPECT_EQ(SummaryLine(counts, 100, "exit 1: 2, oom: 1"),
            "100 jobs: 97 succeeded, 3 failed (exit 1: 2, oom: 1)");
  json::object slack =
      json::parse(
          WebhookBody(
              json::object{{"id", "x"}, {"type", "end"}, {"job", 3}, {"status", "SUCCEEDED"}},
              "slack"))
          .as_object();
  EXPECT_EQ(slack.at("text").as_string(), "berth: job 3 SUCCEEDED");
  EXPECT_EQ(slack.at("id").as_string(), "x");
}

}  // namespace
}  // namespace berth::testing
