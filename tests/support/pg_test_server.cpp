#include "support/pg_test_server.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#ifndef BERTH_PG_CLUSTER_SCRIPT
#error "BERTH_PG_CLUSTER_SCRIPT must name tests/support/pg_cluster.sh (tests/CMakeLists.txt)"
#endif

namespace berth::testing {
namespace {

std::string TrimNewlines(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// Runs `pg_cluster.sh <command> <arg>` and returns what it printed (stdout and stderr together, so
// that a failure carries initdb's or the server's own words).
Result<std::string> RunClusterScript(const std::string& command, const std::string& arg) {
  const std::string line =
      "bash '" BERTH_PG_CLUSTER_SCRIPT "' " + command + " '" + arg + "' </dev/null 2>&1";
  FILE* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) return Status::Internal("cannot run " + line);
  std::string output;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) output.append(buf, n);
  const int rc = pclose(pipe);
  if (rc != 0) {
    const int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    return Status::Unavailable("pg_cluster.sh " + command + " " + arg + " failed (exit " +
                               std::to_string(code) + "): " + TrimNewlines(output));
  }
  return output;
}

// A fresh directory for a cluster. Under /tmp, not $TMPDIR or the build dir: as root the server
// runs as `nobody`, who must be able to reach it.
Result<std::string> MakeClusterDir() {
  std::string dir = "/tmp/berth-pg-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) {
    return Status::Internal("mkdtemp /tmp/berth-pg-XXXXXX: " + std::string(strerror(errno)));
  }
  return dir;
}

Result<std::string> ReadUri(const std::string& file) {
  std::ifstream in(file);
  std::string uri;
  if (!in || !std::getline(in, uri) || TrimNewlines(uri).empty()) {
    return Status::Unavailable("no PostgreSQL URI in " + file);
  }
  return TrimNewlines(uri);
}

// Starts a cluster in a fresh dir; its URI, or why not (the dir removed again).
Result<std::string> StartCluster(std::string* dir_out) {
  Result<std::string> dir = MakeClusterDir();
  if (!dir.ok()) return dir.status();
  Result<std::string> started = RunClusterScript("start", *dir);
  if (!started.ok()) {
    (void)RunClusterScript("stop", *dir);
    return Status::Unavailable(
        "cannot start a PostgreSQL for the tests (Debian's postgresql package; "
        "scripts/install-deps.sh --for-tests installs it): " +
        started.status().message());
  }
  Result<std::string> uri = ReadUri(*dir + "/uri");
  if (!uri.ok()) {
    (void)RunClusterScript("stop", *dir);
    return uri.status();
  }
  *dir_out = *dir;
  return uri;
}

// The cluster this process started for itself (run by hand, without the CTest fixture); stopped at
// exit by the process that started it, never by a forked child that happens to exit().
std::string own_cluster_dir;
pid_t own_cluster_pid = 0;

void StopOwnCluster() {
  if (own_cluster_pid != getpid() || own_cluster_dir.empty()) return;
  (void)RunClusterScript("stop", own_cluster_dir);
}

Result<std::string> FindOrStartServer() {
  if (const char* file = getenv("BERTH_TEST_PG_URI_FILE"); file != nullptr && *file != '\0') {
    Result<std::string> uri = ReadUri(file);
    if (!uri.ok()) {
      return Status::Unavailable(uri.status().message() +
                                 " ($BERTH_TEST_PG_URI_FILE): the CTest fixture test "
                                 "store.pg_cluster_start writes it; did it fail? Its output says "
                                 "why (ctest -R store.pg_cluster_start --output-on-failure)");
    }
    return uri;
  }
  std::string dir;
  Result<std::string> uri = StartCluster(&dir);
  if (!uri.ok()) return uri.status();
  own_cluster_dir = dir;
  own_cluster_pid = getpid();
  atexit(&StopOwnCluster);
  return uri;
}

}  // namespace

Result<std::string> PgTestServerUri() {
  // Once per process (thread-safe static initialization); a failure is remembered, not retried,
  // so that every test reports the same cause without starting servers over and over.
  static const Result<std::string> uri = FindOrStartServer();
  return uri;
}

std::string PgUriWithDatabase(const std::string& uri, const std::string& database) {
  const size_t scheme = uri.find("://");
  const size_t authority = scheme == std::string::npos ? 0 : scheme + 3;
  const size_t path = uri.find('/', authority);
  const size_t query = uri.find('?', authority);
  if (path == std::string::npos || (query != std::string::npos && query < path)) {
    const size_t at = query == std::string::npos ? uri.size() : query;
    return uri.substr(0, at) + "/" + database + uri.substr(at);
  }
  const size_t end = query == std::string::npos ? uri.size() : query;
  return uri.substr(0, path + 1) + database + uri.substr(end);
}

Result<std::unique_ptr<PgTestDatabase>> PgTestDatabase::Create() {
  Result<std::string> server = PgTestServerUri();
  if (!server.ok()) return server.status();
  Result<std::unique_ptr<PgConn>> admin = PgConn::Connect(*server);
  if (!admin.ok()) return admin.status();
  // Unique across the test processes ctest runs at once (pid) and the tests of one process
  // (counter); the random part keeps a database left by a crashed process with a reused pid from
  // colliding.
  static std::atomic<int> counter{0};
  const std::string name = "berth_test_" + std::to_string(getpid()) + "_" +
                           std::to_string(counter++) + "_" +
                           std::to_string(std::random_device{}() % 1'000'000);
  // The collation of a typical production database (en-US, through ICU) rather than the test
  // cluster's "C": an ORDER BY that forgets COLLATE "C" then sorts "Zed" after "ada", unlike
  // SQLite, and the contract tests notice. A server built without ICU gets the cluster's default.
  Status created = (*admin)->Exec("CREATE DATABASE " + name +
                                  " TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' "
                                  "LOCALE 'C'");
  if (!created.ok()) BERTH_RETURN_IF_ERROR((*admin)->Exec("CREATE DATABASE " + name));
  return std::unique_ptr<PgTestDatabase>(
      new PgTestDatabase(std::move(*admin), name, PgUriWithDatabase(*server, name)));
}

PgTestDatabase::~PgTestDatabase() {
  // WITH (FORCE): a store the test leaked, or one still connected, must not keep the database.
  Status st = admin_->Exec("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
  if (!st.ok()) ADD_FAILURE() << "dropping test database " << name_ << ": " << st.message();
}

Result<std::unique_ptr<PgTestCluster>> PgTestCluster::Start() {
  std::string dir;
  Result<std::string> uri = StartCluster(&dir);
  if (!uri.ok()) return uri.status();
  return std::unique_ptr<PgTestCluster>(new PgTestCluster(dir, *uri));
}

PgTestCluster::~PgTestCluster() { (void)RunClusterScript("stop", dir_); }

Status PgTestCluster::Halt() {
  Result<std::string> out = RunClusterScript("halt", dir_);
  return out.ok() ? Status::Ok() : out.status();
}

Status PgTestCluster::Resume() {
  Result<std::string> out = RunClusterScript("resume", dir_);
  return out.ok() ? Status::Ok() : out.status();
}

}  // namespace berth::testing
