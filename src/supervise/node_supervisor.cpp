// NodeSupervisor's loop: clients and their commands, starting and ending steps, strays, leases
// and stops (node_supervisor_internal.h).
#include "supervise/node_supervisor_internal.h"

namespace berth {
namespace node_supervisor_internal {

int NodeSupervisor::Run() {
  sigset_t waited = SupervisorWaitedSignals();
  ::sigprocmask(SIG_BLOCK, &waited, nullptr);
  signal_fd_ = ::signalfd(-1, &waited, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) return 1;
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::signal(SIGPIPE, SIG_IGN);
  ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  ::fcntl(listen_fd_, F_SETFD, FD_CLOEXEC);
  self_ = std::to_string(::getpid()) + "\n";
  socket_path_ = state_dir_ + "/" + kNodeSupervisorSocket;
  struct stat st {};
  if (::stat(socket_path_.c_str(), &st) == 0) socket_ino_ = st.st_ino;
  WriteFileInPlace(state_dir_ + "/" + kNodeSupervisorPidFile, self_, 0644);
  started_ = clock_.Monotonic();
  cgroups_ = DetectCgroups();
  if (cgroups_.layout != CgroupLayout::kNone) {
    RemoveIdleRankCgroups(cgroups_, AgentCgroupName(state_dir_));
  }
  cgroup_pool_ = RankCgroupPool(cgroups_, kIdleRankCgroups);
  // A child on its way to its exec holds a pipe: a burst of starts must not use up the
  // descriptors this process may open.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    max_starting_ =
        files.rlim_cur > 18 ? std::clamp<size_t>((files.rlim_cur - 16) / 2, 1, kMaxStarting) : 1;
  }
  while (true) {
    Poll();
    Reap();
    Tick();
    StartWaiting();
    RemoveEndedCgroups(/*all=*/false);
    if (Done()) break;
  }
  RemoveEndedCgroups(/*all=*/true);
  if (cgroups_.layout != CgroupLayout::kNone) {
    RemoveIdleRankCgroups(cgroups_, AgentCgroupName(state_dir_));
  }
  ::close(listen_fd_);
  // The socket and pid file go, unless a newer node supervisor has taken their names.
  if (::stat(socket_path_.c_str(), &st) == 0 && st.st_ino == socket_ino_) {
    ::unlink(socket_path_.c_str());
  }
  std::string pid_file = state_dir_ + "/" + kNodeSupervisorPidFile;
  if (ReadFileOr(pid_file) == self_) ::unlink(pid_file.c_str());
  return 0;
}

bool NodeSupervisor::Done() {
  if (!ranks_.empty() || !waiting_.empty() || !legs_.empty() || !execs_.empty()) return false;
  if (stop_all_) return true;
  if (!clients_.empty()) return false;
  if (!claimed_ && clock_.Monotonic() - started_ < kUnclaimedMs) return false;
  // Nothing to run and no agent: leave, unless an agent is connecting right now.
  Accept();
  return clients_.empty();
}

void NodeSupervisor::Poll() {
  std::vector<pollfd> fds;
  fds.push_back({signal_fd_, POLLIN, 0});
  fds.push_back({listen_fd_, POLLIN, 0});
  for (const Client& c : clients_) fds.push_back({c.fd, POLLIN, 0});
  const size_t first_starting = fds.size();
  for (const auto& [fd, rank] : starting_) fds.push_back({fd, POLLIN, 0});
  const size_t first_terminal = fds.size();
  std::vector<RankTerminal*> terminals;
  auto add = [&](RankTerminal* t) {
    if (!t || t->master < 0) return;
    const short out = t->to_job.empty() ? 0 : POLLOUT;
    fds.push_back({t->master, static_cast<short>(POLLIN | out), 0});
    terminals.push_back(t);
  };
  for (const auto& [dir, rank] : ranks_) add(rank->terminal.get());
  for (const auto& [pid, exec] : execs_) add(exec.terminal.get());
  const size_t first_leg = fds.size();
  for (const Leg& leg : legs_) fds.push_back({leg.fd, LegEvents(leg), 0});
  ::poll(fds.data(), fds.size(), static_cast<int>(WaitMs()));
  if (fds[0].revents) TakeSignals();
  if (fds[1].revents) Accept();
  for (size_t i = first_starting; i < first_terminal; ++i) {
    if (fds[i].revents) Started(*starting_.at(fds[i].fd));
  }
  for (size_t i = first_terminal; i < first_leg; ++i) {
    if (fds[i].revents & POLLOUT) WriteToJob(*terminals[i - first_terminal]);
    if (fds[i].revents & ~POLLOUT) ReadTerminal(*terminals[i - first_terminal]);
  }
  for (size_t i = first_leg; i < fds.size(); ++i) {
    if (fds[i].revents) ServeLeg(legs_[i - first_leg], fds[i].revents);
  }
  std::erase_if(legs_, [](const Leg& leg) { return leg.fd < 0; });
  HangUpUnwatchedExecs();
  // Clients in the order they connected: a restarted agent's lines follow the old one's.
  for (size_t i = 2; i < first_starting; ++i) {
    if (fds[i].revents) ReadClient(fds[i].fd);
  }
  std::erase_if(clients_, [](const Client& c) { return c.fd < 0; });
}

int64_t NodeSupervisor::WaitMs() {
  int64_t now = clock_.Monotonic();
  int64_t wait = -1;
  auto until = [&](int64_t at) {
    if (at < 0) return;
    int64_t ms = std::max<int64_t>(1, at - now);
    wait = wait < 0 ? ms : std::min(wait, ms);
  };
  for (const auto& [dir, rank] : ranks_) {
    until(rank->kill_at);
    until(rank->warn_at);
    if (!rank->plan.lease_file.empty()) until(next_lease_check_);
  }
  if (ranks_.empty() && clients_.empty()) until(started_ + kUnclaimedMs);
  if (!waiting_.empty() && starting_.size() < max_starting_) wait = 0;
  if (!ended_cgroups_.empty()) until(now + 50);  // removals left for later
  return wait;
}

void NodeSupervisor::TakeSignals() {
  signalfd_siginfo info;
  while (::read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
    if (info.ssi_signo != SIGCHLD) stop_all_ = true;
  }
}

void NodeSupervisor::Accept() {
  while (true) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    // Only the agent's user (or root) may give this process work.
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        (cred.uid != ::geteuid() && cred.uid != 0)) {
      ::close(fd);
      continue;
    }
    // "steps=pull": it runs RunPlan::pull (agent/launcher.cpp asks).
    std::string hello = "berth-node-supervisor " + std::to_string(::getpid()) + " steps=pull\n";
    if (::write(fd, hello.data(), hello.size()) != static_cast<ssize_t>(hello.size())) {
      ::close(fd);
      continue;
    }
    claimed_ = true;
    clients_.push_back({fd, {}});
  }
}

