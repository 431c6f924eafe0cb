#include "supervise/step.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "common/files.h"
#include "common/log.h"
#include "common/sanitizers.h"
#include "supervise/clone_into_cgroup.h"

namespace berth {

// What the child of a step needs, all prepared before it is started: the child shares the
// supervisor's memory until it execs (see StartingStep), so it only makes system calls. Outside the
// anonymous namespace: StartingStep::Child, which has external linkage, holds one.
struct StepChild {
  const char* bash;
  char** argv;
  char** envp;
  const char* workdir;  // null: stay where the supervisor is
  const RunPlan::RunAs* run_as;
  int devnull;                    // becomes stdin
  int log_fd;                     // becomes stdout and stderr
  int err_fd;                     // close-on-exec pipe: a failure before exec is written here
  const char* const* join_files;  // written "0" to first: v1 `tasks`, v2 `cgroup.procs`
  size_t num_join_files;
  int tty_fd;  // -1, or the terminal that becomes the controlling one and stdin/stdout/stderr
};

namespace {

std::vector<std::string> EnvVector(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

// Sends a letter naming the step that failed, then errno, so that the reason reported names the
// real cause (e.g. E2BIG for an oversized environment); then exits.
[[noreturn]] void FailStepChild(const StepChild& c, char letter) {
  char msg[1 + sizeof(int)] = {letter};
  int err = errno;
  std::memcpy(msg + 1, &err, sizeof(err));
  ssize_t ignored = ::write(c.err_fd, msg, sizeof(msg));
  (void)ignored;
  _exit(127);
}

int RunStepChild(void* arg) {
  const StepChild& c = *static_cast<const StepChild*>(arg);
  // Into the rank's cgroup before anything of the job runs ("0": the writer itself).
  for (size_t i = 0; i < c.num_join_files; ++i) {
    const int fd = ::open(c.join_files[i], O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, "0", 1) != 1) FailStepChild(c, 'C');
    ::close(fd);
  }
  if (c.tty_fd >= 0) {
    // A session of its own (so also a process group whose id is the pid), with the terminal as
    // its controlling one.
    if (::setsid() < 0 || ::ioctl(c.tty_fd, TIOCSCTTY, 0) != 0) FailStepChild(c, 'T');
  } else {
    ::setpgid(0, 0);
  }
  // Every disposition back to its default, as a login gives it (Slurm's stepd does the same): an
  // ignored SIGINT or SIGQUIT would pass through exec to the job, from an agent started with `&`
  // (which ignores both), and then Ctrl-C in `exec -it` or `timeout -s INT` could not stop it. They
  // are the child's own (no CLONE_SIGHAND); the mask is per thread.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (c.tty_fd >= 0) {
    ::dup2(c.tty_fd, 0);
    ::dup2(c.tty_fd, 1);
    ::dup2(c.tty_fd, 2);
  } else {
    if (c.devnull >= 0) ::dup2(c.devnull, 0);
    ::dup2(c.log_fd, 1);
    ::dup2(c.log_fd, 2);
  }
  ::umask(022);
  // Groups, then gid, then uid: once the uid is dropped nothing else may be changed. Raw system
  // calls: glibc's wrappers would coordinate with threads this process does not have.
  if (c.run_as) {
    if (::syscall(SYS_setgroups, c.run_as->groups.size(), c.run_as->groups.data()) != 0) {
      FailStepChild(c, 'U');
    }
    if (::syscall(SYS_setgid, c.run_as->gid) != 0) FailStepChild(c, 'U');
    if (::syscall(SYS_setuid, c.run_as->uid) != 0) FailStepChild(c, 'U');
  }
  if (c.workdir && ::chdir(c.workdir) != 0) FailStepChild(c, 'W');
  ::execve(c.bash, c.argv, c.envp);
  FailStepChild(c, 'E');
}

// (Not writing a file per job matters: on ext4, creating inodes next to many recently deleted ones
// is what a thousand-job sweep spends most of its kernel time on.)
constexpr size_t kMaxInlineScript = 64 * 1024;
constexpr size_t kChildStack = 64 * 1024;

#ifndef BERTH_SANITIZED
// Whether a child that the kernel would not start in its cgroup may be started outside it and join
// instead: yes where the kernel or the directory cannot do it (no clone3, a directory that is not
// cgroup2's, a refusal of this caller), and the join then says why if it fails too; no where it
// ran out of processes (the rank's pids.max, the node's limit) or memory, which a join would
// only hide.
bool MayJoinInstead(int err) { return err != EAGAIN && err != ENOMEM; }

// Says once per process that steps join their cgroup instead of being born in it.
void NoteJoiningInstead(int err) {
  static bool noted = false;
  if (noted) return;
  noted = true;
  LogInfo("steps join their cgroup instead of starting in it: clone3 (CLONE_INTO_CGROUP): {}",
          strerror(err));
}
#endif

const std::string& Bash() {
  static const std::string bash =
      ::access("/bin/bash", X_OK) == 0 ? "/bin/bash" : std::string("/usr/bin/bash");
  return bash;
}

}  // namespace

