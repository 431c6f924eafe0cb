// What starting a job step's child in its cgroup costs (bench/README.md "Isolation"): a
// child that shares this memory (clone(CLONE_VM), as supervise/step.cpp starts steps) and exits at
// once, started three ways into a cgroup2 cgroup made under this process's own:
//
//   BM_CloneOutside     no cgroup: the floor
//   BM_CloneThenJoin    the child writes "0" to the cgroup's cgroup.procs first (the v1 layout's
//                       way, and v2's before clone3)
//   BM_CloneIntoCgroup  the child is born in it (supervise/clone_into_cgroup.h; the v2 layout)
//   BM_CloneThenJoinV1  the child joins a cgroup in each of the v1 memory, cpu and pids hierarchies
//                       (the v1 layout's rank with a memory, CPU and pids limit), where mounted
//
// Each reports wall time per child (start to reaped) and the children's CPU (`child_cpu_us`, from
// getrusage). Needs root and a writable cgroup2 hierarchy (/sys/fs/cgroup/unified on the hybrid
// hosts here: no controllers, so this is the cost of the migration alone). Build and run:
//   cmake --build build --target clone_bench && sudo ./build/bench/clone_bench
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "supervise/cgroup.h"
#include "supervise/clone_into_cgroup.h"
#include "support/cgroup2.h"

namespace {

constexpr size_t kStack = 64 * 1024;

struct Child {
  std::vector<const char*> procs;  // the cgroup.procs files to join
};

int ExitAtOnce(void* arg) {
  const Child* c = static_cast<const Child*>(arg);
  for (const char* procs : c->procs) {
    const int fd = ::open(procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, "0", 1) != 1) _exit(1);
    ::close(fd);
  }
  _exit(0);
}

double ChildCpuUs() {
  rusage u{};
  ::getrusage(RUSAGE_CHILDREN, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 + u.ru_utime.tv_usec + u.ru_stime.tv_usec;
}

enum class How { kOutside, kJoin, kInto, kJoinV1 };

void Run(benchmark::State& state, How how) {
  const std::string base = berth::testing::OwnCgroup2Dir();
  std::vector<std::string> v1;  // this process's directories in the v1 hierarchies joined
  if (how == How::kJoinV1) {
    const berth::CgroupHost host = berth::DetectCgroups();
    for (const char* controller : {"memory", "cpu", "pids"}) {
      if (auto it = host.v1_dirs.find(controller); it != host.v1_dirs.end())
        v1.push_back(it->second);
    }
  }
  if (base.empty() || (how == How::kJoinV1 && v1.empty())) {
    state.SkipWithError("needs root and a writable cgroup2 hierarchy (and v1 ones for V1)");
    return;
  }
  const std::string leaf = "/berth-clone-bench-" + std::to_string(::getpid());
  const std::string dir = base + leaf;
  ::mkdir(dir.c_str(), 0755);
  std::vector<std::string> procs;
  if (how == How::kJoin) procs.push_back(dir + "/cgroup.procs");
  for (const std::string& d : v1) {
    ::mkdir((d + leaf).c_str(), 0755);
    procs.push_back(d + leaf + "/cgroup.procs");
  }
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  auto stack = std::make_unique<char[]>(kStack);
  Child child;
  for (const std::string& p : procs) child.procs.push_back(p.c_str());
  const double cpu_before = ChildCpuUs();
  for (auto _ : state) {
    pid_t pid =
        how == How::kInto
            ? berth::CloneIntoCgroup(ExitAtOnce, &child, stack.get(), kStack, dir_fd, SIGCHLD)
            : ::clone(ExitAtOnce, stack.get() + kStack, CLONE_VM | SIGCHLD, &child);
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      state.SkipWithError("a child could not be started or failed");
      break;
    }
  }
  state.counters["child_cpu_us"] =
      benchmark::Counter((ChildCpuUs() - cpu_before) / static_cast<double>(state.iterations()));
  ::close(dir_fd);
  ::rmdir(dir.c_str());
  for (const std::string& d : v1) ::rmdir((d + leaf).c_str());
}

void BM_CloneOutside(benchmark::State& state) { Run(state, How::kOutside); }
void BM_CloneThenJoin(benchmark::State& state) { Run(state, How::kJoin); }
void BM_CloneIntoCgroup(benchmark::State& state) { Run(state, How::kInto); }
void BM_CloneThenJoinV1(benchmark::State& state) { Run(state, How::kJoinV1); }

BENCHMARK(BM_CloneOutside)->UseRealTime();
BENCHMARK(BM_CloneThenJoin)->UseRealTime();
BENCHMARK(BM_CloneIntoCgroup)->UseRealTime();
BENCHMARK(BM_CloneThenJoinV1)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
