#include "agent/job_account.h"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "common/tree_removal.h"

namespace berth {

Result<JobAccount> LookupJobAccount(const std::string& user) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  int err = getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found);
  if (err != 0 || found == nullptr) {
    return Status::NotFound("user '" + user + "' does not exist on this node");
  }
  JobAccount account;
  account.user = found->pw_name;
  account.uid = found->pw_uid;
  account.gid = found->pw_gid;
  account.home = found->pw_dir ? found->pw_dir : "/";
  account.shell = found->pw_shell && *found->pw_shell ? found->pw_shell : "/bin/sh";
  int count = 32;
  for (int tries = 0; tries < 4; ++tries) {
    account.groups.resize(static_cast<size_t>(count));
    int n = count;
    if (getgrouplist(user.c_str(), account.gid, account.groups.data(), &n) >= 0) {
      account.groups.resize(static_cast<size_t>(n));
      return account;
    }
    count = std::max(n, count * 4);
  }
  return Status::Internal("cannot list the groups of user '" + user + "'");
}

std::map<std::string, std::string> AccountEnvironment(
    const JobAccount& account, const std::map<std::string, std::string>& agent_environment) {
  std::map<std::string, std::string> env;
  for (const auto& [key, value] : agent_environment) {
    if (key == "LANG" || key == "LANGUAGE" || key == "TZ" || key.rfind("LC_", 0) == 0) {
      env[key] = value;
    }
  }
  env["HOME"] = account.home;
  env["USER"] = account.user;
  env["LOGNAME"] = account.user;
  env["SHELL"] = account.shell;
  env["PATH"] = account.uid == 0 ? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                                 : "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games";
  return env;
}

bool RemoveTreeAsOwner(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  if (st.st_uid == ::geteuid()) return RemoveTreeNoFollow(path);
  pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls: the agent is multi-threaded. The owner may have made parts of
    // the tree read-only (or unsearchable): they are made writable first, as the owner.
    if (::setgroups(0, nullptr) != 0 || ::setgid(st.st_gid) != 0 || ::setuid(st.st_uid) != 0) {
      _exit(126);
    }
    const char* argv[] = {"sh", "-c", "chmod -R u+rwx -- \"$0\" 2>/dev/null; exec rm -rf -- \"$0\"",
                          path.c_str(), nullptr};
    ::execv("/bin/sh", const_cast<char**>(argv));
    _exit(127);
  }
  if (pid > 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  // The top's entry is in its parent, which may be root's (a job dir): the owner empties it, and
  // an empty directory is removed here (rmdir follows no link).
  ::rmdir(path.c_str());
  return ::lstat(path.c_str(), &st) != 0 && errno == ENOENT;
}

}  // namespace berth
