// PgStore: what only the PostgreSQL backend does, against a real server (tests/support/
// pg_test_server.h): its schema version, a server that is not there, a server that goes away under
// an open store and comes back, and several servers migrating one fresh database at once. The
// Store contract itself is tested against every backend in store_contract_test.cpp.
#include "store/pg_store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <latch>
#include <thread>

#include "store/log_bytes.h"
#include "store/pg.h"
#include "store/pg_leader_lease.h"
#include "store/pg_schema.h"
#include "store_test_util.h"
#include "support/pg_test_server.h"

namespace berth {
namespace {

using namespace store_test;  // NOLINT: the shared times and submissions
using testing::PgTestCluster;
using testing::PgTestDatabase;

std::unique_ptr<PgTestDatabase> MustCreateDatabase() {
  Result<std::unique_ptr<PgTestDatabase>> db = PgTestDatabase::Create();
  EXPECT_TRUE(db.ok()) << db.status().message();
  return db.ok() ? std::move(*db) : nullptr;
}

std::unique_ptr<PgConn> MustConnect(const std::string& uri) {
  Result<std::unique_ptr<PgConn>> conn = PgConn::Connect(uri);
  EXPECT_TRUE(conn.ok()) << conn.status().message();
  return conn.ok() ? std::move(*conn) : nullptr;
}

// The single integer `sql` returns, or -1 (and a test failure).
int64_t PgQueryInt(PgConn& conn, const std::string& sql) {
  Result<PgResult> r = conn.Query(sql);
  EXPECT_TRUE(r.ok()) << sql << ": " << r.status().message();
  if (!r.ok() || r->rows() != 1) return -1;
  return r->Int(0, 0);
}

// A TCP port of 127.0.0.1 where nothing listens (bound, read and released again).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ADD_FAILURE() << "cannot find a free port";
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// The "host:port" of a postgresql://user@host:port/db URI.
std::string HostPort(const std::string& uri) {
  const size_t at = uri.find('@');
  const size_t slash = uri.find('/', at);
  return uri.substr(at + 1, slash - at - 1);
}

// A fresh database gets the schema at kPgSchemaVersion, recorded in berth_schema; opening it again
// keeps it (and the jobs). A database that a newer berth migrated is refused, naming its version,
// and left as it is.
TEST(PgStoreTest, SchemaVersionIsStoredAndANewerOneIsRefused) {
  std::unique_ptr<PgTestDatabase> db = MustCreateDatabase();
  ASSERT_NE(db, nullptr);
  {
    Result<std::unique_ptr<Store>> store = OpenPgStore(db->uri());
    ASSERT_TRUE(store.ok()) << store.status().message();
    ASSERT_TRUE((*store)->Submit(MakeSubmission(2, true)).ok());
  }
  std::unique_ptr<PgConn> raw = MustConnect(db->uri());
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(PgQueryInt(*raw, "SELECT version FROM berth_schema"), kPgSchemaVersion);
  EXPECT_EQ(PgQueryInt(*raw, "SELECT COUNT(*) FROM berth_schema"), 1);

  {
    Result<std::unique_ptr<Store>> again = OpenPgStore(db->uri());
    ASSERT_TRUE(again.ok()) << again.status().message();
    Result<std::vector<JobRow>> jobs = (*again)->LoadActiveJobs();
    ASSERT_TRUE(jobs.ok()) << jobs.status().message();
    EXPECT_EQ(jobs->size(), 2u);
  }
  EXPECT_EQ(PgQueryInt(*raw, "SELECT version FROM berth_schema"), kPgSchemaVersion);

  ASSERT_TRUE(raw->Exec("UPDATE berth_schema SET version = 99").ok());
  Result<std::unique_ptr<Store>> newer = OpenPgStore(db->uri());
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("version 99"), std::string::npos)
      << newer.status().message();
  EXPECT_NE(newer.status().message().find(db->name()), std::string::npos)
      << newer.status().message();
  EXPECT_EQ(PgQueryInt(*raw, "SELECT version FROM berth_schema"), 99);
  EXPECT_EQ(PgQueryInt(*raw, "SELECT COUNT(*) FROM jobs"), 2);
}

// The active jobs are loaded a page at a time (a million at once held every row in libpq beside
// the rows made from them), in id order, finished jobs left out, whether the last page is full or
// not.
TEST(PgStoreTest, ActiveJobsLoadAPageAtATimeInIdOrder) {
  std::unique_ptr<PgTestDatabase> db = MustCreateDatabase();
  ASSERT_NE(db, nullptr);
  Result<std::unique_ptr<PgStore>> store = PgStore::Open(db->uri());
  ASSERT_TRUE(store.ok()) << store.status().message();
  ASSERT_TRUE((*store)->Submit(MakeSubmission(7, /*as_group=*/true)).ok());
  Result<std::vector<JobRow>> third = (*store)->GetJobs({3});
  ASSERT_TRUE(third.ok() && third->size() == 1u);
  Batch cancel;
  cancel.jobs = {(*third)[0]};
  cancel.jobs[0].status = JobStatus::kCancelled;
  ASSERT_TRUE((*store)->Commit(cancel).ok());
  for (int64_t rows : {2, 3, 6, 100}) {
    (*store)->SetLoadPageRowsForTesting(rows);
    Result<std::vector<JobRow>> active = (*store)->LoadActiveJobs();
    ASSERT_TRUE(active.ok()) << active.status().message();
    std::vector<int64_t> ids;
    for (const JobRow& job : *active) ids.push_back(job.id);
    EXPECT_EQ(ids, (std::vector<int64_t>{1, 2, 4, 5, 6, 7})) << rows << " rows a page";
  }
  // The snapshot's transaction ended: the connection reads on as before.
  EXPECT_TRUE((*store)->GetJobs({1}).ok());
}

// Nothing listens on the port: the open fails at once with kUnavailable, naming the server (and
// never the password of the URI).
TEST(PgStoreTest, NoServerIsUnavailableAndNamesTheServer) {
  const std::string where = "127.0.0.1:" + std::to_string(FreePort());
  Result<std::unique_ptr<Store>> store =
      OpenPgStore("postgresql://berth:s3cret@" + where + "/berth");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kUnavailable) << store.status().message();
  EXPECT_NE(store.status().message().find(where), std::string::npos) << store.status().message();
  EXPECT_EQ(store.status().message().find("s3cret"), std::string::npos) << store.status().message();
}

