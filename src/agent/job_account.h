// JobAccount: the unix account a job runs as on this node, looked up in the node's passwd and
// group databases. A root agent runs each job as its user (the supervisor drops to the account's
// uid, gid and supplementary groups before exec); an agent that is not root runs every job as
// itself.
//
// Thread-safety: LookupJobAccount is thread-safe (getpwnam_r, getgrouplist); values are plain.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace berth {

struct JobAccount {
  std::string user;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups, the primary one included
  std::string home;
  std::string shell;

  bool operator==(const JobAccount&) const = default;
};

// The account of `user` on this machine; NotFound when it has none.
Result<JobAccount> LookupJobAccount(const std::string& user);

using AccountLookup = std::function<Result<JobAccount>(const std::string& user)>;

// The environment a job of another user than the agent's starts from: of the agent's own
// environment only the locale and time zone (LANG, LANGUAGE, LC_*, TZ) — nothing of root's (cloud
// keys, tokens) reaches another user's job — plus the login-like variables of `account`: HOME,
// USER, LOGNAME, SHELL and PATH.
std::map<std::string, std::string> AccountEnvironment(
    const JobAccount& account, const std::map<std::string, std::string>& agent_environment);

// Removes the tree at `path` as the user who owns it (a job's work dir): a root process walking a
// tree its user can change could be steered through a symlink into any directory. Forks, drops to
// the owner, makes the tree writable to them (what they made read-only) and runs `rm -rf`. A tree
// of the agent's own user is removed with RemoveTreeNoFollow. Answers whether `path` is gone (what
// the owner cannot remove, say files of another uid a rootless container made, is left to the
// caller, which removes it with RemoveTreeNoFollow, never by walking paths).
bool RemoveTreeAsOwner(const std::string& path);

}  // namespace berth
