// CloneIntoCgroup: starting a child that is born in a cgroup2 cgroup (clone3 with
// CLONE_INTO_CGROUP, Linux 5.7), so that it never has to join one. A join (writing to
// cgroup.procs) migrates a live process: an open and a write, and the kernel's global threadgroup
// lock taken for writing; a child started in place skips all of it (bench/clone_bench.cpp: ~17 µs
// of a child's CPU per join on this project's machines, bench/README.md "Isolation"). The v2
// layout's steps start this way (supervise/step.h); a v1 hierarchy has no such call.
//
// The child shares this process's memory (CLONE_VM) and runs `fn(arg)` on a stack of its own, as
// glibc's clone() would: until it execs it may only make system calls, and it ends when `fn`
// returns, with its value as its exit status. glibc 2.36 has no wrapper for clone3, and a raw
// system call cannot return into a C frame on a new stack, so the call is a few instructions of
// assembly, written for x86-64 only: elsewhere CloneIntoCgroup fails with ENOSYS and callers fall
// back to clone() and a join.
//
// Thread-safety: call it from a single-threaded process. Until it execs, the child runs on the
// calling thread's memory and thread-local storage (errno included), as with glibc's clone().
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace berth {

// Starts `fn(arg)` in a child on the `stack_size` bytes at `stack` (16-byte aligned at its top),
// born in the cgroup2 directory open as `cgroup_fd`; the parent gets `exit_signal` at its end.
// Returns the child's pid, or -1 with errno: ENOSYS (no clone3 here: another architecture, a
// kernel before 5.3, a seccomp filter), E2BIG or EINVAL (a kernel from 5.3 to 5.6, without
// CLONE_INTO_CGROUP), EBADF (`cgroup_fd` is not a cgroup2 directory), EBUSY (the cgroup has
// controllers for children and so takes no process), EOPNOTSUPP (a threaded cgroup), ENODEV (one
// being removed), EACCES, EAGAIN (its pids.max, or the node's limit), ENOMEM.
pid_t CloneIntoCgroup(int (*fn)(void*), void* arg, char* stack, size_t stack_size, int cgroup_fd,
                      int exit_signal);

}  // namespace berth
