// Accounts: who may use the cluster and how — users' rights (role, highest priority, team), their
// bearer tokens and the audit log of administrative actions — and the Principal a request acts
// as once it is identified (server/http/identity.h).
//
// Tokens: a secret of 32 random bytes, shown once when created; the store keeps only its SHA-256
// hash, and a presented secret is looked up by hash, so no stored value lets anyone in. A token has
// a name (unique), an owner, an optional expiry, and may be revoked.
//
// Node credentials and join tokens (docs/security.md "Node credentials") are bearer secrets of the
// same kind, in the same table, told apart by their subject (TokenRow::user): "node:NAME" is node
// NAME's own credential, "join:once" / "join:reusable" a join token an admin made for agents to
// obtain theirs. No user can have such a name (CheckAccountName refuses ':'). A node credential
// lets its holder speak the agents' protocol as that node only; a join token lets it do nothing
// but join. Each also names the local users the node may speak for through its user socket
// (TokenRow::speaks_for, set on the join token, copied to the credential, changed with
// SetNodeUsers): a stolen node credential can act only as those users, and never as an admin.
//
// Rights: a user without a row has the defaults (role user, max priority 0, no team). The built-in
// admins — `root` and the user the server runs as — are admins whatever their row says, without a
// priority limit unless a row sets one.
//
// Commit, then apply: every change is written to the store first; memory changes only once it is
// durable, so a failed commit (Unavailable) leaves nothing half-applied.
//
// Thread-safety: every method is thread-safe. Changes are serialized by one mutex held across their
// store commit; the tables by another, held only for lookups and to apply a committed change, so
// that identifying a request (on the HTTP I/O threads) never waits for a commit.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/role.h"
#include "common/status.h"
#include "store/store.h"

namespace berth {

// The identity a request acts as.
struct Principal {
  std::string user;  // "" for a node that presented only the cluster token
  Role role = Role::kUser;
  std::optional<int> max_priority;  // none: no limit
  std::string team;
  std::string via;  // how it was identified: "socket", "loopback", "token NAME", "cluster token"
  std::optional<TimeMs> token_expires;
  bool is_user = false;  // identifies a user (who may use the users' API)
  bool is_node = false;  // may speak the agents' protocol (the cluster token, or a local admin)
  // With is_node: the one node a node credential speaks for ("": any node — the cluster token, or
  // a local admin).
  std::string node;
  bool is_join = false;    // a join token: may only exchange itself for a node credential
  std::string token_name;  // the token it presented, if any
  // With a node credential: the users it may speak for (TokenRow::speaks_for).
  std::string speaks_for;

  bool Has(Role need) const { return is_user && RoleAtLeast(role, need); }
};

// What `berth admin user set` changes; unset fields stay as they are.
struct UserChange {
  std::string name;
  std::optional<Role> role;
  std::optional<int> max_priority;
  std::optional<std::string> team;
  std::optional<int> max_running_gpus;  // < 0: no limit
  std::optional<int> max_pending_jobs;  // < 0: no limit
};

// What `berth admin team set` changes; unset fields stay as they are.
struct TeamChange {
  std::string name;
  std::optional<std::map<std::string, MilliGpu>> quota;  // replaces the whole quota
  std::optional<std::map<std::string, MilliGpu>> borrow_limit;
  std::optional<double> weight;
};

struct NewToken {
  std::string name;  // "" to generate one ("<user>-<6 hex>")
  std::string user;
  std::optional<Role> role;          // also sets the user's role
  std::optional<TimeMs> expires_at;  // wall time
};

// What `berth admin node join-token` asks for.
struct NewJoinToken {
  std::optional<TimeMs> expires_at;  // wall time; none: never
  bool reusable = false;             // else it is used up by its first join
  std::string speaks_for;            // the nodes' local users (NodeUsers)
};

// The users a node may speak for, as TokenRow::speaks_for keeps them, from a list of names: ["*"]
// is any user but an admin, [] no one; names are checked (CheckAccountName), sorted and
// deduplicated. Invalid names the bad entry.
Result<std::string> NodeUsers(const std::vector<std::string>& users);
// Whether `speaks_for` (TokenRow::speaks_for) includes `user`.
bool NodeSpeaksFor(std::string_view speaks_for, std::string_view user);

struct CreatedToken {
  TokenRow row;
  std::string secret;  // shown once
};

// "sha256:<hex>" of `secret`.
std::string HashToken(const std::string& secret);

class Accounts {
 public:
  // `builtin_admins`: user names that are always admins (root, the server's own user).
  Accounts(Store& store, const Clock& clock, std::set<std::string> builtin_admins);
  Accounts(const Accounts&) = delete;
  Accounts& operator=(const Accounts&) = delete;

  Status Load() EXCLUDES(mu_);

  // The principal of a user identified by the kernel (socket, loopback) or by a token.
  Principal ForUser(const std::string& user, const std::string& via) const EXCLUDES(mu_);
  // The principal of a presented token secret; Unauthorized when it is unknown, revoked or
  // expired (saying which, by the token's name, when it is known).
  Result<Principal> ForToken(const std::string& secret) const EXCLUDES(mu_);

  // Subjects of node credentials and join tokens (see above).
  static constexpr std::string_view kNodeSubject = "node:";
  static constexpr std::string_view kJoinSubject = "join:";  // kJoinOnce, kJoinReusable
  static constexpr std::string_view kJoinOnce = "join:once";
  static constexpr std::string_view kJoinReusable = "join:reusable";
  // The name's prefix of the revoked placeholder that frees a cluster-token node's name
  // (RevokeNode).
  static constexpr std::string_view kFreedNodeName = "node-freed-";