void NodeSupervisor::ReadClient(int fd) {
  auto it =
      std::find_if(clients_.begin(), clients_.end(), [&](const Client& c) { return c.fd == fd; });
  if (it == clients_.end()) return;
  char buf[16384];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) {  // the agent is gone; its ranks are not
      ::close(fd);
      it->fd = -1;
      break;
    }
    it->buffer.append(buf, static_cast<size_t>(n));
  }
  size_t at = 0;
  for (size_t nl; (nl = it->buffer.find('\n', at)) != std::string::npos; at = nl + 1) {
    std::string_view line = std::string_view(it->buffer).substr(at, nl - at);
    const bool attach = line.substr(0, 7) == "attach ";
    if (attach || line.substr(0, 5) == "exec ") {  // the connection becomes a terminal leg
      std::string args(line.substr(attach ? 7 : 5));
      std::string rest = it->buffer.substr(nl + 1);
      const int leg_fd = it->fd;
      it->fd = -1;  // not closed: the leg has it
      if (attach) {
        Attach(leg_fd, args, std::move(rest));
      } else {
        Exec(leg_fd, args, std::move(rest));
      }
      return;
    }
    HandleLine(line);
  }
  it->buffer.erase(0, at);
}

void NodeSupervisor::HandleLine(std::string_view line) {
  if (line.substr(0, 6) == "start ") {
    // In the order they came: a burst waits while max_starting_ children are on their way to
    // their exec (each holds a pipe).
    waiting_.emplace_back(line.substr(6));
    StartWaiting();
  } else if (line.substr(0, 5) == "stop ") {
    std::string dir(line.substr(5));
    auto it = ranks_.find(dir);
    if (it != ranks_.end()) it->second->stop = true;
    if (std::find(waiting_.begin(), waiting_.end(), dir) != waiting_.end()) {
      stopped_waiting_.insert(dir);
    }
  }
}

