// Roles of berth's users, deny by default (docs/security.md): a `user` submits, cancels and reads
// the logs of its own jobs and reads the queue; an `operator` may also cancel or requeue anyone's
// jobs and drain nodes; an `admin` may also manage users, tokens and rights. Pure; thread-safe.
#pragma once

#include <optional>
#include <string_view>

namespace berth {

enum class Role { kUser = 0, kOperator = 1, kAdmin = 2 };

inline std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kUser:
      return "user";
    case Role::kOperator:
      return "operator";
    case Role::kAdmin:
      return "admin";
  }
  return "user";
}

inline std::optional<Role> ParseRole(std::string_view name) {
  if (name == "user") return Role::kUser;
  if (name == "operator") return Role::kOperator;
  if (name == "admin") return Role::kAdmin;
  return std::nullopt;
}

// Whether `have` includes every right of `need` (roles are ordered: admin > operator > user).
inline bool RoleAtLeast(Role have, Role need) {
  return static_cast<int>(have) >= static_cast<int>(need);
}

}  // namespace berth