// A connection string libpq cannot parse is the caller's mistake, not an outage: kInvalidArgument
// (which the server does not retry), again without the password.
TEST(PgStoreTest, MalformedConnectionStringIsInvalid) {
  Result<std::unique_ptr<Store>> store =
      OpenPgStore("postgresql://berth:s3cret@127.0.0.1/berth?no_such_option=1");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kInvalidArgument) << store.status().message();
  EXPECT_NE(store.status().message().find("no_such_option"), std::string::npos)
      << store.status().message();
  EXPECT_EQ(store.status().message().find("s3cret"), std::string::npos) << store.status().message();
}

// A password given as ?password= appeared in the server's logs and in the unauthenticated
// /v1/health (only the user-info form was left out): every form libpq takes is redacted.
TEST(PgStoreTest, APasswordInAnyFormOfTheUrlIsLeftOutOfMessages) {
  EXPECT_EQ(PgUrlWithoutPassword("postgresql://berth:s3cret@db:5432/berth"),
            "postgresql://berth@db:5432/berth");
  EXPECT_EQ(PgUrlWithoutPassword("postgresql://berth@db/berth?password=s3cret"),
            "postgresql://berth@db/berth");
  EXPECT_EQ(PgUrlWithoutPassword("postgres://db/berth?sslmode=require&password=s3cret&user=b"),
            "postgres://db/berth?sslmode=require&user=b");
  EXPECT_EQ(PgUrlWithoutPassword("postgresql://b:x@db/berth?password=s3cret"),
            "postgresql://b@db/berth");
  EXPECT_EQ(PgUrlWithoutPassword("postgresql://db/berth"), "postgresql://db/berth");
  EXPECT_EQ(PgUrlWithoutPassword("host=db password=s3cret dbname=berth"),
            "host=db password=*** dbname=berth");
  EXPECT_EQ(PgUrlWithoutPassword("host=db password = 's3 \\'cret' dbname=berth"),
            "host=db password = *** dbname=berth");
}

