// The agent's managers, each owning its state and lock (agent/agent.h composes them): the CPUs
// pinned ranks hold (cpu_pins.h), the specs parsed for launches (parsed_specs.h), the unix accounts
// looked up for them (account_cache.h), the recycled job directories (spare_dirs.h), the
// interactive sessions' relays (session_relays.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "agent/account_cache.h"
#include "agent/cpu_pins.h"
#include "agent/parsed_specs.h"
#include "agent/session_relays.h"
#include "agent/spare_dirs.h"
#include "common/files.h"
#include "fakes/fake_launcher.h"
#include "fakes/temp_dir.h"

namespace berth {
namespace {

using Cpus = std::vector<int>;

// Four CPUs on two cores (0 and 1 share a core, 2 and 3 another): a rank of two gets a whole core,
// a second rank the other, a third nothing — and the refusal says what is free and what is held.
TEST(CpuPinsTest, PinnedRanksNeverShareACpuAndARefusalSaysWhatIsHeld) {
  CpuPins pins;
  pins.Configure({0, 1, 2, 3}, {{0, "0:0"}, {1, "0:0"}, {2, "0:1"}, {3, "0:1"}});
  auto a = pins.Pin("1-1-0", 2);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(*a, Cpus({0, 1}));
  auto b = pins.Pin("2-1-0", 2);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, Cpus({2, 3}));
  auto c = pins.Pin("3-1-0", 1);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "resources.cpu_binding: cores: 1 CPU(s) asked, 0 free of this node's 4 (free: none; "
            "pinned by other jobs: 0-3)");
  // A rank pinned again keeps what it had free to itself.
  auto again = pins.Pin("1-1-0", 2);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, Cpus({0, 1}));
  pins.Release("1-1-0");
  EXPECT_TRUE(pins.Of("1-1-0").empty());
  auto d = pins.Pin("3-1-0", 1);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, Cpus({0}));
  // A rank found running at start keeps its CPUs.
  pins.Adopt("9-1-0", {1});
  EXPECT_EQ(pins.Of("9-1-0"), Cpus({1}));
  EXPECT_FALSE(pins.Pin("4-1-0", 1).ok());
}

std::string SpecText(const std::string& run) {
  return "{\"name\":\"j\",\"run\":\"" + run + "\",\"resources\":{\"cpus\":1}}";
}

TEST(ParsedSpecsTest, ASpecIsParsedOnceKeptByUseAndBoundedByCountAndBytes) {
  ParsedSpecs specs(/*max_specs=*/2, /*max_bytes=*/1 << 20);
  ParsedSpecs::Entry one = ParsedSpecs::Parse(SpecText("echo one"));
  ASSERT_NE(one.spec, nullptr) << one.error;
  EXPECT_EQ(one.spec->run, "echo one");
  specs.Put(1, one);
  specs.Put(2, ParsedSpecs::Parse(SpecText("echo two")));
  ASSERT_TRUE(specs.Find(1).has_value());  // 1 used after 2: 2 is the least recently used
  specs.Put(3, ParsedSpecs::Parse(SpecText("echo three")));
  EXPECT_EQ(specs.size(), 2u);
  EXPECT_TRUE(specs.Find(1).has_value());
  EXPECT_FALSE(specs.Find(2).has_value());
  EXPECT_TRUE(specs.Find(3).has_value());

  ParsedSpecs::Entry bad = ParsedSpecs::Parse("{not json");
  EXPECT_EQ(bad.spec, nullptr);
  EXPECT_NE(bad.error.find("the job's spec is unreadable"), std::string::npos) << bad.error;

  // Past the byte cap the least recently used go, but the one just added always stays.
  ParsedSpecs small(/*max_specs=*/10, /*max_bytes=*/SpecText("echo one").size() + 1);
  small.Put(1, ParsedSpecs::Parse(SpecText("echo one")));
  small.Put(2, ParsedSpecs::Parse(SpecText("echo two")));
  EXPECT_EQ(small.size(), 1u);
  EXPECT_TRUE(small.Find(2).has_value());
  EXPECT_EQ(small.bytes(), SpecText("echo two").size());
  small.Clear();
  EXPECT_EQ(small.size(), 0u);
  EXPECT_EQ(small.bytes(), 0u);
}

TEST(AccountCacheTest, AnAccountIsLookedUpOncePerTtlAndAnUnknownUserIsNotKept) {
  std::map<std::string, int> lookups;
  AccountCache cache(
      [&](const std::string& user) -> Result<JobAccount> {
        ++lookups[user];
        if (user == "nobody-here") return Status::NotFound("no such user: " + user);
        return JobAccount{.user = user, .uid = 1000, .gid = 1000};
      },
      /*ttl_ms=*/2000, /*max=*/2);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(cache.Get("alice", 10 + i).ok());
  EXPECT_EQ(lookups["alice"], 1) << "a burst reads the account once";
  ASSERT_TRUE(cache.Get("alice", 2010).ok());
  EXPECT_EQ(lookups["alice"], 2) << "looked up again once its time is up";
  EXPECT_FALSE(cache.Get("nobody-here", 0).ok());
  EXPECT_FALSE(cache.Get("nobody-here", 1).ok());
  EXPECT_EQ(lookups["nobody-here"], 2) << "an unknown user is asked about each time";
  // Past `max` accounts the cache starts afresh: bounded.
  ASSERT_TRUE(cache.Get("bob", 2020).ok());
  ASSERT_TRUE(cache.Get("carol", 2030).ok());
  ASSERT_TRUE(cache.Get("alice", 2040).ok());
  EXPECT_EQ(lookups["alice"], 3);
}

