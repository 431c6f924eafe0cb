// SessionRelays: terminals, execs and port forwards relayed between the server and a rank
// (session_relays.h).
#include "agent/session_relays.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/file_mounts.h"
#include "agent/port_owner.h"
#include "agent/session_pump.h"
#include "common/files.h"
#include "common/json_util.h"
#include "common/log.h"
#include "common/strings.h"
#include "common/tree_removal.h"
#include "net/ws_stream.h"
#include "protocol/job_env.h"
#include "spec/job_spec.h"
#include "supervise/cpu_set.h"
#include "supervise/supervisor.h"
#include "supervise/terminal.h"

namespace berth {

std::string RankKey(const proto::AttemptRank& id) {
  return fmt::format("{}-{}-{}", id.job, id.attempt, id.rank);
}

SessionRelays::SessionRelays(Node node, Launcher& launcher, AgentConnection& connection,
                             const std::atomic<bool>& stop, AgentSide side)
    : node_(std::move(node)),
      launcher_(launcher),
      connection_(connection),
      stop_(stop),
      side_(std::move(side)) {}

void SessionRelays::Terminal(const proto::SessionMessage& m) {
  Start(m.id(), [this, m] {
    RelayLeg(m.sid, m.id(), [&] {
      return launcher_.OpenTerminalLeg(node_.state_dir + "/jobs/" + RankKey(m.id()), m.offset);
    });
  });
}

void SessionRelays::Exec(const proto::ExecMessage& m) {
  Start(m.id(), [this, m] { RelayLeg(m.sid, m.id(), [&] { return OpenExecLeg(m); }); });
}

void SessionRelays::Forward(const proto::ForwardMessage& m) {
  Start(m.id(), [this, m] { RunForward(m); });
}

void SessionRelays::WaitForAll(int64_t ms) {
  MutexLock lock(mu_);
  for (int64_t waited = 0; waited < ms && running_ > 0; waited += 100) done_cv_.WaitFor(mu_, 100);
}

void SessionRelays::Start(const proto::AttemptRank& id, std::function<void()> relay) {
  {
    MutexLock lock(mu_);
    if (running_ >= kMaxSessions) {
      LogWarn("refusing a session to job {} rank {}: {} sessions are open", id.job, id.rank,
              running_);
      return;
    }
    ++running_;
  }
  std::thread([this, relay = std::move(relay)] {
    relay();
    MutexLock lock(mu_);
    --running_;
    done_cv_.SignalAll();
  }).detach();
}

Result<int> SessionRelays::OpenExecLeg(const proto::ExecMessage& m) {
  if (!side_.runs(RankKey(m.id()))) return Status::NotFound("it does not run here");
  const std::string dir = node_.state_dir + "/jobs/" + RankKey(m.id());
  auto plan = ReadRunPlan(dir);
  if (!plan.ok()) return plan.status();
  if (plan->pull.empty()) {
    return launcher_.OpenExecLeg(dir, m.command, m.tty, m.rows, m.cols, /*container=*/false);
  }
  // A rank in a container: the command enters it (podman exec, as the rank's user).
  const uid_t uid = plan->run_as ? plan->run_as->uid : ::geteuid();
  return launcher_.OpenExecLeg(
      dir,
      ExecIntoContainerScript(*node_.containers, "berth-" + RankKey(m.id()), uid, m.command, m.tty),
      m.tty, m.rows, m.cols, /*container=*/true);
}

void SessionRelays::RelayLeg(const std::string& sid, const proto::AttemptRank& id,
                             const std::function<Result<int>()>& open_leg) {
  const std::string session = side_.session();
  auto ws = connection_.OpenSession(node_.name, session, sid);
  if (!ws.ok()) {
    LogWarn("session to job {} rank {}: {}", id.job, id.rank, ws.status().message());
    return;
  }
  auto leg = open_leg();
  if (!leg.ok()) {
    std::string error(1, static_cast<char>(TermChannel::kControl));
    error += SerializeJson(
        json::object{{"error", fmt::format("job {} rank {} on {}: {}", id.job, id.rank, node_.name,
                                           leg.status().message())}});
    (*ws)->Send(error);
    (void)(*ws)->CloseAndWait(4004, "no terminal", 2'000);
    return;
  }
  Status relayed = RelaySession(**ws, *leg, stop_);
  ::close(*leg);
  if (!relayed.ok()) {
    LogWarn("session to job {} rank {} ended: {}", id.job, id.rank, relayed.message());
  }
}

void SessionRelays::RunForward(const proto::ForwardMessage& m) {
  const std::string session = side_.session();
  auto ws = connection_.OpenSession(node_.name, session, m.sid);
  if (!ws.ok()) {
    LogWarn("port forward to job {} rank {}: {}", m.job, m.rank, ws.status().message());
    return;
  }
  auto fd = ConnectToRankPort(m);
  if (!fd.ok()) {
    // The reason travels in the close frame, whose reason holds at most 123 bytes.
    (void)(*ws)->CloseAndWait(net::kStreamRefusedCode, fd.status().message().substr(0, 120), 2'000);
    return;
  }
  Status relayed = net::RelayStream(**ws, *fd, stop_);
  ::close(*fd);
  if (!relayed.ok()) {
    LogInfo("port forward to job {} rank {} port {} ended: {}", m.job, m.rank, m.port,
            relayed.message());
  }
}

Result<int> SessionRelays::ConnectToRankPort(const proto::ForwardMessage& m) {
  const std::string key = RankKey(m.id());
  if (!side_.runs(key)) {
    return Status::NotFound(
        fmt::format("job {} rank {} does not run on {}", m.job, m.rank, node_.name));
  }
  auto plan = ReadRunPlan(node_.state_dir + "/jobs/" + key);
  if (!plan.ok()) return plan.status();
  const uid_t uid = plan->run_as ? plan->run_as->uid : ::geteuid();
  std::optional<std::set<pid_t>> pids;
  if (!plan->cgroup.empty()) pids = RankCgroupPids(*node_.cgroups, plan->cgroup);
  auto address = FindRankListener("/proc", m.port, uid, pids ? &*pids : nullptr);
  if (!address.ok()) return address.status();
  const int fd = ::socket(address->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(std::string("socket: ") + std::strerror(errno));
  const socklen_t len = address->ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&*address), len) != 0) {
    Status failed = Status::Unavailable(
        fmt::format("cannot connect to port {}: {}", m.port, std::strerror(errno)));
    ::close(fd);
    return failed;
  }
  return fd;
}

}  // namespace berth