// A server of this test's own is stopped under an open store and started again.
//   1. Jobs 1 and 2 are submitted; job 1 starts.
//   2. The server stops: a submit and a commit (job 2 cancelled) answer kUnavailable, naming the
//      server; so does a read.
//   3. The server is back: the same store object works again, on its first call of each kind,
//      and neither failed write left anything: job 2 is still pending, the next ids are 3..5.
TEST(PgStoreTest, ServerStoppedUnderTheStoreAndBackAgain) {
  Result<std::unique_ptr<PgTestCluster>> cluster = PgTestCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  const std::string uri = (*cluster)->uri();
  const std::string where = HostPort(uri);
  Result<std::unique_ptr<Store>> opened = OpenPgStore(uri);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  Store& store = **opened;

  Result<SubmitResult> first = store.Submit(MakeSubmission(2, /*as_group=*/false));
  ASSERT_TRUE(first.ok()) << first.status().message();
  Result<std::vector<JobRow>> jobs = store.GetJobs({1, 2});
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 2u);
  Batch start;
  start.jobs = {(*jobs)[0]};
  start.jobs[0].status = JobStatus::kRunning;
  ASSERT_TRUE(store.Commit(start).ok());

  ASSERT_TRUE((*cluster)->Halt().ok());
  Result<SubmitResult> lost = store.Submit(MakeSubmission(3, /*as_group=*/true));
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), Code::kUnavailable) << lost.status().message();
  EXPECT_NE(lost.status().message().find(where), std::string::npos) << lost.status().message();
  Batch cancel;
  cancel.jobs = {(*jobs)[1]};
  cancel.jobs[0].status = JobStatus::kCancelled;
  cancel.events = {{2, JobEvent{kT0 + 5, JobStatus::kCancelled, 0, "cancelled by ada", "ada"}}};
  Status st = store.Commit(cancel);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.message();
  EXPECT_NE(st.message().find(where), std::string::npos) << st.message();

  ASSERT_TRUE((*cluster)->Resume().ok());
  // The read connection has not been used since the server went: its first read must notice the
  // dead connection and reconnect rather than fail.
  Result<std::vector<JobRow>> active = store.LoadActiveJobs();
  ASSERT_TRUE(active.ok()) << active.status().message();
  ASSERT_EQ(active->size(), 2u);
  EXPECT_EQ((*active)[0].status, JobStatus::kRunning);
  EXPECT_EQ((*active)[1].status, JobStatus::kPending);  // the failed commit left nothing
  Result<std::vector<JobEvent>> events = store.GetEvents(2);
  ASSERT_TRUE(events.ok()) << events.status().message();
  EXPECT_EQ(events->size(), 1u);

  Result<SubmitResult> again = store.Submit(MakeSubmission(3, /*as_group=*/true));
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->ids, std::vector<int64_t>({3, 4, 5}));  // the failed submit took no ids
  ASSERT_TRUE(store.Commit(cancel).ok());
  std::unique_ptr<PgConn> raw = MustConnect(uri);
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(PgQueryInt(*raw, "SELECT COUNT(*) FROM specs"), 2);
  EXPECT_EQ(PgQueryInt(*raw, "SELECT COUNT(*) FROM groups"), 1);
  EXPECT_EQ(PgQueryInt(*raw, "SELECT COUNT(*) FROM job_events"), 6);

  // A read while the server is down fails the same way, and the next one after it works.
  ASSERT_TRUE((*cluster)->Halt().ok());
  Result<std::vector<JobRow>> down = store.LoadActiveJobs();
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), Code::kUnavailable) << down.status().message();
  ASSERT_TRUE((*cluster)->Resume().ok());
  active = store.LoadActiveJobs();
  ASSERT_TRUE(active.ok()) << active.status().message();
  EXPECT_EQ(active->size(), 4u);  // 1 running, 3..5 pending
}

