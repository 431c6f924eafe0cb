// NodeSupervisor's terminal legs (`attach`) and the commands run into live ranks (`exec`)
// (node_supervisor_internal.h, supervise/node_supervisor.h).
#include "supervise/node_supervisor_internal.h"

namespace berth::node_supervisor_internal {

void NodeSupervisor::Attach(int fd, const std::string& args, std::string received) {
  const size_t space = args.rfind(' ');
  const std::string dir = space == std::string::npos ? args : args.substr(0, space);
  int64_t offset = 0;
  if (space != std::string::npos) {
    const std::string number = args.substr(space + 1);
    std::from_chars(number.data(), number.data() + number.size(), offset);
    offset = std::max<int64_t>(0, offset);
  }
  auto it = ranks_.find(dir);
  if (it == ranks_.end() || !it->second->terminal || it->second->terminal->ended) {
    return Refuse(fd, "no interactive rank runs in " + dir);
  }
  AddLeg(fd, it->second->terminal, std::move(received), offset);
}

void NodeSupervisor::AddLeg(int fd, std::shared_ptr<RankTerminal> terminal, std::string received,
                            int64_t offset) {
  Leg leg;
  leg.fd = fd;
  leg.terminal = std::move(terminal);
  leg.in = std::move(received);
  leg.sent = offset;
  legs_.push_back(std::move(leg));
  ReadLegFrames(legs_.back());
}

void NodeSupervisor::Refuse(int fd, const std::string& why) {
  std::string refusal;
  AppendTermFrame(&refusal, TermChannel::kControl, SerializeJson(json::object{{"error", why}}));
  (void)!::send(fd, refusal.data(), refusal.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(fd);
}

void NodeSupervisor::Exec(int fd, const std::string& args, std::string received) {
  auto request = ParseJson(args, "exec");
  if (!request.ok() || !request->is_object()) return Refuse(fd, "exec: not a JSON object");
  const json::object& o = request->as_object();
  auto dir = GetString(o, "dir");
  auto command = GetString(o, "command");
  const json::value* tty = o.if_contains("tty");
  auto rows = GetInt(o, "rows", 24), cols = GetInt(o, "cols", 80);
  if (!dir.ok() || !command.ok() || command->empty() || (tty && !tty->is_bool()) || !rows.ok() ||
      !cols.ok()) {
    return Refuse(fd, "exec: needs dir, command, and tty, rows and cols when given");
  }
  auto it = ranks_.find(*dir);
  if (it == ranks_.end() || it->second->step != Rank::Step::kRun || it->second->main <= 0 ||
      it->second->stop) {
    return Refuse(fd, "the job's rank is not running here (it has not started, or is ending)");
  }
  Rank& rank = *it->second;
  // A container rank's command must enter its container itself (the agent's podman exec), or
  // it would run on the node's system.
  const json::value* container = o.if_contains("container");
  if (!rank.plan.pull.empty() && !(container && container->is_bool() && container->as_bool())) {
    return Refuse(fd, "the job runs in a container image: its command must enter it");
  }
  const bool with_tty = tty && tty->as_bool();
  auto terminal = std::make_shared<RankTerminal>();
  int child_fd = -1;  // the terminal's (or the socket's) other side, for the child
  if (with_tty) {
    auto pty = OpenPty(static_cast<int>(std::clamp<int64_t>(*rows, 1, 1000)),
                       static_cast<int>(std::clamp<int64_t>(*cols, 1, 1000)),
                       rank.plan.run_as ? static_cast<int64_t>(rank.plan.run_as->uid) : -1);
    if (!pty.ok()) return Refuse(fd, "cannot open a terminal: " + pty.status().message());
    terminal->master = pty->master;
    child_fd = pty->slave;
  } else {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
      return Refuse(fd, std::string("cannot make a socket: ") + strerror(errno));
    }
    ::fcntl(pair[0], F_SETFL, ::fcntl(pair[0], F_GETFL) | O_NONBLOCK);
    ::shutdown(pair[0], SHUT_WR);  // its stdin is empty
    terminal->master = pair[0];
    terminal->input = false;
    child_fd = pair[1];
  }
  const CgroupEntry entry = rank.cgroup ? rank.cgroup->Entry() : CgroupEntry{};
  pid_t pid = -1;
  std::string error;
  {
    StartingStep step(*command, rank.dir + "/exec.sh", rank.plan.workdir, rank.plan.run_env,
                      rank.plan.run_as, child_fd, entry, with_tty ? child_fd : -1);
    pid = step.pid();
    error = step.Wait();  // a moment: until its exec of bash
  }
  ::close(child_fd);
  if (!error.empty()) return Refuse(fd, "cannot run the command: " + error);
  // Stopped with its rank, and its end waits for it, as for any process of the rank.
  rank.groups.insert(pid);
  terminal->group = pid;
  execs_[pid] = RankExec{rank.dir, terminal};
  AddLeg(fd, std::move(terminal), std::move(received), 0);
}

void NodeSupervisor::ExecDone(pid_t pid, int exit_code) {
  auto it = execs_.find(pid);
  if (it == execs_.end()) return;
  RankTerminal& t = *it->second.terminal;
  ReadTerminal(t);
  t.ended = true;
  t.exit_code = exit_code;
  t.to_job.clear();
  if (t.master >= 0) ::close(t.master);
  t.master = -1;
  for (Leg& leg : legs_) {
    if (leg.fd >= 0 && leg.terminal.get() == &t) WriteLeg(leg);
  }
  execs_.erase(it);
}

void NodeSupervisor::HangUpUnwatchedExecs() {
  for (auto& entry : execs_) {
    RankExec& exec = entry.second;
    if (exec.hung_up) continue;
    const bool watched = std::any_of(legs_.begin(), legs_.end(), [&exec](const Leg& leg) {
      return leg.fd >= 0 && leg.terminal == exec.terminal;
    });
    if (watched) continue;
    exec.hung_up = true;
    ::kill(-entry.first, SIGHUP);
    ::kill(-entry.first, SIGTERM);
  }
}

bool NodeSupervisor::LegHasOutput(const Leg& leg) {
  return leg.out_pos < leg.out.size() || !leg.announced ||
         leg.sent < leg.terminal->scrollback.total() || (leg.terminal->ended && !leg.exit_sent);
}

short NodeSupervisor::LegEvents(const Leg& leg) {
  short events = LegHasOutput(leg) ? POLLOUT : 0;
  // What a leg types waits while the terminal has not taken the last of it.
  if (!leg.terminal->ended && leg.terminal->to_job.size() < kMaxTermFrame) events |= POLLIN;
  return events;
}

void NodeSupervisor::ServeLeg(Leg& leg, short revents) {
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    char buf[16384];
    for (size_t total = 0; total < (256 << 10) && leg.fd >= 0;) {
      ssize_t n = ::recv(leg.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        CloseLeg(leg);  // the client went away; the job goes on
        return;
      }
      leg.in.append(buf, static_cast<size_t>(n));
      total += static_cast<size_t>(n);
    }
    ReadLegFrames(leg);
  }
  if (leg.fd >= 0) WriteLeg(leg);
}

