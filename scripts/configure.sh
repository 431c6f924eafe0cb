# Sourced by scripts/quickstart.sh and scripts/test.sh: berth_configure DIR CMAKE-ARGS...
# configures build directory DIR as a unity build (CMakeLists.txt, BERTH_UNITY_BUILD). A new
# directory gets Ninja, which compiles a module's sources beside those of the modules it links
# (make builds one library target after another); one that exists keeps the generator it has.
berth_configure() {
  local dir=$1
  shift
  local generator=()
  if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
  fi
  cmake -S . -B "$dir" "${generator[@]}" -DBERTH_UNITY_BUILD=ON "$@" >/dev/null
}
