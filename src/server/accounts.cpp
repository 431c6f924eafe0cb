#include "server/accounts.h"

#include <fmt/format.h>

#include "common/quantity.h"
#include "common/resources.h"
#include "common/strings.h"
#include "net/tls.h"

namespace berth {

std::string HashToken(const std::string& secret) { return net::Sha256Digest(secret); }

Status CheckAccountName(const std::string& what, const std::string& name) {
  if (name.empty() || name.size() > Accounts::kMaxNameBytes) {
    return Status::Invalid(fmt::format("{} must be 1 to {} characters, got {}", what,
                                       Accounts::kMaxNameBytes, name.size()));
  }
  for (char c : name) {
    bool ok = isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Status::Invalid(what + " '" + name +
                             "' may only hold letters, digits, '.', '_' and '-'");
    }
  }
  if (name[0] == '-') return Status::Invalid(what + " must not start with '-'");
  return Status::Ok();
}

Result<std::string> NodeUsers(const std::vector<std::string>& users) {
  if (users.size() == 1 && users[0] == "*") return std::string("*");
  std::set<std::string> names;
  for (const std::string& user : users) {
    if (user == "*") return Status::Invalid("'*' (any user) stands alone, without names");
    BERTH_RETURN_IF_ERROR(CheckAccountName("a user the node speaks for", user));
    names.insert(user);
  }
  return Join(std::vector<std::string>(names.begin(), names.end()), ",");
}

bool NodeSpeaksFor(std::string_view speaks_for, std::string_view user) {
  if (speaks_for == "*") return true;
  for (const std::string& name : Split(speaks_for, ',')) {
    if (name == user) return true;
  }
  return false;
}

Status NeedRole(const Principal& by, Role need, const std::string& what) {
  if (by.Has(need)) return Status::Ok();
  return Status::Forbidden(what + " needs the " + std::string(RoleName(need)) + " role; " +
                           (by.is_user ? by.user + " is " + std::string(RoleName(by.role))
                                       : std::string("the cluster token is not a user")));
}

bool MayActOn(const Principal& by, const JobRow& job) {
  return by.is_user && (job.user == by.user || by.Has(Role::kOperator));
}

Accounts::Accounts(Store& store, const Clock& clock, std::set<std::string> builtin_admins)
    : store_(store), clock_(clock), builtin_admins_(std::move(builtin_admins)) {}

Status Accounts::Load() {
  auto users = store_.LoadUsers();
  if (!users.ok()) return users.status();
  auto tokens = store_.LoadTokens();
  if (!tokens.ok()) return tokens.status();
  auto teams = store_.LoadTeams();
  if (!teams.ok()) return teams.status();
  MutexLock lock(mu_);
  teams_.clear();
  for (auto& t : *teams) teams_[t.name] = std::move(t);
  users_.clear();
  tokens_.clear();
  token_by_hash_.clear();
  for (auto& u : *users) users_[u.name] = std::move(u);
  for (const TokenRow& t : *tokens) AddToken(t);
  return Status::Ok();
}

Principal Accounts::PrincipalFor(const std::string& user, const std::string& via) const {
  Principal p;
  p.user = user;
  p.via = via;
  p.is_user = true;
  bool builtin = builtin_admins_.count(user) > 0;
  auto it = users_.find(user);
  if (it != users_.end()) {
    p.role = it->second.role;
    p.max_priority = it->second.max_priority;
    p.team = it->second.team;
  }
  if (builtin) {
    p.role = Role::kAdmin;
    if (it == users_.end()) p.max_priority = std::nullopt;
  } else if (it == users_.end()) {
    p.max_priority = 0;
  }
  return p;
}

Principal Accounts::ForUser(const std::string& user, const std::string& via) const {
  MutexLock lock(mu_);
  return PrincipalFor(user, via);
}

