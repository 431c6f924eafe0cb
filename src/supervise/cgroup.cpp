#include "supervise/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string_view>

#include "common/files.h"
#include "common/job_status.h"
#include "common/strings.h"
#include "supervise/cpu_set.h"
#include "supervise/device_filter.h"

namespace berth {

namespace {

// The v1 controllers a rank's cgroup may use, each only where it has a limit to hold: every
// hierarchy costs a rank a join, and a mkdir and an rmdir where no idle cgroup is reused
// (supervise/cgroup_pool.h); a thousand-job launch pays them a thousand times. cpuset only for a
// pinned rank (its cgroups need cpus and mems before a process may join); freezer is left alone (a
// sweep replaces freezing), and so are cpuacct and the hybrid layout's cgroup2 hierarchy until
// something reads them.
constexpr const char* kV1Controllers[] = {"memory", "cpu", "pids", "devices", "cpuset"};
constexpr int64_t kCfsPeriodUs = 100'000;

struct Mount {
  std::string root;   // the mount's root within its hierarchy
  std::string point;  // where it is mounted
};

// `path` (a cgroup path of this process in a hierarchy) as a directory under `m`.
std::optional<std::string> DirIn(const Mount& m, const std::string& path) {
  if (m.root == "/") return m.point + (path == "/" ? "" : path);
  if (path == m.root) return m.point;
  if (path.rfind(m.root + "/", 0) == 0) return m.point + path.substr(m.root.size());
  return std::nullopt;  // this process's cgroup is outside what is mounted
}

Status WriteValue(const std::string& dir, const std::string& file, const std::string& value) {
  const std::string path = dir + "/" + file;
  // As a shell's `echo V > FILE` opens it; cgroupfs refuses to create a file it lacks.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Internal("cannot open " + path + ": " + strerror(errno));
  ssize_t n = ::write(fd, value.data(), value.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return Status::Internal("cannot write '" + value + "' to " + path + ": " + strerror(err));
  }
  return Status::Ok();
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Makes `dir` and its missing parents down from `base` (which exists). A parent another
// supervisor removes in between (its last rank ended: ENOENT) is made again.
Status MakeDirs(const std::string& base, const std::string& name, std::vector<std::string>* made) {
  for (int tries = 0;; ++tries) {
    std::string dir = base;
    int err = 0;
    for (const std::string& part : Split(name, '/')) {
      if (part.empty()) continue;
      dir += "/" + part;
      if (::mkdir(dir.c_str(), 0755) == 0) {
        if (made) made->push_back(dir);
      } else if (errno != EEXIST) {
        err = errno;
        break;
      }
    }
    if (err == 0) return Status::Ok();
    if (err != ENOENT || tries == 3) {
      return Status::Internal("cannot make cgroup " + dir + ": " + strerror(err));
    }
  }
}

// A field of mountinfo as the kernel writes it: space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    const bool octal = field[i] == '\\' && i + 3 < field.size() &&
                       std::isdigit(static_cast<unsigned char>(field[i + 1])) &&
                       std::isdigit(static_cast<unsigned char>(field[i + 2])) &&
                       std::isdigit(static_cast<unsigned char>(field[i + 3]));
    if (octal) {
      out += static_cast<char>(std::stoi(field.substr(i + 1, 3), nullptr, 8));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

// A "key value" line's value in a flat-keyed file (memory.events, cpu.stat, oom_control).
int64_t KeyedValue(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return -1;
}

int64_t FileNumber(const std::string& path) {
  std::string text = ReadFileOr(path);
  if (text.empty()) return -1;
  try {
    return std::stoll(text);
  } catch (...) {
    return -1;
  }
}

// A v1 counter that writing 0 resets (memory.max_usage_in_bytes: to what is charged now;
// memory.failcnt: to 0), read and reset through one open; -1 where it cannot be read.
int64_t TakeNumber(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[32];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  int64_t value = -1;
  if (n > 0) {
    buf[n] = '\0';
    char* end = nullptr;
    errno = 0;
    const long long parsed = std::strtoll(buf, &end, 10);
    if (end != buf && errno == 0) value = parsed;
  }
  ssize_t ignored = ::pwrite(fd, "0", 1, 0);
  (void)ignored;
  ::close(fd);
  return value;
}

// Whether a cgroup2 controller list (cgroup.controllers' "memory pids", or cgroup.subtree_control's
// as written, "+memory +pids") names `controller`.
bool ListsController(const std::string& list, std::string_view controller) {
  for (const std::string& word : Split(Trim(list), ' ')) {
    if (std::string_view(word).substr(word.starts_with('+') ? 1 : 0) == controller) return true;
  }
  return false;
}

// v2: "+memory +cpu +pids +cpuset", or those of them that `dir` offers.
std::string WantedControllers(const std::string& dir) {
  const std::string offered = ReadFileOr(dir + "/cgroup.controllers");
  std::string want;
  for (const char* c : {"memory", "cpu", "pids", "cpuset"}) {
    if (ListsController(offered, c)) {
      want += (want.empty() ? "+" : " +") + std::string(c);
    }
  }
  return want;
}

// v2: controllers are enabled for the children of `dir`. A cgroup that holds processes may not
// (the no-internal-processes rule, EBUSY): they move into a leaf of its own, kSupervisorLeaf,
// first. Processes that those not yet moved fork meanwhile land in `dir` (a shell beside the agent
// forks all the time), so the move is repeated, a bounded number of rounds. The kernel's answer is
// read back: a controller it did not enable would leave the rank's files missing later.
Status EnableControllers(const std::string& dir) {
  constexpr int kMoveRounds = 20;
  const std::string want = WantedControllers(dir);
  Status st = WriteValue(dir, "cgroup.subtree_control", want);
  const std::string leaf = dir + "/" + kSupervisorLeaf;
  for (int round = 0; !st.ok() && round < kMoveRounds; ++round) {
    if (st.message().find(strerror(EBUSY)) == std::string::npos) return st;
    if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) return st;
    for (const std::string& pid : Split(ReadFileOr(dir + "/cgroup.procs"), '\n')) {
      if (!pid.empty()) (void)WriteValue(leaf, "cgroup.procs", pid);
    }
    st = WriteValue(dir, "cgroup.subtree_control", want);
  }
  if (!st.ok()) return st;
  const std::string enabled = ReadFileOr(dir + "/cgroup.subtree_control");
  for (const std::string& controller : Split(want, ' ')) {
    const std::string name = controller.substr(1);  // without its '+'
    if (!ListsController(enabled, name)) {
      return Status::Internal("the kernel did not enable the " + name + " controller for " + dir +
                              "'s children (cgroup.subtree_control: " + Trim(enabled) + ")");
    }
  }
  return Status::Ok();
}

// v1 cpuset: a new cgroup has no CPUs and no memory nodes, and no process may join it until it
// has. Each level above the rank's (the agent's, shared by its ranks) gets its parent's, where it
// has none yet; the rank's gets `cpus`.
Status InitV1Cpuset(const std::string& base, const std::string& name,
                    const std::vector<int>& cpus) {
  std::string parent = base;
  const std::vector<std::string> parts = Split(name, '/');
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string dir = parent + "/" + parts[i];
    const std::string mems = Trim(ReadFileOr(parent + "/cpuset.mems"));
    const bool leaf = i + 1 == parts.size();
    if (leaf || Trim(ReadFileOr(dir + "/cpuset.cpus")).empty()) {
      const std::string list =
          leaf ? FormatCpuList(cpus) : Trim(ReadFileOr(parent + "/cpuset.cpus"));
      BERTH_RETURN_IF_ERROR(WriteValue(dir, "cpuset.cpus", list));
    }
    if (Trim(ReadFileOr(dir + "/cpuset.mems")).empty()) {
      BERTH_RETURN_IF_ERROR(WriteValue(dir, "cpuset.mems", mems));
    }
    parent = dir;
  }
  return Status::Ok();
}

// v2: the rank's limits into its cgroup `dir` (under the agent's `unified_dir`).
Status WriteV2Limits(const std::string& dir, const RankLimits& limits,
                     const std::string& unified_dir) {
  if (limits.memory_bytes > 0) {
    for (auto [file, value] : {std::pair{"memory.max", std::to_string(limits.memory_bytes)},
                               std::pair{"memory.swap.max", std::string("0")},
                               std::pair{"memory.oom.group", std::string("1")}}) {
      // No swap accounting on this host (no memory.swap.max): no swap to keep the job from.
      if (std::string(file) == "memory.swap.max" && !Exists(dir + "/" + file)) continue;
      BERTH_RETURN_IF_ERROR(WriteValue(dir, file, value));
    }
  }
  if (limits.cpu_milli > 0) {
    // The kernel's least quota is 1 ms per period. A kernel built without CFS bandwidth control
    // (no cpu.max) or group scheduling (no cpu.weight) offers the cpu controller without them:
    // nothing to write there, the CPUs asked for are not held (docs/security.md "Isolation").
    const std::string quota =
        std::to_string(std::max<int64_t>(1000, limits.cpu_milli * kCfsPeriodUs / 1000)) + " " +
        std::to_string(kCfsPeriodUs);
    if (Exists(dir + "/cpu.max")) BERTH_RETURN_IF_ERROR(WriteValue(dir, "cpu.max", quota));
    if (Exists(dir + "/cpu.weight")) {
      BERTH_RETURN_IF_ERROR(
          WriteValue(dir, "cpu.weight", std::to_string(CpuWeightOf(limits.cpu_milli))));
    }
  }
  // Without the pids controller given to the agent (CgroupHost::undelegated) there is no pids.max.
  if (limits.pids_max > 0 && Exists(dir + "/pids.max")) {
    BERTH_RETURN_IF_ERROR(WriteValue(dir, "pids.max", std::to_string(limits.pids_max)));
  }
  if (!limits.cpus.empty()) {
    if (!Exists(dir + "/cpuset.cpus")) {
      return Status::Unavailable("the cpuset controller is not delegated to " + unified_dir +
                                 ": resources.cpu_binding cannot be held");
    }
    BERTH_RETURN_IF_ERROR(WriteValue(dir, "cpuset.cpus", FormatCpuList(limits.cpus)));
  }
  // cgroup v2 has no devices files: a BPF program attached to the cgroup fences them.
  if (!limits.denied_devices.empty()) return DenyDevices(dir, limits.denied_devices);
  return Status::Ok();
}

// v1: cpu.cfs_quota_us for `cpu_milli` (a new cgroup's period is the default 100 ms,
// kCfsPeriodUs; the kernel's least quota is 1 ms).
std::string V1CfsQuota(int64_t cpu_milli) {
  return std::to_string(std::max<int64_t>(1000, cpu_milli * kCfsPeriodUs / 1000));
}

// v1: the agent's cgroup, the parent of the rank's cpu cgroup `rank_dir`, weighs the node's CPUs.
Status WriteAgentCpuShares(const std::string& rank_dir, int64_t node_cpu_milli) {
  return WriteValue(rank_dir.substr(0, rank_dir.rfind('/')), "cpu.shares",
                    std::to_string(CpuSharesOf(node_cpu_milli)));
}

// v1: the rank's limit of one `controller` into its cgroup `name` under that hierarchy's `base`.
Status WriteV1Limit(const std::string& controller, const std::string& base, const std::string& name,
                    const RankLimits& limits, bool memsw) {
  const std::string dir = base + "/" + name;
  if (controller == "memory" && limits.memory_bytes > 0) {
    const std::string bytes = std::to_string(limits.memory_bytes);
    BERTH_RETURN_IF_ERROR(WriteValue(dir, "memory.limit_in_bytes", bytes));
    // No swap: memory and swap together get the same limit, where swap is accounted.
    if (memsw) return WriteValue(dir, "memory.memsw.limit_in_bytes", bytes);
  } else if (controller == "cpu" && limits.cpu_milli > 0) {
    if (limits.node_cpu_milli > 0 && name.find('/') != std::string::npos) {
      BERTH_RETURN_IF_ERROR(WriteAgentCpuShares(dir, limits.node_cpu_milli));
    }
    BERTH_RETURN_IF_ERROR(WriteValue(dir, "cpu.cfs_quota_us", V1CfsQuota(limits.cpu_milli)));
    return WriteValue(dir, "cpu.shares", std::to_string(CpuSharesOf(limits.cpu_milli)));
  } else if (controller == "pids" && limits.pids_max > 0) {
    return WriteValue(dir, "pids.max", std::to_string(limits.pids_max));
  } else if (controller == "cpuset") {
    return InitV1Cpuset(base, name, limits.cpus);
  } else if (controller == "devices") {
    for (auto [major, minor] : limits.denied_devices) {
      BERTH_RETURN_IF_ERROR(
          WriteValue(dir, "devices.deny",
                     "c " + std::to_string(major) + ":" + std::to_string(minor) + " rwm"));
    }
  }
  return Status::Ok();
}

}  // namespace

std::string CgroupHost::Describe() const {
  switch (layout) {
    case CgroupLayout::kV2:
      return "v2";
    case CgroupLayout::kV1:
      return "v1";
    case CgroupLayout::kNone:
      break;
  }
  return "none: " + reason;
}

CgroupHost DetectCgroupsFrom(const std::string& proc_self_cgroup, const std::string& mountinfo,
                             const std::string& root) {
  CgroupHost host;
  std::map<std::string, Mount> v1_mounts;  // controller -> mount
  std::optional<Mount> unified;
  std::optional<Mount> readonly;
  for (const std::string& line : Split(mountinfo, '\n')) {
    std::vector<std::string> f = Split(line, ' ');
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 6 || dash + 3 >= f.size()) continue;
    const std::string& type = f[dash + 1];
    Mount m{Unescape(f[3]), root + Unescape(f[4])};
    const bool ro = ("," + f[5] + ",").find(",ro,") != std::string::npos;
    if (type == "cgroup2") {
      unified = m;
      if (ro) readonly = m;
    } else if (type == "cgroup") {
      for (const std::string& opt : Split(f[dash + 3], ',')) {
        for (const char* c : kV1Controllers) {
          if (opt == c) {
            v1_mounts[c] = m;
            if (ro) readonly = m;
          }
        }
      }
    }
  }
  std::string unified_path;
  std::map<std::string, std::string> v1_paths;
  for (const std::string& line : Split(proc_self_cgroup, '\n')) {
    size_t a = line.find(':');
    size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (line.substr(0, a) == "0" && controllers.empty()) unified_path = path;
    for (const std::string& c : Split(controllers, ',')) v1_paths[c] = path;
  }
  if (readonly) {
    host.reason = readonly->point + " is read-only";
    return host;
  }
  if (v1_mounts.count("memory")) {
    for (const auto& [controller, mount] : v1_mounts) {
      auto path = v1_paths.find(controller);
      if (path == v1_paths.end()) continue;
      if (auto dir = DirIn(mount, path->second)) host.v1_dirs[controller] = *dir;
    }
    if (!host.v1_dirs.count("memory")) {
      host.reason = "this process's memory cgroup is not mounted here";
      host.v1_dirs.clear();
      return host;
    }
    const std::string& memory = host.v1_dirs["memory"];
    if (::access(memory.c_str(), W_OK) != 0) {
      host.reason = memory + " is not writable (" + strerror(errno) + ")";
      host.v1_dirs.clear();
      return host;
    }
    host.memsw = Exists(memory + "/memory.memsw.limit_in_bytes");
    host.layout = CgroupLayout::kV1;
    return host;
  }
  if (!unified || unified_path.empty()) {
    host.reason = "no cgroup hierarchy is mounted";
    return host;
  }
  auto dir = DirIn(*unified, unified_path);
  if (!dir) {
    host.reason = "this process's cgroup is not under the mounted cgroup2 hierarchy";
    return host;
  }
  // A supervisor that an earlier one moved into the leaf below the agent's cgroup (or that
  // systemd put there: DelegateSubgroup=supervisor) divides the agent's cgroup, not its leaf.
  if (const std::string leaf = std::string("/") + kSupervisorLeaf; dir->ends_with(leaf)) {
    dir = dir->substr(0, dir->size() - leaf.size());
  }
  const std::string controllers = ReadFileOr(*dir + "/cgroup.controllers");
  if (!ListsController(controllers, "memory")) {
    host.reason = *dir + " has no memory controller (delegate it: Delegate=yes in the unit)";
    return host;
  }
  if (::access(dir->c_str(), W_OK) != 0) {
    host.reason = *dir + " is not writable (" + strerror(errno) +
                  "; run the agent as root, or "
                  "with Delegate=yes)";
    return host;
  }
  host.layout = CgroupLayout::kV2;
  host.unified_dir = *dir;
  for (const char* c : {"cpu", "pids", "cpuset"}) {
    if (!ListsController(controllers, c)) {
      host.undelegated.push_back(c);
    }
  }
  return host;
}

