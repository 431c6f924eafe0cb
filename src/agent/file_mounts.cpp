// The shell that places file mounts before setup (agent/file_mounts.h).
#include "agent/file_mounts.h"

#include <fmt/format.h>

#include "common/strings.h"

namespace berth {
std::string FileMountScript(const std::vector<MountPlacement>& mounts) {
  if (mounts.empty()) return "";
  std::string script =
      "# berth: file_mounts\n"
      "__berth_place() {\n"
      "  local t=\"$2\"\n"
      "  case \"$t\" in \"~\") t=\"$HOME\" ;; \"~/\"*) t=\"$HOME/${t#\\~/}\" ;; esac\n"
      "  if [ -d \"$1\" ]; then\n"
      "    mkdir -p -- \"$t\" && cp -a -- \"$1/.\" \"$t/\"\n"
      "  else\n"
      "    mkdir -p -- \"$(dirname -- \"$t\")\" && rm -f -- \"$t\" && cp -a -- \"$1\" \"$t\"\n"
      "  fi\n"
      "}\n";
  for (const MountPlacement& m : mounts) {
    script += fmt::format(
        "__berth_place {} {} || {{ echo \"berth: file_mounts: cannot place \"{}\" (as $(id -un))\" "
        ">&2; exit 1; }}\n",
        ShellQuote(m.built), ShellQuote(m.target), ShellQuote(m.target));
  }
  script += "unset -f __berth_place\n";
  return script;
}

}  // namespace berth
