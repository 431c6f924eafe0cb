#include "supervise/device_filter.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace berth {

namespace {

bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn insn{};
  insn.code = code;
  insn.dst_reg = dst & 0xf;
  insn.src_reg = src & 0xf;
  insn.off = off;
  insn.imm = imm;
  return insn;
}

// The program, for the context struct bpf_cgroup_dev_ctx {u32 access_type; u32 major; u32 minor}
// in r1:
//   r2 = access_type & 0xffff          (the device's type)
//   if r2 != char goto allow
//   r3 = major; r4 = minor
//   for each denied: if r3 == MAJOR && r4 == MINOR goto deny
//   allow: return 1
//   deny:  return 0
std::vector<bpf_insn> Program(const std::vector<std::pair<int, int>>& denied) {
  const int n = static_cast<int>(denied.size());
  const int allow = 5 + 2 * n;
  const int deny = allow + 2;
  std::vector<bpf_insn> p;
  p.push_back(Insn(BPF_LDX | BPF_W | BPF_MEM, 2, 1, 0, 0));
  p.push_back(Insn(BPF_ALU64 | BPF_AND | BPF_K, 2, 0, 0, 0xffff));
  p.push_back(
      Insn(BPF_JMP | BPF_JNE | BPF_K, 2, 0, static_cast<int16_t>(allow - 3), BPF_DEVCG_DEV_CHAR));
  p.push_back(Insn(BPF_LDX | BPF_W | BPF_MEM, 3, 1, 4, 0));
  p.push_back(Insn(BPF_LDX | BPF_W | BPF_MEM, 4, 1, 8, 0));
  for (int k = 0; k < n; ++k) {
    const int at = 5 + 2 * k;
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, 3, 0, 1, denied[static_cast<size_t>(k)].first));
    p.push_back(Insn(BPF_JMP | BPF_JEQ | BPF_K, 4, 0, static_cast<int16_t>(deny - (at + 2)),
                     denied[static_cast<size_t>(k)].second));
  }
  p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 1));
  p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0));
  p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return p;
}

}  // namespace

Status DenyDevices(const std::string& cgroup_dir, const std::vector<std::pair<int, int>>& denied) {
  // The program's jumps are 16 bits; a node has at most a few dozen GPUs.
  if (denied.size() > 4096) return Status::Invalid("too many devices to deny");
  std::vector<bpf_insn> program = Program(denied);
  static const char kLicense[] = "Apache-2.0";
  bpf_attr load{};
  load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  load.insn_cnt = static_cast<uint32_t>(program.size());
  load.insns = reinterpret_cast<uint64_t>(program.data());
  load.license = reinterpret_cast<uint64_t>(kLicense);
  // No verifier log unless the load fails (a log that does not fit fails the load: ENOSPC).
  int prog = static_cast<int>(::syscall(SYS_bpf, BPF_PROG_LOAD, &load, sizeof(load)));
  if (prog < 0) {
    const int err = errno;
    std::string log(64 * 1024, '\0');
    load.log_buf = reinterpret_cast<uint64_t>(log.data());
    load.log_size = static_cast<uint32_t>(log.size());
    load.log_level = 1;
    prog = static_cast<int>(::syscall(SYS_bpf, BPF_PROG_LOAD, &load, sizeof(load)));
    if (prog < 0) {
      log.resize(strnlen(log.data(), log.size()));
      return Status::Internal(std::string("cannot load the device filter (bpf): ") + strerror(err) +
                              (log.empty() ? "" : ": " + log));
    }
  }
  const int dir = ::open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    const int err = errno;
    ::close(prog);
    return Status::Internal("cannot open " + cgroup_dir + ": " + strerror(err));
  }
  bpf_attr attach{};
  attach.target_fd = static_cast<uint32_t>(dir);
  attach.attach_bpf_fd = static_cast<uint32_t>(prog);
  attach.attach_type = BPF_CGROUP_DEVICE;
  // Beside whatever the service manager attached above (systemd's DevicePolicy does, with MULTI).
  attach.attach_flags = BPF_F_ALLOW_MULTI;
  const long rc = ::syscall(SYS_bpf, BPF_PROG_ATTACH, &attach, sizeof(attach));
  const int err = errno;
  ::close(dir);
  ::close(prog);  // the attachment holds the program
  if (rc != 0) {
    return Status::Internal("cannot attach the device filter to " + cgroup_dir + ": " +
                            strerror(err));
  }
  return Status::Ok();
}

}  // namespace berth