// The server stops while a 100,000-job submit is in flight. Whatever the moment, the submit is
// all or nothing: ok and every job there; or kUnavailable and no job there, or (when the
// connection went during COMMIT, whose outcome the store cannot know) every job there.
TEST(PgStoreTest, SubmitInFlightWhenTheServerStopsIsAllOrNothing) {
  Result<std::unique_ptr<PgTestCluster>> cluster = PgTestCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status().message();
  const std::string uri = (*cluster)->uri();
  Result<std::unique_ptr<Store>> opened = OpenPgStore(uri);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  Store& store = **opened;
  ASSERT_TRUE(store.Submit(MakeSubmission(1, false)).ok());

  constexpr int kJobs = 100'000;
  Result<SubmitResult> big = Status::Internal("not run");
  std::thread submitter([&] { big = store.Submit(MakeSubmission(kJobs, /*as_group=*/true)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Status halted = (*cluster)->Halt();
  submitter.join();
  ASSERT_TRUE(halted.ok()) << halted.message();
  ASSERT_TRUE((*cluster)->Resume().ok());

  std::unique_ptr<PgConn> raw = MustConnect(uri);
  ASSERT_NE(raw, nullptr);
  const int64_t jobs = PgQueryInt(*raw, "SELECT COUNT(*) FROM jobs");
  const int64_t events = PgQueryInt(*raw, "SELECT COUNT(*) FROM job_events");
  std::cout << "[          ] the submit " << (big.ok() ? "committed" : big.status().message())
            << "; jobs now " << jobs << "\n";
  if (big.ok()) {
    EXPECT_EQ(jobs, 1 + kJobs);
  } else {
    EXPECT_EQ(big.status().code(), Code::kUnavailable) << big.status().message();
    EXPECT_TRUE(jobs == 1 || jobs == 1 + kJobs) << jobs << " jobs: half a submit";
  }
  EXPECT_EQ(events, jobs);
  EXPECT_EQ(PgQueryInt(*raw, "SELECT COUNT(*) FROM specs"), jobs == 1 ? 1 : 2);
  // And the store goes on from there.
  Result<SubmitResult> next = store.Submit(MakeSubmission(1, false));
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_EQ(next->ids, std::vector<int64_t>({jobs + 1}));
}

// The connection breaks during COMMIT (a deferred trigger, run at COMMIT, ends its own backend):
// the store cannot know whether the commit landed, says the write failed, and remembers that an
// outcome was unknown (the HA loop then stops leading and loads afresh, docs/ha.md). A break before
// COMMIT is a plain failure: nothing is uncertain.
TEST(PgStoreTest, ConnectionLostDuringCommitMakesTheOutcomeUncertain) {
  std::unique_ptr<PgTestDatabase> db = MustCreateDatabase();
  ASSERT_NE(db, nullptr);
  Result<std::unique_ptr<PgStore>> opened = PgStore::Open(db->uri());
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  PgStore& store = **opened;
  ASSERT_TRUE(store.Submit(MakeSubmission(1, false)).ok());
  EXPECT_FALSE(store.commit_uncertain());

  std::unique_ptr<PgConn> raw = MustConnect(db->uri());
  ASSERT_NE(raw, nullptr);
  // Once only: a sequence's nextval is not undone by the rollback.
  ASSERT_TRUE(raw->Exec(R"sql(
    CREATE SEQUENCE commit_faults;
    CREATE FUNCTION end_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF nextval('commit_faults') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
      RETURN NULL;
    END $$;
    CREATE CONSTRAINT TRIGGER end_at_commit AFTER INSERT ON specs
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION end_at_commit();
  )sql")
                  .ok());
  Result<SubmitResult> lost = store.Submit(MakeSubmission(3, true));
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), Code::kUnavailable) << lost.status().message();
  EXPECT_TRUE(store.commit_uncertain());
  // (Here it did not land: the backend ended before writing its commit record.)
  EXPECT_EQ(PgQueryInt(*raw, "SELECT COUNT(*) FROM jobs"), 1);
  // The store reconnects and goes on.
  Result<SubmitResult> next = store.Submit(MakeSubmission(1, false));
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_EQ(PgQueryInt(*raw, "SELECT COUNT(*) FROM jobs"), 2);
}

// Several servers start at once against one fresh database: each opens its store, and the schema
// is created once (the migration runs under an advisory lock; the others wait, then find it).
TEST(PgStoreTest, StoresOpeningAFreshDatabaseAtOnceMigrateItOnce) {
  constexpr int kStores = 4;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::unique_ptr<PgTestDatabase> db = MustCreateDatabase();
    ASSERT_NE(db, nullptr);
    std::vector<Result<std::unique_ptr<Store>>> stores;
    for (int i = 0; i < kStores; ++i) stores.emplace_back(Status::Internal("not run"));
    std::latch go(kStores);
    std::vector<std::thread> threads;
    for (int i = 0; i < kStores; ++i) {
      threads.emplace_back([&, i] {
        go.arrive_and_wait();
        stores[i] = OpenPgStore(db->uri());
      });
    }
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < kStores; ++i) {
      ASSERT_TRUE(stores[i].ok()) << "store " << i << ": " << stores[i].status().message();
    }
    std::unique_ptr<PgConn> raw = MustConnect(db->uri());
    ASSERT_NE(raw, nullptr);
    EXPECT_EQ(PgQueryInt(*raw, "SELECT version FROM berth_schema"), kPgSchemaVersion);
    EXPECT_EQ(PgQueryInt(*raw, "SELECT COUNT(*) FROM berth_schema"), 1);
    EXPECT_EQ(PgQueryInt(*raw, "SELECT next FROM id_counters WHERE name = 'job'"), 1);
    // Every store works on the one schema, and ids stay unique across them.
    for (int i = 0; i < kStores; ++i) {
      Result<SubmitResult> r = (*stores[i])->Submit(MakeSubmission(2, true));
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_EQ(r->ids, std::vector<int64_t>({2 * i + 1, 2 * i + 2}));
    }
  }
}

}  // namespace
}  // namespace berth