void NodeSupervisor::StartWaiting() {
  while (!waiting_.empty() && starting_.size() < max_starting_) {
    std::string dir = std::move(waiting_.front());
    waiting_.pop_front();
    Start(dir);
    if (stopped_waiting_.erase(dir) > 0) {
      auto it = ranks_.find(dir);
      if (it != ranks_.end()) it->second->stop = true;
    }
  }
}

void NodeSupervisor::Start(const std::string& dir) {
  if (dir.empty() || ranks_.count(dir)) return;  // a start sent again
  auto opened = OpenRank(dir, self_);
  if (!opened) return;
  auto owned = std::make_unique<Rank>();
  Rank& rank = *owned;
  rank.dir = dir;
  rank.tag = TagOf(opened->plan.run_env);
  rank.plan = std::move(opened->plan);
  // Not held open while the rank runs: each step opens it again (a node runs more ranks at once
  // than a process may hold files open by default).
  ::close(opened->log_fd);
  ranks_.emplace(dir, std::move(owned));
  if (!rank.plan.cgroup.empty()) {
    // A rank whose limits cannot be set does not run without them. (One left by an earlier node
    // supervisor killed with its ranks was removed when this one started, if empty.)
    auto made = cgroup_pool_.Take(rank.plan.cgroup, rank.plan.limits);
    if (!made.ok()) {
      Finish(rank,
             {"exited", 127, "launch", "cannot set the job's limits: " + made.status().message()});
      return;
    }
    rank.cgroup = std::move(*made);
  }
  LeaseVerdict lease = CheckLeaseFile(rank.plan.lease_file, clock_.Monotonic());
  rank.stop = stop_all_ || lease.term;
  rank.kill_now = lease.kill;
  if (!rank.plan.pull.empty() && !rank.stop) {
    AppendEvent(dir, {"pulling"});
    StartStep(rank, Rank::Step::kPull);
  } else {
    BeginSetup(rank);
  }
}

void NodeSupervisor::BeginSetup(Rank& rank) {
  if (!rank.plan.setup.empty() && !rank.stop) {
    AppendEvent(rank.dir, {"setting_up"});
    StartStep(rank, Rank::Step::kSetup);
  } else {
    BeginRun(rank);
  }
}

void NodeSupervisor::BeginRun(Rank& rank) {
  if (rank.stop) {
    Finish(rank, {"exited", 143, "run", "stopped before start"});
    return;
  }
  AppendEvent(rank.dir, {"running"});
  if (rank.plan.run.empty()) {
    Finish(rank, {"exited", 0, "run", ""});
    return;
  }
  StartStep(rank, Rank::Step::kRun);
}

void NodeSupervisor::StartStep(Rank& rank, Rank::Step step) {
  const bool setup = step != Rank::Step::kRun;  // the pull runs with setup's environment
  rank.step = step;
  rank.step_over = false;
  rank.cgroup_seen_empty = false;
  rank.exit_code = 0;
  rank.error.clear();
  rank.stopped = false;
  rank.kill_at = -1;
  rank.warn_at =
      !setup && rank.plan.warn_signal > 0 ? clock_.Monotonic() + rank.plan.warn_after_ms : -1;
  // Not waited for: the child execs bash on the other CPU while this process goes on with the
  // next rank. Started() learns how it went.
  const std::string log = rank.dir + "/output.log";
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (log_fd < 0) {
    rank.error = "cannot open " + log + ": " + strerror(errno);
    rank.exit_code = 127;
    rank.step_over = true;
    return;
  }
  const std::string& script = step == Rank::Step::kPull    ? rank.plan.pull
                              : step == Rank::Step::kSetup ? rank.plan.setup
                                                           : rank.plan.run;
  const char* file = step == Rank::Step::kPull    ? "/pull.sh"
                     : step == Rank::Step::kSetup ? "/setup.sh"
                                                  : "/run.sh";
  int tty_fd = -1;
  if (step == Rank::Step::kRun && rank.plan.tty) {
    auto pty = OpenPty(rank.plan.tty->rows, rank.plan.tty->cols,
                       rank.plan.run_as ? static_cast<int64_t>(rank.plan.run_as->uid) : -1);
    if (!pty.ok()) {
      ::close(log_fd);
      rank.error = "cannot open the job's terminal: " + pty.status().message();
      rank.exit_code = 127;
      rank.step_over = true;
      return;
    }
    tty_fd = pty->slave;
    rank.terminal = std::make_shared<RankTerminal>();
    rank.terminal->master = pty->master;
    rank.terminal->log_fd = ::dup(log_fd);
  }
  rank.starting = std::make_unique<StartingStep>(
      script, rank.dir + file, rank.plan.workdir, setup ? rank.plan.setup_env : rank.plan.run_env,
      rank.plan.run_as, log_fd, rank.cgroup ? rank.cgroup->Entry() : CgroupEntry{}, tty_fd);
  ::close(log_fd);  // the child has its own (its file table was copied at its start)
  if (tty_fd >= 0) ::close(tty_fd);  // likewise: once the job's side closes, the master reads EIO
  const pid_t pid = rank.starting->pid();
  if (pid < 0) {
    Started(rank);
    rank.step_over = true;
    return;
  }
  starting_[rank.starting->fd()] = &rank;
  rank.main = pid;
  rank.groups.insert(pid);
  mains_[pid] = &rank;
}

