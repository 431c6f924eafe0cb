// The tests' PostgreSQL: a real server (Debian's binaries, started by tests/support/pg_cluster.sh
// with initdb + pg_ctl in a temp dir on a free port; never a system service) and a fresh database
// per test on it.
//
// Under ctest the server is the one the CTest fixture `store.pg_cluster_start` started: its URI is
// in the file named by $BERTH_TEST_PG_URI_FILE. Run by hand (no such variable), the test process
// starts its own at first use, in a `mktemp -d /tmp/berth-pg-XXXXXX` dir, and stops it at exit.
// Tests that must stop the server under a store start a private PgTestCluster instead.
//
// A PostgreSQL that cannot be found or started fails the test (CI installs it): it never skips.
//
// Thread-safety: PgTestServerUri() may be called from any thread; a PgTestDatabase or
// PgTestCluster belongs to one test.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "store/pg.h"

namespace berth::testing {

// The URI of the shared server's maintenance database ("postgres"), starting the server first when
// this process must run its own. Fails with what went wrong (no PostgreSQL installed, a fixture
// file that is missing) and what to do.
Result<std::string> PgTestServerUri();

// `uri` (a postgresql:// URI) with its database replaced by `database`.
std::string PgUriWithDatabase(const std::string& uri, const std::string& database);

// A database of one test's own on the shared server: created empty, dropped (with every
// connection still open to it) when the object dies.
class PgTestDatabase {
 public:
  // Creates a database with a name no other test process uses (pid, a counter, a random number).
  static Result<std::unique_ptr<PgTestDatabase>> Create();
  ~PgTestDatabase();
  PgTestDatabase(const PgTestDatabase&) = delete;
  PgTestDatabase& operator=(const PgTestDatabase&) = delete;

  const std::string& name() const { return name_; }
  // A postgresql:// URI of this database, for OpenPgStore() and PgConn::Connect().
  const std::string& uri() const { return uri_; }

 private:
  PgTestDatabase(std::unique_ptr<PgConn> admin, std::string name, std::string uri)
      : admin_(std::move(admin)), name_(std::move(name)), uri_(std::move(uri)) {}

  std::unique_ptr<PgConn> admin_;  // to the server's "postgres" database: CREATE/DROP DATABASE
  std::string name_;
  std::string uri_;
};

// A PostgreSQL server of one test's own (pg_cluster.sh start in a fresh /tmp dir), for tests that
// stop and restart the server under a store. Stopped and removed when the object dies.
class PgTestCluster {
 public:
  static Result<std::unique_ptr<PgTestCluster>> Start();
  ~PgTestCluster();
  PgTestCluster(const PgTestCluster&) = delete;
  PgTestCluster& operator=(const PgTestCluster&) = delete;

  // Stops the server (fast shutdown: open connections are terminated); the data is kept.
  Status Halt();
  // Starts it again, on the same port.
  Status Resume();

  // The URI of its "postgres" database.
  const std::string& uri() const { return uri_; }

 private:
  PgTestCluster(std::string dir, std::string uri) : dir_(std::move(dir)), uri_(std::move(uri)) {}

  std::string dir_;
  std::string uri_;
};

}  // namespace berth::testing
