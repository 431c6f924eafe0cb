#include "supervise/clone_into_cgroup.h"

#include <linux/sched.h>
#include <sched.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstdint>

namespace berth {

pid_t CloneIntoCgroup(int (*fn)(void*), void* arg, char* stack, size_t stack_size, int cgroup_fd,
                      int exit_signal) {
#if defined(__x86_64__) && defined(SYS_clone3) && defined(CLONE_INTO_CGROUP)
  clone_args args{};
  args.flags = CLONE_VM | CLONE_INTO_CGROUP;
  args.exit_signal = static_cast<uint64_t>(exit_signal);
  args.stack = reinterpret_cast<uintptr_t>(stack);
  args.stack_size = stack_size;
  args.cgroup = static_cast<uint64_t>(cgroup_fd);
  // The child returns from the system call with 0 in rax and its stack pointer at the stack's top;
  // every other register is the parent's, so it finds fn and arg where they were put (r12, r13,
  // which the call preserves), aligns its stack as the ABI asks before a call, calls fn on it and
  // exits with its value. The parent jumps over that with the pid, or -errno.
  register int (*fn_reg)(void*) asm("r12") = fn;
  register void* arg_reg asm("r13") = arg;
  long ret = SYS_clone3;
  asm volatile(
      "syscall\n\t"
      "testq %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "xorl %%ebp, %%ebp\n\t"  // the outermost frame, for whoever walks this stack
      "andq $-16, %%rsp\n\t"
      "movq %%r13, %%rdi\n\t"
      "callq *%%r12\n\t"
      "movl %%eax, %%edi\n\t"
      "movl %[exit], %%eax\n\t"
      "syscall\n\t"
      "ud2\n\t"
      "1:\n\t"
      : "+a"(ret)
      : "D"(&args), "S"(sizeof(args)), "r"(fn_reg), "r"(arg_reg), [exit] "i"(SYS_exit)
      : "rcx", "r11", "memory", "cc");
  if (ret < 0) {
    errno = static_cast<int>(-ret);
    return -1;
  }
  return static_cast<pid_t>(ret);
#else
  (void)fn, (void)arg, (void)stack, (void)stack_size, (void)cgroup_fd, (void)exit_signal;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace berth