void NodeSupervisor::Started(Rank& rank) {
  if (!rank.starting) return;
  starting_.erase(rank.starting->fd());
  rank.error = rank.starting->Wait();
  if (!rank.error.empty()) rank.exit_code = 127;
  rank.starting.reset();
}

void NodeSupervisor::Reap() {
  int status = 0;
  pid_t pid;
  rusage used{};
  while ((pid = ::wait4(-1, &status, WNOHANG, &used)) > 0) {
    // What it used (with its own reaped children's) counts for its rank, where known.
    auto it = mains_.find(pid);
    Rank* owner = it != mains_.end() ? it->second : nullptr;
    if (auto stray = stray_owners_.find(pid); stray != stray_owners_.end()) {
      // (A step's bash or a command run into a rank is counted as such, whatever a stale entry
      // of a reused pid says.)
      if (!owner && !execs_.count(pid)) {
        owner = ranks_.count(stray->second) ? ranks_.at(stray->second).get() : nullptr;
      }
      stray_owners_.erase(stray);
    }
    if (owner) {
      owner->cpu_us += (used.ru_utime.tv_sec + used.ru_stime.tv_sec) * 1'000'000LL +
                       used.ru_utime.tv_usec + used.ru_stime.tv_usec;
      owner->max_rss_kib = std::max<int64_t>(owner->max_rss_kib, used.ru_maxrss);
    }
    if (auto exec = execs_.find(pid); exec != execs_.end()) {
      if (auto r = ranks_.find(exec->second.dir); r != ranks_.end()) {
        r->second->cpu_us += (used.ru_utime.tv_sec + used.ru_stime.tv_sec) * 1'000'000LL +
                             used.ru_utime.tv_usec + used.ru_stime.tv_usec;
      }
      ExecDone(pid, WIFEXITED(status)     ? WEXITSTATUS(status)
                    : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                          : 1);
      continue;
    }
    if (it == mains_.end()) continue;  // a stray of some rank, reaped
    Rank& rank = *it->second;
    mains_.erase(it);
    rank.main = 0;
    rank.step_over = true;
    if (WIFEXITED(status)) {
      rank.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      rank.exit_code = 128 + WTERMSIG(status);
    }
  }
}

std::vector<std::pair<pid_t, Rank*>> NodeSupervisor::Strays() {
  std::vector<std::pair<pid_t, Rank*>> out;
  std::map<pid_t, Rank*> in_cgroup;  // read once: every rank's processes, where it has a cgroup
  bool cgroups_read = false;
  for (pid_t child : ChildrenOf(::getpid())) {
    if (mains_.count(child)) continue;
    Rank* owner = nullptr;
    pid_t group = ProcessGroupOf(child);
    for (const auto& [dir, rank] : ranks_) {
      if (rank->groups.count(group)) owner = rank.get();
    }
    if (!owner) {
      // (a container's conmon: its own session, an environment podman chose, the rank's
      // cgroup; it must not be taken for a leftover of whichever rank ends next)
      if (!cgroups_read) {
        cgroups_read = true;
        for (const auto& [dir, rank] : ranks_) {
          if (!rank->cgroup) continue;
          for (pid_t pid : rank->cgroup->Pids()) in_cgroup[pid] = rank.get();
        }
      }
      if (auto it = in_cgroup.find(child); it != in_cgroup.end()) owner = it->second;
    }
    if (!owner) {
      // A tag says which rank, but anyone can write one: only a process of the rank's own user
      // is taken at its word.
      const std::string tag = TagOfProcess(child);
      const std::optional<uid_t> real_uid =
          tag.empty() ? std::nullopt : RealUidOf(child);  // (read only when there is a tag)
      for (const auto& [dir, rank] : ranks_) {
        const uid_t uid = rank->plan.run_as ? rank->plan.run_as->uid : ::geteuid();
        if (!tag.empty() && rank->tag == tag && real_uid == uid) owner = rank.get();
      }
    }
    if (owner) stray_owners_[child] = owner->dir;  // its CPU time counts for it when reaped
    out.emplace_back(child, owner);
  }
  return out;
}