namespace berth {
namespace {

// The leader lease in the database: one holder at a time, a larger token for every new holder, a
// renewal that fails once another server took the lease, and a release that frees it at once.
TEST(PgLeaderLeaseTest, OneHolderAtATimeWithGrowingTokens) {
  std::unique_ptr<PgTestDatabase> db = MustCreateDatabase();
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(OpenPgStore(db->uri()).ok());  // migrates
  Result<std::unique_ptr<PgLeaderLease>> a = PgLeaderLease::Open(db->uri());
  Result<std::unique_ptr<PgLeaderLease>> b = PgLeaderLease::Open(db->uri());
  ASSERT_TRUE(a.ok() && b.ok());
  Result<std::optional<int64_t>> ta = (*a)->Acquire("a", "http://a", 60'000);
  ASSERT_TRUE(ta.ok()) << ta.status().message();
  ASSERT_TRUE(ta->has_value());
  Result<std::optional<int64_t>> tb = (*b)->Acquire("b", "http://b", 60'000);
  ASSERT_TRUE(tb.ok());
  EXPECT_FALSE(tb->has_value()) << "a live lease was taken";
  // A renewal by its holder keeps the token.
  Result<std::optional<int64_t>> again = (*a)->Acquire("a", "http://a", 60'000);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ(**again, **ta);
  Result<LeaderInfo> info = (*b)->Current();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->holder, "a");
  EXPECT_EQ(info->url, "http://a");
  EXPECT_EQ(info->token, **ta);
  EXPECT_GT(info->expires_in, 50'000);
  // Released: b takes it at once, with a larger token; a's renewal then fails.
  ASSERT_TRUE((*a)->Release("a", **ta).ok());
  tb = (*b)->Acquire("b", "http://b", 60'000);
  ASSERT_TRUE(tb.ok() && tb->has_value());
  EXPECT_GT(**tb, **ta);
  Result<bool> renewed = (*a)->Renew("a", **ta, 60'000);
  ASSERT_TRUE(renewed.ok());
  EXPECT_FALSE(*renewed);
  // An expired lease is free (a lease of 1 ms has run out by the next statement).
  ASSERT_TRUE((*b)->Renew("b", **tb, 1).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ta = (*a)->Acquire("a", "http://a", 60'000);
  ASSERT_TRUE(ta.ok() && ta->has_value());
  EXPECT_GT(**ta, **tb);
}

// Fencing: a store fenced with a token that is no longer the lease's writes nothing. This is the
// paused leader woken after another server took over: its submission and its commit are refused
// (kUnavailable, "no longer leads"), and the database holds only the new leader's work.
TEST(PgLeaderLeaseTest, DeposedLeadersWritesAreRefused) {
  std::unique_ptr<PgTestDatabase> db = MustCreateDatabase();
  ASSERT_NE(db, nullptr);
  Result<std::unique_ptr<PgStore>> old_store = PgStore::Open(db->uri());
  Result<std::unique_ptr<PgStore>> new_store = PgStore::Open(db->uri());
  Result<std::unique_ptr<PgLeaderLease>> lease = PgLeaderLease::Open(db->uri());
  ASSERT_TRUE(old_store.ok() && new_store.ok() && lease.ok());
  Result<std::optional<int64_t>> t1 = (*lease)->Acquire("old", "http://old", 60'000);
  ASSERT_TRUE(t1.ok() && t1->has_value());
  (*old_store)->SetFence(**t1);
  Result<SubmitResult> first = (*old_store)->Submit(MakeSubmission(2, /*as_group=*/false));
  ASSERT_TRUE(first.ok()) << first.status().message();

  // The old leader's lease is released (or expires); another server takes it.
  ASSERT_TRUE((*lease)->Release("old", **t1).ok());
  Result<std::optional<int64_t>> t2 = (*lease)->Acquire("new", "http://new", 60'000);
  ASSERT_TRUE(t2.ok() && t2->has_value());
  (*new_store)->SetFence(**t2);

  Result<SubmitResult> late = (*old_store)->Submit(MakeSubmission(3, /*as_group=*/true));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), Code::kUnavailable);
  EXPECT_NE(late.status().message().find("no longer leads"), std::string::npos)
      << late.status().message();
  JobRow job = (*old_store)->GetJobs({first->ids[0]}).value().at(0);
  job.status = JobStatus::kCancelled;
  Batch batch;
  batch.jobs.push_back(job);
  Status commit = (*old_store)->Commit(batch);
  EXPECT_EQ(commit.code(), Code::kUnavailable) << commit.message();

  // The new leader writes; nothing of the old one's late work exists.
  Result<SubmitResult> ok = (*new_store)->Submit(MakeSubmission(1, /*as_group=*/false));
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  std::unique_ptr<PgConn> raw = MustConnect(db->uri());
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(PgQueryInt(*raw, "SELECT count(*) FROM jobs"), 3);
  EXPECT_EQ(PgQueryInt(*raw, "SELECT count(*) FROM groups"), 0);
  EXPECT_EQ(PgQueryInt(*raw, "SELECT count(*) FROM jobs WHERE status = 'CANCELLED'"), 0);
  // Its log appends are fenced too; the new leader's are not refused.
  Result<std::unique_ptr<LogBytes>> old_logs = OpenPgLogBytes(db->uri(), **t1);
  Result<std::unique_ptr<LogBytes>> new_logs = OpenPgLogBytes(db->uri(), **t2);
  ASSERT_TRUE(old_logs.ok() && new_logs.ok());
  Status late_log = (*old_logs)->Append({first->ids[0], 1, 0}, 0, "late");
  EXPECT_EQ(late_log.code(), Code::kUnavailable) << late_log.message();
  EXPECT_TRUE((*new_logs)->Append({first->ids[0], 1, 0}, 0, "on time").ok());
  EXPECT_EQ((*new_logs)->Read({first->ids[0], 1, 0}, 0, 100), "on time");
  // A store without a fence is not checked (one server, no election).
  (*old_store)->SetFence(std::nullopt);
  EXPECT_TRUE((*old_store)->Submit(MakeSubmission(1, /*as_group=*/false)).ok());
}

}  // namespace
}  // namespace berth

namespace berth {
namespace {

// Jobs' output in the database: appends at the end, reads across chunks and never past a gap, sizes
// per (job, attempt, rank), and retention by the jobs' end.
TEST(PgLogBytesTest, AppendsReadsAndRetention) {
  std::unique_ptr<PgTestDatabase> db = MustCreateDatabase();
  ASSERT_NE(db, nullptr);
  Result<std::unique_ptr<Store>> store = OpenPgStore(db->uri());
  ASSERT_TRUE(store.ok()) << store.status().message();
  Result<std::unique_ptr<LogBytes>> logs = OpenPgLogBytes(db->uri());
  ASSERT_TRUE(logs.ok()) << logs.status().message();
  const LogKey a{.job = 1001, .attempt = 1, .rank = 0};
  const LogKey other{.job = 1001, .attempt = 1, .rank = 1};
  EXPECT_EQ((*logs)->Size(a).value(), 0);
  EXPECT_EQ((*logs)->Read(a, 0, 100), "");
  std::string binary("\0\xff\n\x01tick", 8);
  ASSERT_TRUE((*logs)->Append(a, 0, "hello ").ok());
  ASSERT_TRUE((*logs)->Append(a, 6, binary).ok());
  ASSERT_TRUE((*logs)->Append(a, 14, "\nbye\n").ok());
  ASSERT_TRUE((*logs)->Append(other, 0, "rank one\n").ok());
  EXPECT_EQ((*logs)->Size(a).value(), 19);
  EXPECT_EQ((*logs)->Size(other).value(), 9);
  EXPECT_EQ((*logs)->Read(a, 0, 100), "hello " + binary + "\nbye\n");
  EXPECT_EQ((*logs)->Read(a, 3, 5), std::string("lo \0\xff", 5));  // across two chunks
  EXPECT_EQ((*logs)->Read(a, 15, 100), "bye\n");
  EXPECT_EQ((*logs)->Read(a, 19, 100), "");
  EXPECT_EQ((*logs)->Read(other, 0, 4), "rank");

  // Retention: the output of jobs that ended before the cut goes; the others' stays.
  Result<SubmitResult> jobs = (*store)->Submit(MakeSubmission(2, /*as_group=*/false));
  ASSERT_TRUE(jobs.ok());
  const int64_t old_job = jobs->ids[0], live_job = jobs->ids[1];
  ASSERT_TRUE((*logs)->Append({old_job, 2, 0}, 0, "old output").ok());
  ASSERT_TRUE((*logs)->Append({live_job, 2, 0}, 0, "live output").ok());
  JobRow ended = (*store)->GetJobs({old_job}).value().at(0);
  ended.status = JobStatus::kSucceeded;
  ended.ended_at = kT0 + 1000;
  Batch batch;
  batch.jobs.push_back(ended);
  ASSERT_TRUE((*store)->Commit(batch).ok());
  Result<int64_t> gone = DeletePgLogsEndedBefore(db->uri(), kT0 + 500);
  ASSERT_TRUE(gone.ok()) << gone.status().message();
  EXPECT_EQ(*gone, 0);  // ended after the cut
  gone = DeletePgLogsEndedBefore(db->uri(), kT0 + 2000);
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(*gone, 1);
  EXPECT_EQ((*logs)->Size({old_job, 2, 0}).value(), 0);
  EXPECT_EQ((*logs)->Read({live_job, 2, 0}, 0, 100), "live output");
}

}  // namespace
}  // namespace berth
