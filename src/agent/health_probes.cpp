#include "agent/health_probes.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

#include "common/strings.h"

namespace berth {

namespace {

// A decimal number with blanks around it (nvidia-smi's CSV, the kernel's lines).
std::optional<int64_t> ParseInt(std::string_view s) { return ParseDecimal(Trim(s)); }

std::string GpuWord(int gpu) { return "GPU " + std::to_string(gpu); }

}  // namespace

Result<std::set<int>> ParseXidList(const std::string& text) {
  std::set<int> out;
  for (const auto& part : Split(text, ',')) {
    if (Trim(part).empty()) continue;
    auto v = ParseInt(part);
    if (!v || *v > 100000)
      return Status::Invalid("bad XID '" + Trim(part) + "' (expected 13,31,...)");
    out.insert(static_cast<int>(*v));
  }
  return out;
}

std::string NormalizeBusId(std::string_view bus_id) {
  std::string s = Trim(std::string(bus_id));
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (auto dot = s.rfind('.'); dot != std::string::npos) s.resize(dot);  // the function
  auto parts = Split(s, ':');
  if (parts.size() == 2) parts.insert(parts.begin(), "0");
  if (parts.size() != 3) return s;
  // The domain is 4 hex digits in the kernel's log and 8 in nvidia-smi's.
  std::string domain = parts[0];
  while (domain.size() > 4 && domain[0] == '0') domain.erase(0, 1);
  while (domain.size() < 4) domain = "0" + domain;
  return domain + ":" + parts[1] + ":" + parts[2];
}

std::optional<XidEvent> ParseXidLine(std::string_view line) {
  size_t at = line.find("NVRM: Xid (");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + 11);
  if (rest.substr(0, 4) == "PCI:") rest.remove_prefix(4);
  size_t close = rest.find(')');
  if (close == std::string_view::npos) return std::nullopt;
  XidEvent event;
  event.bus_id = NormalizeBusId(rest.substr(0, close));
  rest.remove_prefix(close + 1);
  if (rest.substr(0, 1) == ":") rest.remove_prefix(1);
  while (!rest.empty() && rest[0] == ' ') rest.remove_prefix(1);
  size_t digits = 0;
  while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) ++digits;
  auto code = ParseInt(rest.substr(0, digits));
  if (!code || *code > 100000) return std::nullopt;
  event.code = static_cast<int>(*code);
  rest.remove_prefix(digits);
  while (!rest.empty() && (rest[0] == ',' || rest[0] == ' ')) rest.remove_prefix(1);
  event.text = Trim(std::string(rest.substr(0, 200)));
  return event;
}

std::string XidMeaning(int code) {
  switch (code) {
    case 13:
      return "graphics engine exception";
    case 31:
      return "GPU memory page fault";
    case 43:
      return "GPU stopped processing";
    case 45:
      return "preemptive cleanup";
    case 48:
      return "double-bit ECC error";
    case 61:
      return "internal microcontroller breakpoint";
    case 62:
      return "internal microcontroller halt";
    case 63:
      return "ECC page retirement or row remapping";
    case 64:
      return "ECC page retirement or row remapping failure";
    case 68:
      return "video decoder exception";
    case 69:
      return "graphics engine class error";
    case 74:
      return "NVLink error";
    case 79:
      return "fell off the bus";
    case 92:
      return "high single-bit ECC error rate";
    case 94:
      return "contained ECC error";
    case 95:
      return "uncontained ECC error";
    case 119:
      return "GSP RPC timeout";
    case 120:
      return "GSP error";
    default:
      return "";
  }
}