// Everything the child reads, kept here until it has exec'd.
struct StartingStep::Child {
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  std::string script;
  std::string script_path;
  std::vector<const char*> argv;
  std::vector<std::string> join_files;
  std::vector<const char*> join_files_c;
  StepChild args{};
  std::unique_ptr<char[]> stack;
};

StartingStep::StartingStep(const std::string& script, const std::string& script_path,
                           const std::string& workdir,
                           const std::map<std::string, std::string>& env,
                           const std::optional<RunPlan::RunAs>& run_as, int log_fd,
                           const CgroupEntry& cgroup, int tty_fd)
    : child_(std::make_unique<Child>()), workdir_(workdir), run_as_(run_as) {
  Child& c = *child_;
  // The other hierarchies' first; clone_into's own last, joined only where the child could not
  // be born in it.
  c.join_files = cgroup.join;
  const size_t joins_when_born_in = c.join_files.size();
  if (!cgroup.clone_into.empty()) c.join_files.push_back(cgroup.clone_into + "/cgroup.procs");
  for (const std::string& file : c.join_files) c.join_files_c.push_back(file.c_str());
  bool inline_script = script.size() <= kMaxInlineScript;
  if (!inline_script && !WriteFileAtomic(script_path, script, /*sync=*/false, 0600)) {
    error_ = "cannot write " + script_path;
    return;
  }
  if (!inline_script && run_as && ::chown(script_path.c_str(), run_as->uid, run_as->gid) != 0) {
    error_ = "cannot give " + script_path + " to " + run_as->user + ": " + strerror(errno);
    return;
  }
  c.env_strings = EnvVector(env);
  c.envp.reserve(c.env_strings.size() + 1);
  for (auto& s : c.env_strings) c.envp.push_back(s.data());
  c.envp.push_back(nullptr);
  c.script = script;
  c.script_path = script_path;
  if (inline_script) {
    c.argv = {"bash", "-c", c.script.c_str(), nullptr};
  } else {
    c.argv = {"bash", c.script_path.c_str(), nullptr};
  }
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    error_ = "pipe failed";
    return;
  }
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  c.args = StepChild{Bash().c_str(),
                     const_cast<char**>(c.argv.data()),
                     c.envp.data(),
                     workdir_.empty() ? nullptr : workdir_.c_str(),
                     run_as_ ? &*run_as_ : nullptr,
                     devnull,
                     log_fd,
                     err_pipe[1],
                     c.join_files_c.data(),
                     c.join_files_c.size(),
                     tty_fd};
#ifdef BERTH_SANITIZED
  // Sanitizers' runtimes do not follow a child that shares the parent's memory.
  (void)joins_when_born_in;
  pid_t pid = ::fork();
  if (pid == 0) RunStepChild(&c.args);
  int spawn_errno = errno;
#else
  // The child shares this memory (no page table copied: even a small image's fork costs as much
  // as a fifth of a short job's launch) and runs beside this process on its own stack; it makes
  // only system calls, and reads what Child holds until it execs. Born in the rank's cgroup2
  // cgroup where it can be, it joins only the others; else it joins them all.
  c.stack = std::make_unique<char[]>(kChildStack);
  pid_t pid = -1;
  int spawn_errno = 0;
  bool join_instead = true;
  if (!cgroup.clone_into.empty()) {
    const int dir = ::open(cgroup.clone_into.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      c.args.num_join_files = joins_when_born_in;
      pid = CloneIntoCgroup(RunStepChild, &c.args, c.stack.get(), kChildStack, dir, SIGCHLD);
      spawn_errno = errno;
      ::close(dir);
      if (pid < 0) {
        c.args.num_join_files = c.join_files_c.size();
        join_instead = MayJoinInstead(spawn_errno);
        if (join_instead) NoteJoiningInstead(spawn_errno);
      }
    }
  }
  if (pid < 0 && join_instead) {
    pid = ::clone(RunStepChild, c.stack.get() + kChildStack, CLONE_VM | SIGCHLD, &c.args);
    spawn_errno = errno;
  }
#endif
  if (devnull >= 0) ::close(devnull);
  ::close(err_pipe[1]);
  if (pid < 0) {
    ::close(err_pipe[0]);
    error_ = std::string("fork failed: ") + strerror(spawn_errno);
    return;
  }
  pid_ = pid;
  err_fd_ = err_pipe[0];
  // Also in the parent, so that the group exists before any signal is sent. Not for a terminal's
  // step: a process group leader could not start the session (its setsid makes the group).
  if (tty_fd < 0) ::setpgid(pid, pid);
}

StartingStep::~StartingStep() { Wait(); }