Result<Principal> Accounts::ForToken(const std::string& secret) const {
  std::string hash = HashToken(secret);
  MutexLock lock(mu_);
  auto name = token_by_hash_.find(hash);
  if (name == token_by_hash_.end()) {
    return Status::Unauthorized(
        "unknown token: this server issued no such token (ask an admin for one: berth admin token "
        "create)");
  }
  const TokenRow& token = tokens_.at(name->second);
  if (token.revoked_at && token.user.starts_with(kJoinSubject)) {
    return Status::Unauthorized("join token '" + token.name +
                                "' was used or revoked: an admin makes a new one (berth admin "
                                "node join-token)");
  }
  if (token.revoked_at) {
    return Status::Unauthorized("token '" + token.name + "' was revoked");
  }
  if (token.expires_at && *token.expires_at <= clock_.Now()) {
    return Status::Unauthorized("token '" + token.name + "' expired at " +
                                FormatRfc3339(*token.expires_at));
  }
  Principal p;
  if (token.user.starts_with(kNodeSubject)) {
    p.node = token.user.substr(kNodeSubject.size());
    p.is_node = true;
    p.via = "node credential " + token.name;
    p.speaks_for = token.speaks_for;
  } else if (token.user.starts_with(kJoinSubject)) {
    p.is_join = true;
    p.via = "join token " + token.name;
  } else {
    p = PrincipalFor(token.user, "token " + token.name);
  }
  p.token_name = token.name;
  p.token_expires = token.expires_at;
  return p;
}

CreatedToken Accounts::NewSecret(const std::string& subject, const std::string& name,
                                 std::optional<TimeMs> expires_at, const std::string& by) const {
  CreatedToken created;
  created.secret = "berth_" + RandomHex(32);
  created.row = TokenRow{.name = name,
                         .user = subject,
                         .hash = HashToken(created.secret),
                         .created_at = clock_.Now(),
                         .expires_at = expires_at,
                         .revoked_at = std::nullopt,
                         .created_by = by};
  return created;
}

void Accounts::AddToken(const TokenRow& row) {
  token_by_hash_[row.hash] = row.name;
  tokens_[row.name] = row;
}

Result<CreatedToken> Accounts::CreateJoinToken(const Principal& by, const NewJoinToken& request) {
  BERTH_RETURN_IF_ERROR(NeedRole(by, Role::kAdmin, "creating a join token"));
  if (request.expires_at && *request.expires_at <= clock_.Now()) {
    return Status::Invalid("the join token's expiry must be in the future");
  }
  CreatedToken created = NewSecret(std::string(request.reusable ? kJoinReusable : kJoinOnce),
                                   "join-" + RandomHex(4), request.expires_at, by.user);
  created.row.speaks_for = request.speaks_for;
  Batch batch;
  batch.tokens.push_back(created.row);
  std::string detail = request.reusable ? "reusable" : "one use";
  detail += ", speaks for " + (request.speaks_for.empty() ? "no one" : request.speaks_for);
  if (request.expires_at) detail += ", expires " + FormatRfc3339(*request.expires_at);
  batch.audit.push_back(AuditRowFor(by, "join-token create", created.row.name, detail));
  MutexLock changes(changes_mu_);  // one change at a time: what it read stays true
  MutexLock lock(mu_);
  Status st = CommitReleasingLock(batch);
  if (!st.ok()) return Status::Unavailable("the join token could not be recorded: " + st.message());
  AddToken(created.row);
  return created;
}

Result<CreatedToken> Accounts::JoinNode(const Principal& join, const std::string& node,
                                        std::optional<TimeMs> registered) {
  if (!join.is_join) return Status::Forbidden("joining needs a join token");
  if (!IsValidName(node)) {
    return Status::Invalid("join: invalid node name '" + node +
                           "' (letters, digits, '.', '_' and '-', at most 128)");
  }
  const std::string subject = std::string(kNodeSubject) + node;
  TimeMs now = clock_.Now();
  MutexLock changes(changes_mu_);  // one change at a time: what it read stays true
  MutexLock lock(mu_);
  auto join_row = tokens_.find(join.token_name);
  if (join_row == tokens_.end() || join_row->second.revoked_at) {
    return Status::Unauthorized("join token '" + join.token_name + "' was used or revoked");
  }
  bool ever_had_one = false;
  for (const auto& [name, row] : tokens_) {
    if (row.user != subject) continue;
    ever_had_one = true;
    if (!row.revoked_at && !(row.expires_at && *row.expires_at <= now)) {
      return Status::Conflict(fmt::format(
          "node {} has a credential already ({}): a node joins once; to give the name to another "
          "machine an admin revokes it first (berth admin node revoke {})",
          node, name, node));
    }
  }
  if (registered && !ever_had_one) {
    return Status::Conflict(fmt::format(
        "node {} is a node of this cluster that registers with the cluster token (last heard from "
        "{}): a join may not take its name. To give the name to another machine, stop that agent "
        "and an admin frees the name (berth admin node revoke {}); or join under another name",
        node, FormatRfc3339(*registered), node));
  }
  CreatedToken created = NewSecret(subject, "node-" + RandomHex(4), std::nullopt, join.token_name);
  created.row.speaks_for = join_row->second.speaks_for;
  Batch batch;
  batch.tokens.push_back(created.row);
  std::optional<TokenRow> used;
  if (join_row->second.user == kJoinOnce) {
    used = join_row->second;
    used->revoked_at = now;
    batch.tokens.push_back(*used);
  }
  batch.audit.push_back(AuditRowFor(join, "node join", node, "credential " + created.row.name));
  Status st = CommitReleasingLock(batch);
  if (!st.ok()) return Status::Unavailable("the join could not be recorded: " + st.message());
  if (used) join_row->second = *used;
  AddToken(created.row);
  return created;
}

