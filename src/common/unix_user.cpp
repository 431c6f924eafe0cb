#include "common/unix_user.h"

#include <pwd.h>

#include <vector>

namespace berth {

std::optional<std::string> UserNameOf(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return std::nullopt;
  }
  return std::string(found->pw_name);
}

bool UserExists(const std::string& name) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  return getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr;
}

}  // namespace berth