const std::string& StartingStep::Wait() {
  if (waited_ || err_fd_ < 0) {
    waited_ = true;
    return error_;
  }
  waited_ = true;
  char msg[1 + sizeof(int)] = {};
  ssize_t got = 0;
  while (got < static_cast<ssize_t>(sizeof(msg))) {
    ssize_t n = ::read(err_fd_, msg + got, sizeof(msg) - static_cast<size_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += n;
  }
  ::close(err_fd_);
  err_fd_ = -1;
  if (got > 0) {
    int err = 0;
    if (got == static_cast<ssize_t>(sizeof(msg))) std::memcpy(&err, msg + 1, sizeof(err));
    std::string why = err != 0 ? std::string(": ") + strerror(err) : "";
    if (msg[0] == 'W') {
      error_ = "workdir " + workdir_ + " does not exist or is not accessible" +
               (run_as_ ? " to " + run_as_->user : std::string()) + " on this node" + why;
    } else if (msg[0] == 'C') {
      error_ = "cannot join the job's cgroup" + why;
    } else if (msg[0] == 'T') {
      error_ = "cannot give the job its terminal" + why;
    } else if (msg[0] == 'U') {
      error_ = "cannot switch to user " + (run_as_ ? run_as_->user : std::string("?")) + why;
    } else {
      error_ = "cannot run " + Bash() + why;
    }
  }
  // The child has exec'd or exited: its stack and arguments are no longer in use.
  child_.reset();
  return error_;
}

StepLaunch LaunchStep(const std::string& script, const std::string& script_path,
                      const std::string& workdir, const std::map<std::string, std::string>& env,
                      const std::optional<RunPlan::RunAs>& run_as, int log_fd,
                      const CgroupEntry& cgroup) {
  StartingStep step(script, script_path, workdir, env, run_as, log_fd, cgroup);
  StepLaunch result;
  result.pid = step.pid();
  result.error = step.Wait();
  if (!result.error.empty()) result.exit_code = 127;
  return result;
}

namespace {

// A process's parent and group, from /proc/PID/stat.
struct ProcEntry {
  pid_t ppid = 0;
  pid_t pgid = -1;
};

bool ReadProcEntry(const std::string& pid, ProcEntry& out) {
  std::string stat = ReadFileOr("/proc/" + pid + "/stat");
  auto close_paren = stat.rfind(')');  // the command name may hold anything, ')' included
  if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) return false;
  std::istringstream rest(stat.substr(close_paren + 2));
  char state;
  return static_cast<bool>(rest >> state >> out.ppid >> out.pgid);
}

// Every live process, read once.
std::map<pid_t, ProcEntry> ProcessTable() {
  std::map<pid_t, ProcEntry> table;
  DIR* d = opendir("/proc");
  if (!d) return table;
  while (dirent* e = readdir(d)) {
    if (!isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    ProcEntry entry;
    if (ReadProcEntry(e->d_name, entry)) table[std::atoi(e->d_name)] = entry;
  }
  closedir(d);
  return table;
}

// The processes of `table` whose parent chain leads to one of `roots`.
std::vector<pid_t> DescendantsIn(const std::map<pid_t, ProcEntry>& table,
                                 const std::set<pid_t>& roots) {
  std::vector<pid_t> out;
  for (const auto& [pid, entry] : table) {
    pid_t p = pid;
    for (int depth = 0; depth < 64 && p > 1; ++depth) {
      auto it = table.find(p);
      if (it == table.end()) break;
      if (roots.count(it->second.ppid)) {
        out.push_back(pid);
        break;
      }
      p = it->second.ppid;
    }
  }
  return out;
}

}  // namespace

std::set<pid_t> ChildrenOf(pid_t parent) {
  std::set<pid_t> out;
  // The children of a single-threaded process are those of its one thread.
  std::string id = std::to_string(parent);
  std::string text = ReadFileOr("/proc/" + id + "/task/" + id + "/children", "?");
  if (text != "?") {
    std::istringstream in(text);
    for (pid_t child; in >> child;) out.insert(child);
    return out;
  }
  // A kernel without /proc/PID/task/TID/children: the whole table.
  for (const auto& [pid, entry] : ProcessTable()) {
    if (entry.ppid == parent) out.insert(pid);
  }
  return out;
}

pid_t ProcessGroupOf(pid_t pid) {
  ProcEntry entry;
  return ReadProcEntry(std::to_string(pid), entry) ? entry.pgid : -1;
}

void SignalProcesses(const std::set<pid_t>& groups, const std::set<pid_t>& pids, int sig) {
  for (pid_t group : groups) {
    if (group > 0) ::kill(-group, sig);
  }
  const std::map<pid_t, ProcEntry> table = ProcessTable();
  std::vector<pid_t> all = DescendantsIn(table, pids);
  all.insert(all.end(), pids.begin(), pids.end());
  for (pid_t pid : all) {
    auto it = table.find(pid);
    pid_t group = it == table.end() ? ProcessGroupOf(pid) : it->second.pgid;
    if (!groups.count(group)) ::kill(pid, sig);
  }
}

LeaseVerdict CheckLeaseFile(const std::string& path, int64_t now_ms) {
  LeaseVerdict verdict;
  if (path.empty()) return verdict;
  // Plain reads: an ifstream's construction and destruction cost more than the read itself, and
  // this runs at every job's start and every 200 ms while jobs run.
  std::string text = ReadFileOr(path);
  long long term_at = 0;
  long long kill_at = 0;
  if (std::sscanf(text.c_str(), "%lld %lld", &term_at, &kill_at) != 2) return verdict;
  verdict.term = now_ms >= term_at;
  verdict.kill = now_ms >= kill_at;
  return verdict;
}

}  // namespace berth