Result<std::vector<TokenRow>> Accounts::ChangeNodeCredentials(const Principal& by,
                                                              const std::string& node,
                                                              const NodeCredentialChange& what) {
  BERTH_RETURN_IF_ERROR(NeedRole(by, Role::kAdmin, what.right));
  const std::string subject = std::string(kNodeSubject) + node;
  MutexLock changes(changes_mu_);  // one change at a time: what it read stays true
  MutexLock lock(mu_);
  std::vector<TokenRow> changed;
  Batch batch;
  for (const auto& [name, row] : tokens_) {
    if (row.user != subject || row.revoked_at) continue;
    changed.push_back(row);
    what.change(changed.back());
    batch.tokens.push_back(changed.back());
  }
  if (changed.empty()) return Status::NotFound("node " + node + " holds no live credential");
  batch.audit.push_back(AuditRowFor(by, what.action, node, what.detail(changed.size())));
  Status st = CommitReleasingLock(batch);
  if (!st.ok()) {
    return Status::Unavailable("the " + what.action + " could not be recorded: " + st.message());
  }
  for (const TokenRow& row : changed) tokens_[row.name] = row;
  return changed;
}

Result<std::vector<TokenRow>> Accounts::SetNodeUsers(const Principal& by, const std::string& node,
                                                     const std::string& speaks_for) {
  return ChangeNodeCredentials(
      by, node,
      {.right = "setting whom a node speaks for",
       .action = "node users",
       .change = [&](TokenRow& row) { row.speaks_for = speaks_for; },
       .detail =
           [&](size_t) { return speaks_for.empty() ? "no one" : "speaks for " + speaks_for; }});
}

Result<std::vector<TokenRow>> Accounts::RevokeNode(const Principal& by, const std::string& node,
                                                   bool known) {
  const TimeMs now = clock_.Now();
  auto revoked = ChangeNodeCredentials(
      by, node,
      {.right = "revoking a node's credential",
       .action = "node revoke",
       .change = [&](TokenRow& row) { row.revoked_at = now; },
       .detail = [](size_t n) { return fmt::format("{} credential(s)", n); }});
  if (revoked.ok() || revoked.status().code() != Code::kNotFound || !known) return revoked;
  // A node of the cluster token's: a revoked placeholder marks its name as freed for a join.
  BERTH_RETURN_IF_ERROR(NeedRole(by, Role::kAdmin, "revoking a node's credential"));
  CreatedToken freed = NewSecret(std::string(kNodeSubject) + node,
                                 std::string(kFreedNodeName) + RandomHex(4), std::nullopt, by.user);
  freed.row.revoked_at = now;
  Batch batch;
  batch.tokens.push_back(freed.row);
  batch.audit.push_back(
      AuditRowFor(by, "node revoke", node, "no credential: the name is free for a join"));
  MutexLock changes(changes_mu_);
  MutexLock lock(mu_);
  Status st = CommitReleasingLock(batch);
  if (!st.ok())
    return Status::Unavailable("the node revoke could not be recorded: " + st.message());
  AddToken(freed.row);
  return std::vector<TokenRow>{freed.row};
}

AuditRow Accounts::AuditRowFor(const Principal& by, const std::string& action,
                               const std::string& target, const std::string& detail) const {
  return AuditRow{.seq = 0,
                  .at = clock_.Now(),
                  .by = by.user.empty() ? by.via : by.user,
                  .action = action,
                  .target = target,
                  .detail = detail};
}

