#include "agent/job_account.h"

#include <grp.h>
#include <pwd.h>

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

std::map<std::string, std::string> AccountEnvironment(const JobAccount& account) {
  return {{"HOME", account.home},
          {"USER", account.user},
          {"LOGNAME", account.user},
          {"SHELL", account.shell},
          {"PATH", account.uid == 0 ? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
                                    : "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"}};
}

}  // namespace berth