bool NodeSupervisor::ContainedByItsCgroup(const Rank& rank) {
  const uid_t uid = rank.plan.run_as ? rank.plan.run_as->uid : ::geteuid();
  return rank.cgroup && !rank.starting && uid != 0;
}

void NodeSupervisor::SignalRank(Rank& rank, int sig, const std::set<pid_t>& strays) {
  std::set<pid_t> roots = strays;
  if (rank.main > 0) roots.insert(rank.main);
  if (rank.cgroup && sig == SIGKILL) rank.cgroup->Kill();
  if (rank.cgroup) roots.merge(rank.cgroup->Pids());
  SignalProcesses(rank.groups, roots, sig);
}

void NodeSupervisor::Tick() {
  int64_t now = clock_.Monotonic();
  if (now >= next_lease_check_) {
    next_lease_check_ = now + kLeaseCheckMs;
    std::map<std::string, LeaseVerdict> leases;
    for (auto& [dir, rank] : ranks_) {
      const std::string& file = rank->plan.lease_file;
      if (file.empty()) continue;
      auto it = leases.find(file);
      if (it == leases.end()) it = leases.emplace(file, CheckLeaseFile(file, now)).first;
      rank->stop = rank->stop || it->second.term;
      rank->kill_now = rank->kill_now || it->second.kill;
    }
  }
  // The children that are no step's bash say what an ended rank left behind, unless its cgroup
  // does: a process of another user cannot leave its cgroup, so such a rank in one is over once
  // the cgroup is empty, and the children need not be read (a /proc read, and a look-up of each,
  // every round). Root's can (rootful podman moves a container's monitor out of it on v1).
  bool strays_wanted = false;
  for (auto& [dir, rank] : ranks_) {
    if (stop_all_) rank->stop = true;
    strays_wanted = strays_wanted || (rank->step_over && !ContainedByItsCgroup(*rank));
  }
  std::vector<std::pair<pid_t, Rank*>> strays;
  if (strays_wanted) strays = Strays();
  std::vector<Rank*> done;
  for (auto& [dir, owned] : ranks_) {
    Rank& rank = *owned;
    std::set<pid_t> own;
    for (const auto& [pid, owner] : strays) {
      // A stray that shed its group and environment is counted with every rank that ends.
      if (owner == &rank || (owner == nullptr && rank.step_over)) own.insert(pid);
    }
    bool cgroup_empty = false;
    if (rank.step_over && rank.cgroup && !rank.starting) {
      // Whatever of it is left in its cgroup is its own, wherever it was re-parented (and its
      // CPU time counts for the rank if it is reaped here).
      std::optional<std::set<pid_t>> read = rank.cgroup->ReadPids();
      std::set<pid_t> left = read.value_or(std::set<pid_t>{});
      cgroup_empty = read && left.empty();  // (not when it could not be read)
      for (pid_t pid : left) stray_owners_.try_emplace(pid, rank.dir);
      own.merge(left);
    }
    if (rank.step_over && own.empty()) {
      rank.cgroup_seen_empty = cgroup_empty;
      done.push_back(&rank);
      continue;
    }
    if (rank.main > 0 && rank.warn_at >= 0 && !rank.stop && now >= rank.warn_at) {
      SignalRank(rank, rank.plan.warn_signal, own);  // the warning before its time limit
      rank.warn_at = -1;
    }
    if (rank.stop || rank.step_over) rank.warn_at = -1;  // too late to warn
    if (rank.stop && !rank.stopped) {
      rank.stopped = true;
      SignalRank(rank, SIGTERM, own);
      rank.kill_at = now + rank.plan.kill_grace_ms;
    }
    if (rank.step_over && rank.kill_at < 0) {
      // The script is over; whatever it left running (background jobs, daemons) goes too.
      SignalRank(rank, SIGTERM, own);
      rank.kill_at = now + std::min<int64_t>(rank.plan.kill_grace_ms, 2000);
    }
    if (rank.kill_now && rank.kill_at > now) rank.kill_at = now;
    if (rank.kill_at >= 0 && now >= rank.kill_at) {
      SignalRank(rank, SIGKILL, own);
      rank.kill_at = now + kKillSweepMs;  // a fork racing the kill is caught next round
    }
  }
  // A leftover that exited after this round's reaping is gone from its cgroup but not yet
  // reaped: reaped now, its CPU time still counts for its rank.
  if (!done.empty()) Reap();
  for (Rank* rank : done) {
    Started(*rank);  // its child is gone: whether it failed before its exec is known
    StepDone(*rank);
  }
}

