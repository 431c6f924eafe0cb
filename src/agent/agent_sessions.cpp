// The agent's interactive sessions (agent.h): a rank's terminal, a command run in a rank's
// namespaces (exec), and ports forwarded to a rank, each relayed between the server and the rank.
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

#include "agent/agent.h"
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

void Agent::StartSession(const proto::AttemptRank& id, std::function<void()> relay) {
  {
    MutexLock lock(mu_);
    if (sessions_running_ >= kMaxSessions) {
      LogWarn("refusing a session to job {} rank {}: {} sessions are open", id.job, id.rank,
              sessions_running_);
      return;
    }
    ++sessions_running_;
  }
  std::thread([this, relay = std::move(relay)] {
    relay();
    MutexLock lock(mu_);
    --sessions_running_;
    stop_cv_.SignalAll();
  }).detach();
}

void Agent::RunSession(const proto::SessionMessage& m) {
  RelayLeg(m.sid, m.id(), [&] {
    return launcher_.OpenTerminalLeg(options_.state_dir + "/jobs/" + KeyOf(m.id()), m.offset);
  });
}

void Agent::RunExec(const proto::ExecMessage& m) {
  RelayLeg(m.sid, m.id(), [&]() -> Result<int> {
    {
      MutexLock lock(mu_);
      auto it = jobs_.find(KeyOf(m.id()));
      if (it == jobs_.end() || it->second.exited) {
        return Status::NotFound("it does not run here");
      }
    }
    const std::string dir = options_.state_dir + "/jobs/" + KeyOf(m.id());
    auto plan = ReadRunPlan(dir);
    if (!plan.ok()) return plan.status();
    if (plan->pull.empty()) {
      return launcher_.OpenExecLeg(dir, m.command, m.tty, m.rows, m.cols, /*container=*/false);
    }
    // A rank in a container: the command enters it (podman exec, as the rank's user).
    const uid_t uid = plan->run_as ? plan->run_as->uid : ::geteuid();
    return launcher_.OpenExecLeg(
        dir, ExecIntoContainerScript(containers_, "berth-" + KeyOf(m.id()), uid, m.command, m.tty),
        m.tty, m.rows, m.cols, /*container=*/true);
  });
}

void Agent::RelayLeg(const std::string& sid, const proto::AttemptRank& id,
                     const std::function<Result<int>()>& open_leg) {
  std::string session;
  {
    MutexLock lock(mu_);
    session = session_;
  }
  auto ws = connection_.OpenSession(options_.name, session, sid);
  if (!ws.ok()) {
    LogWarn("session to job {} rank {}: {}", id.job, id.rank, ws.status().message());
    return;
  }
  auto leg = open_leg();
  if (!leg.ok()) {
    std::string error(1, static_cast<char>(TermChannel::kControl));
    error += SerializeJson(
        json::object{{"error", fmt::format("job {} rank {} on {}: {}", id.job, id.rank,
                                           options_.name, leg.status().message())}});
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

void Agent::RunForward(const proto::ForwardMessage& m) {
  std::string session;
  {
    MutexLock lock(mu_);
    session = session_;
  }
  auto ws = connection_.OpenSession(options_.name, session, m.sid);
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

Result<int> Agent::ConnectToRankPort(const proto::ForwardMessage& m) {
  const std::string key = KeyOf(m.id());
  {
    MutexLock lock(mu_);
    auto it = jobs_.find(key);
    if (it == jobs_.end() || it->second.exited) {
      return Status::NotFound(
          fmt::format("job {} rank {} does not run on {}", m.job, m.rank, options_.name));
    }
  }
  auto plan = ReadRunPlan(options_.state_dir + "/jobs/" + key);
  if (!plan.ok()) return plan.status();
  const uid_t uid = plan->run_as ? plan->run_as->uid : ::geteuid();
  std::optional<std::set<pid_t>> pids;
  if (!plan->cgroup.empty()) pids = RankCgroupPids(cgroups_, plan->cgroup);
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
