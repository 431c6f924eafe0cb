// Reservations (server/core/reservations.h): operators' reservations in the core — checked, stored
// before memory changes, taken by each pass at its `now`, and what happens on time (Tick).
#include "server/core/reservations.h"

#include <gtest/gtest.h>

#include "core_fixture.h"

namespace berth::testing {
namespace {

constexpr DurationMs kMinute = 60'000;
constexpr DurationMs kHour = 60 * kMinute;

class ReservationsTest : public CoreTest {
 protected:
  ReservationAsk Ask(const std::string& name, const std::string& start, const std::string& duration,
                     std::vector<std::string> nodes) {
    ReservationAsk ask;
    ask.name = name;
    ask.start = start;
    ask.duration = duration;
    ask.nodes = std::move(nodes);
    return ask;
  }

  Result<Reservation> Create(const ReservationAsk& ask, const std::string& by = "ops") {
    return core_->reservations().Create(ask, by);
  }

  JobSpec InReservation(const std::string& name) {
    JobSpec spec = Spec();
    spec.reservation = name;
    return spec;
  }

  std::string Reason(int64_t job) { return core_->reads().WaitingReason(job); }

  NodeStatus Node(const std::string& name) {
    for (NodeStatus& n : core_->reads().Nodes()) {
      if (n.row.name == name) return n;
    }
    return {};
  }
};

TEST_F(ReservationsTest, BadRequestsAreRefusedSayingWhy) {
  Register("n1", 8, 4);
  auto refused = [&](const ReservationAsk& ask, const std::string& needle) {
    Result<Reservation> r = Create(ask);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  refused(Ask("a", "now-2h", "1h", {"n1"}), "invalid time");
  refused(Ask("a", "2020-01-01T00:00:00Z", "1h", {"n1"}), "in the past");
  refused(Ask("a", "now+1h", "0", {"n1"}), "above zero");
  refused(Ask("a", "now+1h", "1h", {"nx"}), "unknown node 'nx'");
  refused(Ask("bad name", "now+1h", "1h", {"n1"}), "invalid reservation name");
  ReservationAsk gpus = Ask("g", "now+1h", "1h", {});
  gpus.nodes.reset();
  gpus.gpus = "V100:5";
  refused(gpus, "only 4 V100 GPUs");
  ReservationAsk both = Ask("m", "now+1h", "1h", {"n1"});
  both.maintenance = true;
  both.team = "ml";
  refused(both, "maintenance window is for no one");
  ASSERT_TRUE(Create(Ask("first", "now+1h", "2h", {"n1"})).ok());
  refused(Ask("second", "now+2h", "1h", {"n1"}), "overlaps reservation 'first'");
  Result<Reservation> again = Create(Ask("first", "now+5h", "1h", {"n1"}));
  EXPECT_EQ(again.status().code(), Code::kConflict);
  // A daily one overlaps a later one-off on the same node on its second day; a weekly one on
  // another day of the week does not.
  ReservationAsk daily = Ask("daily", "now+4h", "1h", {"n1"});
  daily.repeat = "daily";
  ASSERT_TRUE(Create(daily).ok());
  refused(Ask("later", "now+28h", "2h", {"n1"}), "overlaps reservation 'daily'");
  ReservationAsk weekly = Ask("weekly", "now+6h", "1h", {"n1"});
  weekly.repeat = "weekly";
  ASSERT_TRUE(Create(weekly).ok());
}

TEST_F(ReservationsTest, AFailedCommitChangesNothingAndARestartKeepsWhatWasCommitted) {
  Register("n1");
  store_->FailWrites(1);
  Result<Reservation> failed = Create(Ask("demo", "now+1h", "1h", {"n1"}));
  EXPECT_EQ(failed.status().code(), Code::kUnavailable);
  EXPECT_TRUE(core_->reservations().List().empty());
  ASSERT_TRUE(Create(Ask("demo", "now+1h", "1h", {"n1"})).ok());
  Restart();
  std::optional<Reservation> kept = core_->reservations().Get("demo");
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(kept->start, clock_.Now() + kHour);
  EXPECT_EQ(kept->created_by, "ops");
}

TEST_F(ReservationsTest, OnlyTheCreatorOrAnAdminChangesOrDeletesIt) {
  Register("n1");
  ASSERT_TRUE(Create(Ask("demo", "now+1h", "1h", {"n1"})).ok());
  ReservationAsk longer;
  longer.name = "demo";
  longer.duration = "3h";
  EXPECT_EQ(core_->reservations().Update(longer, "eve", false).status().code(), Code::kForbidden);
  Result<Reservation> changed = core_->reservations().Update(longer, "root", true);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(changed->duration, 3 * kHour);
  EXPECT_EQ(core_->reservations().Delete("demo", "eve", false).code(), Code::kForbidden);
  EXPECT_TRUE(core_->reservations().Delete("demo", "ops", false).ok());
  EXPECT_EQ(core_->reservations().Delete("demo", "ops", false).code(), Code::kNotFound);
}

TEST_F(ReservationsTest, PassesKeepOthersOffAndLetMembersInAtTheStart) {
  Register("n1", 1);
  ReservationAsk ask = Ask("demo", "now+30m", "1h", {"n1"});
  ask.users = std::vector<std::string>{"bob"};
  ASSERT_TRUE(Create(ask).ok());
  EXPECT_EQ(core_->reservations().MayUse("demo", "alice", "").code(), Code::kForbidden);
  EXPECT_TRUE(core_->reservations().MayUse("demo", "bob", "").ok());
  const int64_t other = Submit(Spec(1));
  const int64_t member = Submit(InReservation("demo"), "bob");
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(other).status, JobStatus::kPending);
  EXPECT_NE(Reason(other).find("reserved by 'demo' from"), std::string::npos) << Reason(other);
  EXPECT_NE(Reason(member).find("waiting for reservation 'demo'"), std::string::npos);
  EXPECT_EQ(Node("n1").reserved.name, "demo");
  EXPECT_FALSE(Node("n1").reserved.active);
  // The window opens: the member starts; the other job is told until when.
  clock_.Advance(30 * kMinute);
  ASSERT_TRUE(core_->scheduling().WaitForPassRequest(0));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(member).status, JobStatus::kStarting);
  EXPECT_EQ(Stored(other).status, JobStatus::kPending);
  EXPECT_TRUE(Node("n1").reserved.active);
}

TEST_F(ReservationsTest, EvictAtTheStartAndReleaseWhenUnused) {
  Register("n1", 1);
  const int64_t early = Submit(Spec(1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  Run("n1", early);
  ReservationAsk ask = Ask("demo", "now+10m", "1h", {"n1"});
  ask.users = std::vector<std::string>{"bob"};
  ask.evict = true;
  ask.release_unused = "20m";
  ASSERT_TRUE(Create(ask).ok());
  core_->reservations().Tick();
  EXPECT_EQ(Stored(early).status, JobStatus::kRunning);  // before the window: it runs on
  clock_.Advance(10 * kMinute);
  core_->reservations().Tick();
  EXPECT_EQ(Stored(early).status, JobStatus::kPending);  // evicted at the start, requeued
  EXPECT_NE(Stored(early).reason.find("reservation 'demo' started"), std::string::npos)
      << Stored(early).reason;
  // Nobody of the reservation runs there: after 20 minutes it lets go of the rest of its window.
  clock_.Advance(19 * kMinute);
  core_->reservations().Tick();
  EXPECT_TRUE(core_->reservations().Get("demo")->released_start < 0);
  clock_.Advance(2 * kMinute);
  store_->FailWrites(1);  // the release is not recorded: memory stays as it was
  core_->reservations().Tick();
  EXPECT_TRUE(core_->reservations().Get("demo")->released_start < 0);
  core_->reservations().Tick();
  std::optional<Reservation> released = core_->reservations().Get("demo");
  EXPECT_GE(released->released_start, 0);
  EXPECT_FALSE(WindowOf(*released, clock_.Now()).has_value());
}

TEST_F(ReservationsTest, AfterAMaintenanceWindowTheNodeWaitsForACleanHealthReport) {
  Register("n1", 1);
  ReservationAsk ask = Ask("upgrade", "now+10m", "30m", {"n1"});
  ask.maintenance = true;
  ASSERT_TRUE(Create(ask).ok());
  core_->reservations().Tick();
  clock_.Advance(41 * kMinute);
  core_->reservations().Tick();
  EXPECT_EQ(Node("n1").maintenance_hold, "upgrade");
  const int64_t job = Submit(Spec(1));
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(job).status, JobStatus::kPending);  // held: not schedulable
  // A report with a node fault keeps it out; a clean one brings it back.
  proto::HealthRequest faulty{"n1", sessions_["n1"], {}};
  faulty.health.faults.push_back({.probe = "gpus", .gpu = -1, .reason = "nvidia-smi failed"});
  ASSERT_TRUE(core_->agents().ReportHealth(faulty).ok());
  EXPECT_EQ(Node("n1").maintenance_hold, "upgrade");
  ASSERT_TRUE(core_->agents().ReportHealth(proto::HealthRequest{"n1", sessions_["n1"], {}}).ok());
  EXPECT_EQ(Node("n1").maintenance_hold, "");
  ASSERT_TRUE(core_->scheduling().RunPass());
  EXPECT_EQ(Stored(job).status, JobStatus::kStarting);
}

}  // namespace
}  // namespace berth::testing