CgroupHost DetectCgroups() {
  return DetectCgroupsFrom(ReadFileOr("/proc/self/cgroup"), ReadFileOr("/proc/self/mountinfo"), "");
}

Result<RankCgroup> RankCgroup::Create(const CgroupHost& host, const std::string& name,
                                      const RankLimits& limits) {
  RankCgroup cg;
  cg.layout_ = host.layout;
  if (host.layout == CgroupLayout::kNone) return Status::Unavailable("no cgroups: " + host.reason);
  std::vector<std::string> made;
  auto fail = [&](Status st) -> Result<RankCgroup> {
    for (auto it = made.rbegin(); it != made.rend(); ++it) ::rmdir(it->c_str());
    return st;
  };
  if (host.layout == CgroupLayout::kV2) {
    // Controllers reach the rank's cgroup through every level above it.
    std::string dir = host.unified_dir;
    const std::string wanted = WantedControllers(dir);
    if (Status st = EnableControllers(dir); !st.ok()) return fail(st);
    std::vector<std::string> parts = Split(name, '/');
    for (size_t i = 0; i < parts.size(); ++i) {
      if (Status st = MakeDirs(dir, parts[i], &made); !st.ok()) return fail(st);
      dir += "/" + parts[i];
      if (i + 1 < parts.size()) {
        if (Status st = WriteValue(dir, "cgroup.subtree_control", wanted); !st.ok()) {
          return fail(st);
        }
        if (i + 2 == parts.size() && limits.cpu_milli > 0 && limits.node_cpu_milli > 0) {
          // The agent's cgroup, the rank's parent.
          const std::string weight = std::to_string(CpuWeightOf(limits.node_cpu_milli));
          if (Exists(dir + "/cpu.weight")) {
            if (Status st = WriteValue(dir, "cpu.weight", weight); !st.ok()) return fail(st);
          }
        }
      }
    }
    cg.dirs_ = {dir};
    cg.memory_dir_ = cg.unified_dir_ = dir;
    if (Status st = WriteV2Limits(dir, limits, host.unified_dir); !st.ok()) return fail(st);
    cg.limits_ = limits;
    return cg;
  }
  cg.memsw_ = host.memsw;
  std::set<std::string> seen;  // controllers may share a mount
  for (const char* controller : kV1Controllers) {
    auto base = host.v1_dirs.find(controller);
    if (base == host.v1_dirs.end()) continue;
    const std::string c = controller;
    const bool needed = c == "memory" || (c == "cpu" && limits.cpu_milli > 0) ||
                        (c == "pids" && limits.pids_max > 0) ||
                        (c == "devices" && !limits.denied_devices.empty()) ||
                        (c == "cpuset" && !limits.cpus.empty());
    if (!needed) continue;
    const std::string dir = base->second + "/" + name;
    if (seen.insert(dir).second) {
      if (Status st = MakeDirs(base->second, name, &made); !st.ok()) return fail(st);
      if (std::string(controller) == "memory") {
        cg.dirs_.insert(cg.dirs_.begin(), dir);
      } else {
        cg.dirs_.push_back(dir);
      }
    }
    if (c == "memory") cg.memory_dir_ = dir;
    cg.v1_dirs_[c] = dir;
    if (Status st = WriteV1Limit(c, base->second, name, limits, host.memsw); !st.ok()) {
      return fail(st);
    }
  }
  if (!limits.denied_devices.empty() && !host.v1_dirs.count("devices")) {
    return fail(
        Status::Unavailable("the devices controller is not mounted: GPUs cannot be fenced"));
  }
  if (!limits.cpus.empty() && !host.v1_dirs.count("cpuset")) {
    return fail(Status::Unavailable(
        "the cpuset controller is not mounted: resources.cpu_binding cannot be held"));
  }
  cg.limits_ = limits;
  return cg;
}