Result<CreatedToken> Accounts::CreateToken(const Principal& by, NewToken request) {
  BERTH_RETURN_IF_ERROR(NeedRole(by, Role::kAdmin, "creating a token"));
  BERTH_RETURN_IF_ERROR(CheckAccountName("the user name", request.user));
  if (request.name.empty()) request.name = request.user + "-" + RandomHex(3);
  BERTH_RETURN_IF_ERROR(CheckAccountName("the token name", request.name));
  TimeMs now = clock_.Now();
  if (request.expires_at && *request.expires_at <= now) {
    return Status::Invalid("the token's expiry must be in the future");
  }
  CreatedToken created = NewSecret(request.user, request.name, request.expires_at, by.user);
  MutexLock changes(changes_mu_);  // one change at a time: what it read stays true
  MutexLock lock(mu_);
  if (tokens_.count(request.name)) {
    return Status::Conflict("a token named '" + request.name +
                            "' exists already (revoked tokens keep their names)");
  }
  Batch batch;
  batch.tokens.push_back(created.row);
  std::string detail = "user " + request.user;
  if (request.expires_at) detail += ", expires " + FormatRfc3339(*request.expires_at);
  std::optional<UserRow> user_row;
  if (request.role) {
    UserRow row;
    if (auto it = users_.find(request.user); it != users_.end()) {
      row = it->second;
    } else {
      row.name = request.user;
    }
    row.role = *request.role;
    row.updated_at = now;
    row.updated_by = by.user;
    batch.users.push_back(row);
    user_row = row;
    detail += ", role " + std::string(RoleName(*request.role));
  }
  batch.audit.push_back(AuditRowFor(by, "token create", request.name, detail));
  Status st = CommitReleasingLock(batch);
  if (!st.ok()) return Status::Unavailable("the token could not be recorded: " + st.message());
  AddToken(created.row);
  if (user_row) users_[user_row->name] = *user_row;
  return created;
}

Result<TokenRow> Accounts::RevokeToken(const Principal& by, const std::string& name) {
  BERTH_RETURN_IF_ERROR(NeedRole(by, Role::kAdmin, "revoking a token"));
  MutexLock changes(changes_mu_);  // one change at a time: what it read stays true
  MutexLock lock(mu_);
  auto it = tokens_.find(name);
  if (it == tokens_.end()) return Status::NotFound("no token named '" + name + "'");
  if (it->second.revoked_at) return it->second;  // already revoked: nothing to change
  TokenRow row = it->second;
  row.revoked_at = clock_.Now();
  Batch batch;
  batch.tokens.push_back(row);
  batch.audit.push_back(AuditRowFor(by, "token revoke", name, "user " + row.user));
  Status st = CommitReleasingLock(batch);
  if (!st.ok()) return Status::Unavailable("the revocation could not be recorded: " + st.message());
  it->second = row;
  return row;
}

Result<UserRow> Accounts::SetUser(const Principal& by, const UserChange& change) {
  BERTH_RETURN_IF_ERROR(NeedRole(by, Role::kAdmin, "changing a user's rights"));
  BERTH_RETURN_IF_ERROR(CheckAccountName("the user name", change.name));
  if (change.team) {
    if (!change.team->empty()) BERTH_RETURN_IF_ERROR(CheckAccountName("the team", *change.team));
  }
  MutexLock changes(changes_mu_);  // one change at a time: what it read stays true
  MutexLock lock(mu_);
  UserRow row;
  if (auto it = users_.find(change.name); it != users_.end()) {
    row = it->second;
  } else {
    row.name = change.name;
  }
  std::vector<std::string> changed;
  if (change.role) {
    row.role = *change.role;
    changed.push_back("role " + std::string(RoleName(row.role)));
  }
  if (change.max_priority) {
    row.max_priority = *change.max_priority;
    changed.push_back("max_priority " + std::to_string(row.max_priority));
  }
  if (change.team) {
    row.team = *change.team;
    changed.push_back("team " + (row.team.empty() ? std::string("(none)") : row.team));
  }
  auto cap = [&](const std::optional<int>& value, std::optional<int>& field, const char* what) {
    if (!value) return;
    field = *value < 0 ? std::nullopt : std::optional<int>(*value);
    changed.push_back(std::string(what) + " " + (field ? std::to_string(*field) : "none"));
  };
  cap(change.max_running_gpus, row.max_running_gpus, "max_running_gpus");
  cap(change.max_pending_jobs, row.max_pending_jobs, "max_pending_jobs");
  if (changed.empty()) {
    return Status::Invalid(
        "say what to change: --role, --max-priority, --team, --max-running-gpus, "
        "--max-pending-jobs");
  }
  row.updated_at = clock_.Now();
  row.updated_by = by.user;
  Batch batch;
  batch.users.push_back(row);
  batch.audit.push_back(AuditRowFor(by, "user set", row.name, Join(changed, ", ")));
  Status st = CommitReleasingLock(batch);
  if (!st.ok()) return Status::Unavailable("the change could not be recorded: " + st.message());
  users_[row.name] = row;
  return row;
}