  // A join token (admin only; audited).
  Result<CreatedToken> CreateJoinToken(const Principal& by, const NewJoinToken& request)
      EXCLUDES(mu_);
  // Exchanges the join token `join` presented for node `node`'s own credential (a one-use join
  // token is used up in the same commit). Conflict when the node holds a live credential already,
  // or when `registered` (when the cluster last heard from a node of that name; nullopt: it knows
  // none) says such a node registers without any credential of its own (the cluster token): an
  // admin revokes it first, and a join token must not let anyone take over a node. Invalid for a
  // bad name; Unavailable when it could not be recorded.
  Result<CreatedToken> JoinNode(const Principal& join, const std::string& node,
                                std::optional<TimeMs> registered = std::nullopt) EXCLUDES(mu_);
  // Sets whom node `node`'s live credentials may speak for (`speaks_for` from NodeUsers; admin
  // only; audited), returning them. NotFound when it has none.
  Result<std::vector<TokenRow>> SetNodeUsers(const Principal& by, const std::string& node,
                                             const std::string& speaks_for) EXCLUDES(mu_);
  // Revokes every live credential of node `node` (admin only; audited). NotFound when it has none,
  // unless `known` (the cluster knows a node of that name, which then registers with the cluster
  // token): its name is freed for a join instead, with a revoked placeholder credential.
  Result<std::vector<TokenRow>> RevokeNode(const Principal& by, const std::string& node,
                                           bool known = false) EXCLUDES(mu_);

 private:
  // A change of every live credential of one node, in one audited commit.
  struct NodeCredentialChange {
    std::string right;   // what NeedRole names: "revoking a node's credential"
    std::string action;  // the audit's action: "node revoke"
    std::function<void(TokenRow&)> change;
    std::function<std::string(size_t)> detail;  // the audit's detail, from how many changed
  };
  Result<std::vector<TokenRow>> ChangeNodeCredentials(const Principal& by, const std::string& node,
                                                      const NodeCredentialChange& what)
      EXCLUDES(mu_, changes_mu_);

 public:
  // Admin actions; PermissionDenied when `by` is not an admin. Each is audited.
  Result<CreatedToken> CreateToken(const Principal& by, NewToken request) EXCLUDES(mu_);
  Result<TokenRow> RevokeToken(const Principal& by, const std::string& name) EXCLUDES(mu_);
  Result<UserRow> SetUser(const Principal& by, const UserChange& change) EXCLUDES(mu_);
  Result<TeamRow> SetTeam(const Principal& by, const TeamChange& change) EXCLUDES(mu_);
  std::vector<TeamRow> Teams() const EXCLUDES(mu_);
  // Tokens (without secrets; hashes included) and user rows, by name.
  std::vector<TokenRow> Tokens() const EXCLUDES(mu_);
  std::vector<UserRow> Users() const EXCLUDES(mu_);

  // Records an administrative action done elsewhere (a drain) in the audit log.
  Status Audit(const Principal& by, const std::string& action, const std::string& target,
               const std::string& detail) EXCLUDES(mu_);

  bool IsBuiltinAdmin(const std::string& user) const { return builtin_admins_.count(user) > 0; }

  static constexpr size_t kMaxNameBytes = 64;

 private:
  Principal PrincipalFor(const std::string& user, const std::string& via) const REQUIRES(mu_);
  // A new secret and its row: token `name` of `subject` (a user, "node:NAME", "join:...").
  CreatedToken NewSecret(const std::string& subject, const std::string& name,
                         std::optional<TimeMs> expires_at, const std::string& by) const;
  // Makes a committed token known (by name and by hash).
  void AddToken(const TokenRow& row) REQUIRES(mu_);
  AuditRow AuditRowFor(const Principal& by, const std::string& action, const std::string& target,
                       const std::string& detail) const;

  // Commits `batch` with mu_ released meanwhile (changes_mu_ keeps other changes out, so what the
  // caller read under mu_ is still true when it applies the change).
  Status CommitReleasingLock(const Batch& batch) REQUIRES(mu_, changes_mu_);

  Store& store_;
  const Clock& clock_;
  const std::set<std::string> builtin_admins_;
  // Serializes changes, held across their store commit; mu_ guards the tables and is held only
  // briefly (never across a commit), so that identifying a request never waits for the store.
  Mutex changes_mu_;
  mutable Mutex mu_ ACQUIRED_AFTER(changes_mu_);
  std::map<std::string, UserRow> users_ GUARDED_BY(mu_);
  std::map<std::string, TeamRow> teams_ GUARDED_BY(mu_);
  std::map<std::string, TokenRow> tokens_ GUARDED_BY(mu_);            // by name
  std::map<std::string, std::string> token_by_hash_ GUARDED_BY(mu_);  // hash -> name
};

// Ok when `by` has the `need` role; else Forbidden, saying what needs it and what `by` is.
Status NeedRole(const Principal& by, Role need, const std::string& what);

// Whether `by` may act on `job` beyond reading the queue (cancel it, read its logs and spec): its
// owner and operators may.
bool MayActOn(const Principal& by, const JobRow& job);

// A user or token name: 1..64 characters of [A-Za-z0-9._-], not starting with '-'.
Status CheckAccountName(const std::string& what, const std::string& name);

}  // namespace berth