std::vector<GpuHealthRow> ParseGpuHealthRows(const std::string& csv) {
  std::vector<GpuHealthRow> rows;
  for (const auto& line : Split(csv, '\n')) {
    auto fields = Split(line, ',');
    if (fields.size() < 2) continue;
    auto index = ParseInt(fields[0]);
    if (!index || *index > 1024) continue;
    GpuHealthRow row;
    row.index = static_cast<int>(*index);
    row.bus_id = NormalizeBusId(fields[1]);
    if (fields.size() > 2) row.ecc_uncorrected = ParseInt(fields[2]);
    auto yes = [](const std::string& f) {
      std::string t = Trim(f);
      return t == "Yes" || t == "yes" || t == "1";
    };
    if (fields.size() > 3) row.retired_pending = yes(fields[3]);
    if (fields.size() > 4) row.remapped_pending = yes(fields[4]);
    rows.push_back(std::move(row));
  }
  return rows;
}

// --- FileKernelLog ---

FileKernelLog::FileKernelLog(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) return;
  struct stat st {};
  if (::fstat(fd_, &st) == 0) {
    device_ = S_ISCHR(st.st_mode);
    inode_ = st.st_ino;
  }
  if (device_) {
    ::lseek(fd_, 0, SEEK_END);  // /dev/kmsg: from the next record on
  } else {
    offset_ = st.st_size;
  }
}

FileKernelLog::~FileKernelLog() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::string> FileKernelLog::ReadNew() {
  std::vector<std::string> lines;
  if (fd_ < 0) {
    // Not there when the agent started (a test's file made later): from its start.
    fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) return lines;
    struct stat st {};
    if (::fstat(fd_, &st) == 0) {
      device_ = S_ISCHR(st.st_mode);
      inode_ = st.st_ino;
    }
  }
  char buf[8192];
  if (device_) {
    for (int i = 0; i < 10000; ++i) {
      ssize_t n = ::read(fd_, buf, sizeof(buf));
      if (n < 0 && errno == EPIPE) continue;  // records overwritten before we read them
      if (n <= 0) break;
      lines.emplace_back(buf, static_cast<size_t>(n));
    }
    return lines;
  }
  struct stat st {};
  struct stat now {};
  if (::stat(path_.c_str(), &now) == 0 && now.st_ino != inode_) {
    // Rotated (renamed away, a new file in its place): the rest of the old one, then the new one
    // from its start.
    std::vector<std::string> rest = ReadFrom(fd_);
    ::close(fd_);
    fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    inode_ = now.st_ino;
    offset_ = 0;
    partial_.clear();
    if (fd_ < 0) return rest;
    for (auto& line : ReadFrom(fd_)) rest.push_back(std::move(line));
    return rest;
  }
  if (::fstat(fd_, &st) == 0 && st.st_size < offset_) offset_ = 0;  // truncated
  return ReadFrom(fd_);
}

std::vector<std::string> FileKernelLog::ReadFrom(int fd) {
  std::vector<std::string> lines;
  char buf[8192];
  for (int i = 0; i < 1000; ++i) {
    ssize_t n = ::pread(fd, buf, sizeof(buf), offset_);
    if (n <= 0) break;
    offset_ += n;
    partial_.append(buf, static_cast<size_t>(n));
  }
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(partial_.substr(start, nl - start));
  }
  partial_.erase(0, start);
  if (partial_.size() > 64 * 1024) partial_.clear();
  return lines;
}

// --- LocalNodeSystem ---

std::optional<int64_t> LocalNodeSystem::FreeMib(const std::string& path) {
  struct statvfs s {};
  if (::statvfs(path.c_str(), &s) != 0) return std::nullopt;
  return static_cast<int64_t>(s.f_bavail) * static_cast<int64_t>(s.f_frsize) / (1024 * 1024);
}

bool LocalNodeSystem::Writable(const std::string& dir) { return ::access(dir.c_str(), W_OK) == 0; }

std::vector<std::string> LocalNodeSystem::Executables(const std::string& dir) {
  std::vector<std::string> out;
  if (dir.empty()) return out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.' || name.back() == '~') continue;
    std::string path = dir + "/" + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::access(path.c_str(), X_OK) != 0) continue;
    out.push_back(path);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// --- HealthProber ---