void NodeSupervisor::RemoveEndedCgroups(bool all) {
  const bool idle = waiting_.empty() && starting_.empty();
  size_t budget = all || idle ? ended_cgroups_.size() : ended_cgroups_.size() > 256 ? 16 : 0;
  while (budget-- > 0 && !ended_cgroups_.empty()) {
    auto [cgroup, tries] = std::move(ended_cgroups_.front());
    ended_cgroups_.pop_front();
    // A large process takes a while to be torn down: tried for about a minute (every 50 ms).
    if (!cgroup.Remove() && tries < 1200 && !all) {
      ended_cgroups_.push_back({std::move(cgroup), tries + 1});
    }
  }
}

void NodeSupervisor::StepDone(Rank& rank) {
  if (rank.terminal) ReadTerminal(*rank.terminal);  // what it printed last
  if (!rank.error.empty()) {
    Finish(rank, {"exited", rank.exit_code, "launch", rank.error});
  } else if (rank.step == Rank::Step::kPull && (rank.exit_code != 0 || rank.stopped)) {
    Finish(rank, {"exited", rank.exit_code, "pull",
                  rank.stopped ? "stopped"
                               : PullFailureReason(rank.dir + "/output.log", rank.exit_code)});
  } else if (rank.step == Rank::Step::kSetup && (rank.exit_code != 0 || rank.stopped)) {
    Finish(rank, {"exited", rank.exit_code, "setup",
                  rank.stopped ? "stopped" : ExitReason(rank.dir + "/output.log", rank.exit_code)});
  } else if (rank.step != Rank::Step::kRun) {
    LeaseVerdict lease = CheckLeaseFile(rank.plan.lease_file, clock_.Monotonic());
    rank.stop = rank.stop || lease.term || stop_all_;
    if (rank.step == Rank::Step::kPull) {
      AppendEvent(rank.dir, {"pulling", 0, "", PulledImage(rank.dir + "/output.log")});
      BeginSetup(rank);
    } else {
      BeginRun(rank);
    }
  } else {
    Finish(rank, {"exited", rank.exit_code, "run",
                  rank.stopped ? "stopped" : ExitReason(rank.dir + "/output.log", rank.exit_code)});
  }
}

void NodeSupervisor::Finish(Rank& rank, SupervisorEvent end) {
  if (rank.terminal) {  // legs still attached send the rest and this end
    RankTerminal& t = *rank.terminal;
    t.ended = true;
    t.exit_code = end.exit_code;
    t.reason = end.reason;
    t.to_job.clear();
    if (t.master >= 0) ::close(t.master);
    t.master = -1;
    rank.terminal.reset();
    for (Leg& leg : legs_) {
      if (leg.fd >= 0 && leg.terminal.get() == &t) WriteLeg(leg);
    }
  }
  int64_t peak = -1;
  if (rank.cgroup) {
    peak = EndRankCgroup(*rank.cgroup, rank.plan.limits, end, rank.cgroup_seen_empty)
               .peak_memory_bytes;
    if (auto kept_not = cgroup_pool_.Keep(std::move(*rank.cgroup), rank.cgroup_seen_empty)) {
      ended_cgroups_.push_back({std::move(*kept_not), 0});
    }
  }
  AppendEnd(rank.dir, UsageEvent(peak, rank.max_rss_kib, rank.cpu_us), end);
  std::erase_if(stray_owners_, [&](const auto& entry) { return entry.second == rank.dir; });
  ranks_.erase(rank.dir);  // `rank` is gone from here on
}

}  // namespace node_supervisor_internal

int NodeSupervisorMain(int listen_fd, const std::string& state_dir, const Clock& clock) {
  node_supervisor_internal::NodeSupervisor supervisor(listen_fd, state_dir, clock);
  return supervisor.Run();
}

}  // namespace berth
