#include "common/heap.h"

#include <malloc.h>

#include <cstdlib>

namespace berth::heap {
namespace {

// The server's memory comes and goes in big blocks: a scheduling pass over 100,000 pending jobs
// builds tens of MiB of snapshot and frees it, a 10,000-job submission as much. By default glibc
// hands such blocks back to the kernel at once (munmap, or trimming the top of an arena) and the
// next pass faults every page in again: at 90,000 pending, ~6,800 page faults and two thirds of a
// pass's CPU on a VM where a fault costs 11 us, which a submission arriving meanwhile waited for.
constexpr int kMmapThreshold = 32 << 20;
constexpr int kKeptTop = 256 << 20;
// During an idle trim an arena keeps at most this much free top.
constexpr int kIdleTop = 128 << 10;
// A free of at least 64 KiB (glibc's FASTBIN_CONSOLIDATION_THRESHOLD) makes an arena compare its
// free top with the threshold; below kMmapThreshold, so it comes from the thread's own arena.
constexpr size_t kProbe = 256 << 10;

}  // namespace

void KeepFreedMemory() {
  mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
  mallopt(M_TRIM_THRESHOLD, kKeptTop);
}

void BeginIdleTrim() { mallopt(M_TRIM_THRESHOLD, kIdleTop); }

void TrimThisThreadsArena() {
  void* probe = std::malloc(kProbe);
  if (probe == nullptr) return;
  // The compiler may drop a malloc and free it can see through: make the block look used.
  asm volatile("" : : "r"(probe) : "memory");
  std::free(probe);
}

void EndIdleTrim() {
  malloc_trim(0);
  mallopt(M_TRIM_THRESHOLD, kKeptTop);
}

}  // namespace berth::heap