std::vector<std::string> RankCgroup::JoinFiles() const {
  std::vector<std::string> files;
  const char* file = layout_ == CgroupLayout::kV2 ? "/cgroup.procs" : "/tasks";
  for (const std::string& dir : dirs_) files.push_back(dir + file);
  return files;
}

CgroupEntry RankCgroup::Entry() const {
  if (layout_ == CgroupLayout::kV2) return CgroupEntry{.clone_into = unified_dir_};
  return CgroupEntry{.join = JoinFiles()};
}

namespace {
// The pids of a cgroup.procs file's text.
std::set<pid_t> ParseProcs(const std::string& text) {
  std::set<pid_t> pids;
  for (const std::string& line : Split(text, '\n')) {
    if (line.empty()) continue;
    try {
      pids.insert(static_cast<pid_t>(std::stol(line)));
    } catch (...) {
    }
  }
  return pids;
}
}  // namespace

std::set<pid_t> RankCgroup::Pids() const { return ReadPids().value_or(std::set<pid_t>{}); }

std::optional<std::set<pid_t>> RankCgroup::ReadPids() const {
  if (dirs_.empty()) return std::nullopt;
  std::optional<std::string> text = ReadFile(dirs_.front() + "/cgroup.procs");
  if (!text) return std::nullopt;
  return ParseProcs(*text);
}

