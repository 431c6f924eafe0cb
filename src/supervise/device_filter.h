// DeviceFilter: fencing devices off a cgroup2 cgroup, which has no devices files: a small BPF
// program of type BPF_PROG_TYPE_CGROUP_DEVICE, attached to the cgroup, that the kernel runs on each
// open or mknod of a device by a process in it. It refuses (EPERM) the character devices listed and
// allows every other. Used for the v2 layout (supervise/cgroup.h); the v1 layout writes
// devices.deny instead.
//
// The program is built here instruction by instruction (no compiler, no libbpf): it compares the
// device against each denied (major, minor) in turn. Loading and attaching need CAP_SYS_ADMIN (a
// root agent). Once attached, it lives as long as the cgroup.
//
// Thread-safety: reentrant.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace berth {

// Attaches to the cgroup2 directory `cgroup_dir` a program denying `denied` (major, minor)
// character devices. Fails naming the step and the kernel's error (EPERM: not root; EINVAL or
// EBADF: `cgroup_dir` is not a cgroup2 cgroup).
Status DenyDevices(const std::string& cgroup_dir, const std::vector<std::pair<int, int>>& denied);

}  // namespace berth