Result<TeamRow> Accounts::SetTeam(const Principal& by, const TeamChange& change) {
  BERTH_RETURN_IF_ERROR(NeedRole(by, Role::kAdmin, "changing a team's quota"));
  BERTH_RETURN_IF_ERROR(CheckAccountName("the team name", change.name));
  auto check = [](const std::map<std::string, MilliGpu>& amounts, const char* what) -> Status {
    for (const auto& [type, milli] : amounts) {
      if (type.empty() || milli < 0) {
        return Status::Invalid(std::string(what) + " needs TYPE:N with N >= 0, not '" + type + ":" +
                               FormatMilli(milli) + "'");
      }
      // Quotas are of GPU types; a slice counts as its share of its GPU's (sched/fair_share.h).
      if (std::optional<SliceShare> slice = SliceShareOf(type)) {
        return Status::Invalid(std::string(what) + ": '" + type + "' is a MIG slice type: give " +
                               slice->gpu_type + " GPUs instead: each " + type + " counts as " +
                               std::to_string(slice->sevenths) + "/7 of one");
      }
    }
    return Status::Ok();
  };
  if (change.quota) BERTH_RETURN_IF_ERROR(check(*change.quota, "--gpus"));
  if (change.borrow_limit) BERTH_RETURN_IF_ERROR(check(*change.borrow_limit, "--borrow-limit"));
  if (change.weight && !(*change.weight > 0 && *change.weight < 1e9)) {
    return Status::Invalid("--weight must be a number above 0");
  }
  MutexLock changes(changes_mu_);  // one change at a time: what it read stays true
  MutexLock lock(mu_);
  TeamRow row;
  if (auto it = teams_.find(change.name); it != teams_.end()) {
    row = it->second;
  } else {
    row.name = change.name;
  }
  auto describe = [](const std::map<std::string, MilliGpu>& amounts) {
    std::vector<std::string> parts;
    for (const auto& [type, milli] : amounts) parts.push_back(type + ":" + FormatMilli(milli));
    return parts.empty() ? std::string("none") : Join(parts, ",");
  };
  std::vector<std::string> changed;
  if (change.quota) {
    row.quota = *change.quota;
    changed.push_back("quota " + describe(row.quota));
  }
  if (change.borrow_limit) {
    row.borrow_limit = *change.borrow_limit;
    changed.push_back("borrow_limit " + describe(row.borrow_limit));
  }
  if (change.weight) {
    row.weight = *change.weight;
    changed.push_back(fmt::format("weight {}", row.weight));
  }
  if (changed.empty())
    return Status::Invalid("say what to change: --gpus, --borrow-limit, --weight");
  row.updated_at = clock_.Now();
  row.updated_by = by.user;
  Batch batch;
  batch.teams.push_back(row);
  batch.audit.push_back(AuditRowFor(by, "team set", row.name, Join(changed, ", ")));
  Status st = CommitReleasingLock(batch);
  if (!st.ok()) return Status::Unavailable("the change could not be recorded: " + st.message());
  teams_[row.name] = row;
  return row;
}

Status Accounts::CommitReleasingLock(const Batch& batch) {
  // Identification (on the HTTP I/O threads) takes mu_ for a lookup: it must never wait for a
  // store commit, a network round trip on PostgreSQL.
  mu_.Unlock();
  Status st = store_.Commit(batch);
  mu_.Lock();
  return st;
}

std::vector<TeamRow> Accounts::Teams() const {
  MutexLock lock(mu_);
  std::vector<TeamRow> out;
  for (const auto& [name, t] : teams_) out.push_back(t);
  return out;
}

std::vector<TokenRow> Accounts::Tokens() const {
  MutexLock lock(mu_);
  std::vector<TokenRow> out;
  for (const auto& [name, t] : tokens_) out.push_back(t);
  return out;
}

std::vector<UserRow> Accounts::Users() const {
  MutexLock lock(mu_);
  std::vector<UserRow> out;
  for (const auto& [name, u] : users_) out.push_back(u);
  return out;
}

Status Accounts::Audit(const Principal& by, const std::string& action, const std::string& target,
                       const std::string& detail) {
  Batch batch;
  batch.audit.push_back(AuditRowFor(by, action, target, detail));
  return store_.Commit(batch);
}

}  // namespace berth