void NodeSupervisor::ReadLegFrames(Leg& leg) {
  RankTerminal& t = *leg.terminal;
  size_t at = 0;
  while (leg.fd >= 0) {
    size_t used = 0;
    auto frame = TakeTermFrame(std::string_view(leg.in).substr(at), &used);
    if (!frame.ok()) {
      CloseLeg(leg);
      return;
    }
    if (!*frame) break;
    at += used;
    if ((*frame)->channel == TermChannel::kStdin) {
      if (!t.ended && t.input) t.to_job += (*frame)->payload;
    } else if ((*frame)->channel == TermChannel::kControl && t.master >= 0) {
      auto control = ParseJson((*frame)->payload, "terminal control");
      if (!control.ok() || !control->is_object()) continue;
      const json::object& o = control->as_object();
      if (const json::value* size = o.if_contains("resize");
          size && size->is_array() && size->as_array().size() == 2) {
        auto rows = AsInt(size->as_array()[0]), cols = AsInt(size->as_array()[1]);
        if (rows && cols)
          (void)ResizePty(t.master, static_cast<int>(*rows), static_cast<int>(*cols));
      }
      if (auto sig = GetInt(o, "signal", 0); sig.ok() && *sig > 0 && *sig < 65) {
        pid_t group = t.input ? ::tcgetpgrp(t.master) : -1;
        if (group <= 0) group = t.group;
        if (group > 0) ::kill(-group, static_cast<int>(*sig));
      }
    }
  }
  leg.in.erase(0, at);
  if (!t.to_job.empty()) WriteToJob(t);
}

void NodeSupervisor::WriteLeg(Leg& leg) {
  RankTerminal& t = *leg.terminal;
  while (leg.fd >= 0) {
    if (leg.out_pos == leg.out.size()) {
      leg.out.clear();
      leg.out_pos = 0;
      if (!leg.announced || leg.sent < t.scrollback.total()) {
        int64_t from = 0;
        std::string data = t.scrollback.Since(leg.sent, &from, kMaxTermFrame);
        if (!leg.announced || from != leg.sent) {
          AppendTermFrame(&leg.out, TermChannel::kControl,
                          SerializeJson(json::object{{"from", from}}));
          leg.announced = true;
        }
        leg.sent = from + static_cast<int64_t>(data.size());
        if (!data.empty()) AppendTermFrame(&leg.out, TermChannel::kOutput, data);
      } else if (t.ended && !leg.exit_sent) {
        AppendTermFrame(&leg.out, TermChannel::kControl,
                        SerializeJson(json::object{{"exit", t.exit_code}, {"reason", t.reason}}));
        leg.exit_sent = true;
      } else {
        if (leg.exit_sent) CloseLeg(leg);
        return;
      }
      if (leg.out.empty()) continue;
    }
    if (!SendPending(leg.fd, leg.out, &leg.out_pos)) {
      CloseLeg(leg);
    } else if (leg.out_pos < leg.out.size()) {
      return;  // the socket is full: POLLOUT brings the leg back
    }
  }
}

void NodeSupervisor::CloseLeg(Leg& leg) {
  if (leg.fd >= 0) ::close(leg.fd);
  leg.fd = -1;
}

void NodeSupervisor::WriteToJob(RankTerminal& t) {
  while (!t.to_job.empty() && t.master >= 0) {
    ssize_t n = ::write(t.master, t.to_job.data(), t.to_job.size());
    if (n > 0) {
      t.to_job.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      t.to_job.clear();  // the job's side is gone
    }
  }
}

void NodeSupervisor::ReadTerminal(RankTerminal& t) {
  char buf[16384];
  while (t.master >= 0) {
    ssize_t n = ::read(t.master, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      ::close(t.master);
      t.master = -1;
      return;
    }
    t.scrollback.Append(std::string_view(buf, static_cast<size_t>(n)));
    if (t.log_fd >= 0 && !WriteAll(t.log_fd, std::string_view(buf, static_cast<size_t>(n)))) {
      ::close(t.log_fd);  // the log is not writable: the scrollback still has it
      t.log_fd = -1;
    }
  }
}

}  // namespace berth::node_supervisor_internal