// A finished job's directory is emptied and kept as a spare; the next launch renames it into
// place, with nothing of the last job in it. A directory with an unexpected entry, or one not
// reusable (its supervisor died), is removed instead. An earlier agent's spares are adopted.
TEST(SpareDirsTest, AFinishedJobsDirectoryIsEmptiedAndReused) {
  testing::TempDir state;
  const std::string jobs = state.path() + "/jobs";
  std::filesystem::create_directories(jobs + "/1-1-0");
  WriteFileAtomic(jobs + "/1-1-0/output.log", "secret output\n");
  WriteFileAtomic(jobs + "/1-1-0/gpu_hold", "0 5\n");  // a sampled GPU job's (agent/gpu_watch.h)
  SpareDirs spares(jobs);
  EXPECT_FALSE(spares.Take(jobs + "/2-1-0"));  // none yet

  spares.Recycle(jobs + "/1-1-0", /*reusable=*/true);
  EXPECT_EQ(spares.size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(jobs + "/1-1-0"));
  ASSERT_TRUE(spares.Take(jobs + "/2-1-0"));
  EXPECT_EQ(ReadFileOr(jobs + "/2-1-0/output.log"), "");  // emptied
  EXPECT_EQ(ReadFileOr(jobs + "/2-1-0/gpu_hold"), "");
  EXPECT_EQ(spares.size(), 0u);

  std::filesystem::create_directories(jobs + "/3-1-0");
  WriteFileAtomic(jobs + "/3-1-0/left-behind", "x");
  spares.Recycle(jobs + "/3-1-0", /*reusable=*/true);
  std::filesystem::create_directories(jobs + "/4-1-0");
  spares.Recycle(jobs + "/4-1-0", /*reusable=*/false);
  EXPECT_EQ(spares.size(), 0u);
  EXPECT_FALSE(std::filesystem::exists(jobs + "/3-1-0"));
  EXPECT_FALSE(std::filesystem::exists(jobs + "/4-1-0"));

  SpareDirs restarted(jobs);
  EXPECT_TRUE(restarted.Adopt(".spare-7"));
  EXPECT_FALSE(restarted.Adopt("5-1-0"));
  EXPECT_EQ(restarted.size(), 1u);
}

// A connection that records the sessions the relays open, and opens none.
class SessionRecorder final : public AgentConnection {
 public:
  Result<proto::RegisterAnswer> Register(const proto::RegisterRequest&) override {
    return Status::Unavailable("not here");
  }
  Status Heartbeat(const proto::HeartbeatRequest&) override {
    return Status::Unavailable("not here");
  }
  Result<proto::HealthAnswer> SendHealth(const proto::HealthRequest&) override {
    return Status::Unavailable("not here");
  }
  Result<proto::ReportAnswer> Report(const proto::ReportRequest&, int64_t) override {
    return Status::Unavailable("not here");
  }
  Result<proto::LogBatchAnswer> AppendLogs(const std::string&, const std::string&,
                                           const std::vector<proto::LogPiece>&, int64_t) override {
    return Status::Unavailable("not here");
  }
  Result<std::string> GetSpec(const SpecFetch&) override { return Status::Unavailable("not here"); }
  Result<std::string> FetchBlobs(const BlobFetch&) override {
    return Status::Unavailable("not here");
  }
  Status Watch(const std::string&, const std::string&,
               const std::function<bool(const proto::WatchMessage&)>&) override {
    return Status::Unavailable("not here");
  }
  void AbortWatch() override {}
  Result<std::unique_ptr<net::WebSocketClient>> OpenSession(const std::string& node,
                                                            const std::string& session,
                                                            const std::string& sid) override {
    MutexLock lock(mu_);
    opened.push_back(node + " " + session + " " + sid);
    return Status::NotFound("the server no longer waits for it");
  }
  std::vector<std::string> Opened() {
    MutexLock lock(mu_);
    return opened;
  }

 private:
  Mutex mu_;
  std::vector<std::string> opened GUARDED_BY(mu_);
};

// Each session is relayed on a thread of its own, in the agent's current session with the server;
// one the server no longer waits for ends at once, and WaitForAll sees every relay end. RankKey
// names a rank's job directory.
TEST(SessionRelaysTest, EachSessionIsRelayedInTheAgentsSessionAndEnds) {
  testing::TempDir state;
  SessionRecorder connection;
  testing::FakeLauncher launcher;
  std::atomic<bool> stop{false};
  ContainerHost containers;
  CgroupHost cgroups;
  SessionRelays relays({state.path(), "n1", &containers, &cgroups}, launcher, connection, stop,
                       {.session = [] { return std::string("s-7"); },
                        .runs = [](const std::string&) { return true; }});
  proto::SessionMessage terminal;
  terminal.sid = "t1";
  terminal.job = 4;
  terminal.attempt = 1;
  proto::ForwardMessage forward;
  forward.sid = "f1";
  forward.job = 4;
  forward.attempt = 1;
  forward.port = 8888;
  relays.Terminal(terminal);
  relays.Forward(forward);
  relays.WaitForAll(5000);
  std::vector<std::string> opened = connection.Opened();
  std::sort(opened.begin(), opened.end());
  EXPECT_EQ(opened, std::vector<std::string>({"n1 s-7 f1", "n1 s-7 t1"}));
  EXPECT_EQ(RankKey(terminal.id()), "4-1-0");
}

}  // namespace
}  // namespace berth