std::optional<std::set<pid_t>> RankCgroupPids(const CgroupHost& host, const std::string& name) {
  std::string dir;
  if (host.layout == CgroupLayout::kV2) {
    dir = host.unified_dir + "/" + name;
  } else if (auto memory = host.v1_dirs.find("memory"); memory != host.v1_dirs.end()) {
    dir = memory->second + "/" + name;  // v1: every rank has a memory cgroup (Create)
  }
  std::optional<std::string> text = dir.empty() ? std::nullopt : ReadFile(dir + "/cgroup.procs");
  if (!text) return std::nullopt;
  return ParseProcs(*text);
}

void RankCgroup::Kill() const {
  if (!unified_dir_.empty() && WriteValue(unified_dir_, "cgroup.kill", "1").ok()) return;
  for (pid_t pid : Pids()) ::kill(pid, SIGKILL);
}

RankUsage RankCgroup::TakeUsage() {
  RankUsage usage;
  if (layout_ == CgroupLayout::kV2) {
    usage.peak_memory_bytes = FileNumber(memory_dir_ + "/memory.peak");
    const std::string events = ReadFileOr(memory_dir_ + "/memory.events");
    usage.oom_kills = std::max<int64_t>(0, KeyedValue(events, "oom_kill"));
    usage.limit_hits = std::max<int64_t>(0, KeyedValue(events, "oom"));
  } else if (layout_ == CgroupLayout::kV1) {
    usage.peak_memory_bytes = TakeNumber(memory_dir_ + "/memory.max_usage_in_bytes");
    usage.limit_hits = std::max<int64_t>(0, TakeNumber(memory_dir_ + "/memory.failcnt"));
    // Recent kernels leave failcnt at 0 on v1: a peak at its limit (the one written, which the
    // kernel rounds down to a page; within a few pages) says it.
    const int64_t limit = limits_.memory_bytes;
    if (usage.limit_hits == 0 && limit > 0 && usage.peak_memory_bytes >= limit - (256 << 10)) {
      usage.limit_hits = 1;
    }
    const int64_t oom_kills =
        KeyedValue(ReadFileOr(memory_dir_ + "/memory.oom_control"), "oom_kill");
    usage.oom_kills = std::max<int64_t>(0, oom_kills - oom_kills_before_);
    oom_kills_before_ = std::max(oom_kills_before_, oom_kills);
  }
  return usage;
}