HealthProber::HealthProber(const HealthSettings& settings, ProbeTargets targets,
                           CommandRunner& runner, KernelLog* kernel_log, NodeSystem& system)
    : settings_(settings),
      targets_(std::move(targets)),
      runner_(runner),
      kernel_log_(kernel_log),
      system_(system) {
  if (!settings_.nvidia_smi.empty()) nvidia_smi_ = FindExecutable(settings_.nvidia_smi);
}

std::vector<ProbeRun> HealthProber::RunLight(std::optional<int64_t> clock_skew_ms) {
  std::vector<ProbeRun> out;
  out.push_back(Disk());
  if (!targets_.cgroup_dirs.empty()) out.push_back(Cgroups());
  if (clock_skew_ms) out.push_back(Clock(*clock_skew_ms));
  if (!nvidia_smi_.empty() && !targets_.gpus.empty()) Gpus(out);
  if (kernel_log_) out.push_back(Xid());
  for (const auto& path : system_.Executables(settings_.scripts_dir)) {
    out.push_back(Script(path, "health.d/", {}, nullptr, settings_.timeout_ms));
  }
  return out;
}

std::vector<ProbeRun> HealthProber::RunIdle(const std::function<bool()>& abort, bool* aborted) {
  std::vector<ProbeRun> out;
  *aborted = false;
  for (const auto& path : system_.Executables(settings_.idle_dir)) {
    ProbeRun run = Script(path, "health-idle.d/", abort, aborted, settings_.idle_timeout_ms);
    if (*aborted) break;
    out.push_back(std::move(run));
  }
  return out;
}

ProbeRun HealthProber::Disk() {
  ProbeRun run{.name = "disk"};
  for (const auto& path : targets_.disk_paths) {
    std::optional<int64_t> free = system_.FreeMib(path);
    if (free && *free < settings_.min_free_mib) {
      run.findings.push_back({-1, fmt::format("disk: {} has {} MiB free (below {} MiB)", path,
                                              *free, settings_.min_free_mib)});
    }
  }
  return run;
}

ProbeRun HealthProber::Cgroups() {
  ProbeRun run{.name = "cgroups"};
  for (const auto& dir : targets_.cgroup_dirs) {
    if (!system_.Writable(dir)) {
      run.findings.push_back({-1, "cgroups: " + dir + " is gone or not writable"});
    }
  }
  return run;
}

ProbeRun HealthProber::Clock(int64_t skew_ms) {
  ProbeRun run{.name = "clock"};
  if (std::llabs(skew_ms) > settings_.max_clock_skew_ms) {
    run.findings.push_back(
        {-1, fmt::format("clock: {} ms {} the server's (more than {} ms)", std::llabs(skew_ms),
                         skew_ms > 0 ? "ahead of" : "behind", settings_.max_clock_skew_ms)});
  }
  return run;
}

