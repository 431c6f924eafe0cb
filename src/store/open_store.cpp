#include <string_view>

#include "store/pg_store.h"
#include "store/store.h"

namespace berth {

Result<std::unique_ptr<Store>> OpenStore(const std::string& location) {
  const std::string_view l = location;
  if (l.starts_with("postgresql://") || l.starts_with("postgres://")) return OpenPgStore(location);
  if (l.starts_with("sqlite:")) {
    const std::string path = location.substr(7);
    if (path.empty()) return Status::Invalid("--store sqlite:PATH: the path is empty");
    return OpenSqliteStore(path);
  }
  return Status::Invalid(
      "--store: expected sqlite:PATH or a postgresql://USER@HOST[:PORT]/DB URL, got '" + location +
      "'");
}

}  // namespace berth