Status RankCgroup::Recycle(int64_t max_charged, bool seen_empty) const {
  if (layout_ != CgroupLayout::kV1) return Status::Unavailable("only v1 cgroups are reused");
  if (!seen_empty && !Pids().empty()) {
    return Status::Conflict("a process is left in " + memory_dir_);
  }
  const int64_t charged = FileNumber(memory_dir_ + "/memory.usage_in_bytes");
  if (charged < 0 || charged > max_charged) {
    return Status::Conflict(std::to_string(charged) + " bytes stay charged to " + memory_dir_);
  }
  return Status::Ok();
}

Status RankCgroup::Rename(const std::string& leaf) {
  std::vector<std::pair<std::string, std::string>> renamed;  // from, to
  for (const std::string& dir : dirs_) {
    const std::string to = dir.substr(0, dir.rfind('/') + 1) + leaf;
    if (::rename(dir.c_str(), to.c_str()) != 0) {
      const int err = errno;
      for (auto it = renamed.rbegin(); it != renamed.rend(); ++it) {
        (void)::rename(it->second.c_str(), it->first.c_str());
      }
      return Status::Internal("cannot rename cgroup " + dir + " to " + leaf + ": " + strerror(err));
    }
    renamed.emplace_back(dir, to);
  }
  auto moved = [&](std::string& dir) {
    for (const auto& [from, to] : renamed) {
      if (dir == from) dir = to;
    }
  };
  for (std::string& dir : dirs_) moved(dir);
  for (auto& [controller, dir] : v1_dirs_) moved(dir);
  moved(memory_dir_);
  moved(unified_dir_);
  return Status::Ok();
}

