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

// The login-like variables a job of `account` starts with (they replace the agent's own): HOME,
// USER, LOGNAME, SHELL and PATH.
std::map<std::string, std::string> AccountEnvironment(const JobAccount& account);

}  // namespace berth