void HealthProber::Gpus(std::vector<ProbeRun>& out) {
  CommandOutcome got = runner_.Run({{nvidia_smi_, std::string("--query-gpu=") + kGpuHealthQuery,
                                     "--format=csv,noheader,nounits"},
                                    {},
                                    settings_.timeout_ms});
  ProbeRun gpus{.name = "gpus", .timed_out = got.timed_out, .duration_ms = got.duration_ms};
  ProbeRun ecc{.name = "ecc", .duration_ms = got.duration_ms};
  if (!got.ok()) {
    gpus.findings.push_back({-1, "gpus: nvidia-smi failed: " + got.Failure()});
    out.push_back(std::move(gpus));
    return;  // "ecc" did not run
  }
  std::map<int, GpuHealthRow> seen;
  for (auto& row : ParseGpuHealthRows(got.output)) seen[row.index] = std::move(row);
  // Kept across runs: a GPU that fell off the bus drops out of the list, and its XIDs must still
  // name it.
  for (const auto& [index, row] : seen) bus_to_gpu_[row.bus_id] = index;
  for (int gpu : targets_.gpus) {
    auto it = seen.find(gpu);
    if (it == seen.end()) {
      gpus.findings.push_back({gpu, fmt::format("gpus: {} is missing from nvidia-smi ({} of {} "
                                                "listed)",
                                                GpuWord(gpu), seen.size(), targets_.gpus.size())});
      continue;
    }
    const GpuHealthRow& row = it->second;
    if (row.ecc_uncorrected && *row.ecc_uncorrected > 0) {
      ecc.findings.push_back({gpu, fmt::format("ecc: {} uncorrected ECC errors on {}",
                                               *row.ecc_uncorrected, GpuWord(gpu))});
    } else if (row.retired_pending) {
      ecc.findings.push_back(
          {gpu, "ecc: page retirement pending on " + GpuWord(gpu) + " (needs a GPU reset)"});
    } else if (row.remapped_pending) {
      ecc.findings.push_back(
          {gpu, "ecc: row remapping pending on " + GpuWord(gpu) + " (needs a GPU reset)"});
    }
  }
  out.push_back(std::move(gpus));
  out.push_back(std::move(ecc));
}

ProbeRun HealthProber::Xid() {
  ProbeRun run{.name = "xid"};
  std::set<std::pair<int, int>> seen;  // (gpu, code): one finding each per run
  for (const auto& line : kernel_log_->ReadNew()) {
    auto event = ParseXidLine(line);
    if (!event || settings_.xid_ignore.count(event->code)) continue;
    auto it = bus_to_gpu_.find(event->bus_id);
    const bool node_level = settings_.xid_node.count(event->code) > 0 || it == bus_to_gpu_.end();
    const int gpu = it == bus_to_gpu_.end() ? -1 : it->second;
    if (!seen.insert({node_level ? -1 : gpu, event->code}).second) continue;
    std::string where = gpu >= 0 ? GpuWord(gpu) : "PCI " + event->bus_id;
    std::string meaning = XidMeaning(event->code);
    if (meaning.empty()) meaning = event->text;
    run.findings.push_back(
        {node_level ? -1 : gpu, fmt::format("xid {} on {}{}", event->code, where,
                                            meaning.empty() ? "" : " (" + meaning + ")")});
  }
  return run;
}

ProbeRun HealthProber::Script(const std::string& path, const std::string& prefix,
                              const std::function<bool()>& abort, bool* aborted,
                              int64_t timeout_ms) {
  std::string name = prefix + path.substr(path.rfind('/') + 1);
  CommandOutcome got = runner_.Run({{path}, {}, timeout_ms}, abort);
  if (aborted) *aborted = got.aborted;
  ProbeRun run{.name = name, .timed_out = got.timed_out, .duration_ms = got.duration_ms};
  if (got.ok()) return run;
  // "gpu N: reason" in the first line names one GPU.
  std::string line = got.FirstLine();
  int gpu = -1;
  if (StartsWith(line, "gpu ")) {
    size_t colon = line.find(':');
    auto index = colon == std::string::npos ? std::nullopt
                                            : ParseInt(std::string_view(line).substr(4, colon - 4));
    if (index &&
        std::find(targets_.gpus.begin(), targets_.gpus.end(), *index) != targets_.gpus.end()) {
      gpu = static_cast<int>(*index);
    }
  }
  std::string why = got.timed_out || line.empty() ? got.Failure() : line;
  run.findings.push_back({gpu, name + ": " + why});
  return run;
}

std::string HealthProber::RunHooks(const std::string& dir, const std::string& what,
                                   const std::map<std::string, std::string>& env) {
  for (const auto& path : system_.Executables(dir)) {
    CommandOutcome got = runner_.Run({{path}, env, settings_.hook_timeout_ms});
    if (got.ok()) continue;
    return what + "/" + path.substr(path.rfind('/') + 1) + ": " + got.Failure();
  }
  return "";
}

}  // namespace berth