bool RankCgroup::FitsSameHierarchies(const RankLimits& a, const RankLimits& b) {
  return (a.memory_bytes > 0) == (b.memory_bytes > 0) && (a.cpu_milli > 0) == (b.cpu_milli > 0) &&
         (a.pids_max > 0) == (b.pids_max > 0) && a.denied_devices == b.denied_devices &&
         a.cpus == b.cpus;
}

Status RankCgroup::Rewrite(const RankLimits& limits) {
  if (layout_ != CgroupLayout::kV1) return Status::Unavailable("only v1 cgroups are rewritten");
  if (!FitsSameHierarchies(limits_, limits)) {
    return Status::Invalid("the limits need other hierarchies than " + memory_dir_ + "'s");
  }
  if (limits.memory_bytes != limits_.memory_bytes) {
    // memory.limit_in_bytes may not exceed memory.memsw.limit_in_bytes: a raise writes memsw
    // first, a cut the limit first.
    const std::string bytes = std::to_string(limits.memory_bytes);
    const bool raise = limits.memory_bytes > limits_.memory_bytes;
    if (memsw_ && raise) {
      BERTH_RETURN_IF_ERROR(WriteValue(memory_dir_, "memory.memsw.limit_in_bytes", bytes));
    }
    BERTH_RETURN_IF_ERROR(WriteValue(memory_dir_, "memory.limit_in_bytes", bytes));
    if (memsw_ && !raise) {
      BERTH_RETURN_IF_ERROR(WriteValue(memory_dir_, "memory.memsw.limit_in_bytes", bytes));
    }
    limits_.memory_bytes = limits.memory_bytes;
  }
  if (limits.cpu_milli > 0 && limits.node_cpu_milli > 0 &&
      limits.node_cpu_milli != limits_.node_cpu_milli) {
    // The node's CPUs changed (an agent restarted with another --cpus): the agent's level too.
    BERTH_RETURN_IF_ERROR(WriteAgentCpuShares(v1_dirs_.at("cpu"), limits.node_cpu_milli));
  }
  limits_.node_cpu_milli = limits.node_cpu_milli;
  if (limits.cpu_milli != limits_.cpu_milli) {
    const std::string& cpu = v1_dirs_.at("cpu");
    BERTH_RETURN_IF_ERROR(WriteValue(cpu, "cpu.cfs_quota_us", V1CfsQuota(limits.cpu_milli)));
    BERTH_RETURN_IF_ERROR(
        WriteValue(cpu, "cpu.shares", std::to_string(CpuSharesOf(limits.cpu_milli))));
    limits_.cpu_milli = limits.cpu_milli;
  }
  if (limits.pids_max != limits_.pids_max) {
    BERTH_RETURN_IF_ERROR(
        WriteValue(v1_dirs_.at("pids"), "pids.max", std::to_string(limits.pids_max)));
    limits_.pids_max = limits.pids_max;
  }
  return Status::Ok();
}

