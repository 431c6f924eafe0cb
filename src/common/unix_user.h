// The passwd database, by uid (and whether a name is in it): the one place berth names a uid (the
// server identifying a socket's peer, the agent's user socket, the agent naming itself).
// Thread-safe (getpwuid_r).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace berth {

// The login name of `uid`, or nullopt when the passwd database has none.
std::optional<std::string> UserNameOf(uid_t uid);
// Whether the passwd database has a user of that name.
bool UserExists(const std::string& name);

}  // namespace berth