bool RankCgroup::Remove() const {
  bool all = true;
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    if (::rmdir(it->c_str()) != 0 && errno != ENOENT) all = false;
  }
  return all;
}

int64_t CpuSharesOf(int64_t cpu_milli) {
  return std::clamp<int64_t>(cpu_milli * 1024 / 1000, 2, 262144);
}

int64_t CpuWeightOf(int64_t cpu_milli) {
  return std::clamp<int64_t>(cpu_milli * 100 / 1000, 1, 10000);
}

std::string AgentCgroupName(const std::string& state_dir) {
  // FNV-1a (32 bits): stable across builds and simple to compute elsewhere (the integration
  // tests' harness removes what agents it killed left behind).
  uint32_t hash = 2166136261u;
  for (unsigned char c : state_dir) hash = (hash ^ c) * 16777619u;
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", static_cast<unsigned>(hash));
  return std::string("berth-") + hex;
}

std::string RankCgroupName(const std::string& state_dir, const std::string& key) {
  return AgentCgroupName(state_dir) + "/" + key;
}

void RemoveIdleRankCgroups(const CgroupHost& host, const std::string& agent) {
  std::vector<std::string> bases;
  for (const auto& [controller, dir] : host.v1_dirs) bases.push_back(dir + "/" + agent);
  if (!host.unified_dir.empty()) bases.push_back(host.unified_dir + "/" + agent);
  for (const std::string& base : bases) {
    DIR* d = ::opendir(base.c_str());
    if (d == nullptr) continue;
    std::vector<std::string> children;
    while (dirent* e = ::readdir(d)) {
      if (e->d_type == DT_DIR && e->d_name[0] != '.') children.push_back(base + "/" + e->d_name);
    }
    ::closedir(d);
    for (const std::string& child : children) ::rmdir(child.c_str());
    ::rmdir(base.c_str());
  }
}

std::string OutOfMemoryReason(int64_t limit_bytes) {
  return std::string(kOutOfMemory) + " reached its limit of " +
         std::to_string(limit_bytes / (1024 * 1024)) +
         " MiB (resources.memory); the kernel killed it";
}

}  // namespace berth
