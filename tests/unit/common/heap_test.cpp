// The idle heap trim (common/heap.h): memory a thread freed at the top of its own arena goes back
// to the kernel only when that thread trims it; malloc_trim alone does not reach it.
#include "common/heap.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "common/sanitizers.h"

namespace berth {
namespace {

#ifndef BERTH_SANITIZED
// Bytes the arenas hold from the kernel (all arenas; not the blocks mmapped on their own).
size_t ArenaBytes() { return mallinfo2().arena; }
#endif

TEST(Heap, AThreadsArenaGoesBackOnlyWhenThatThreadTrimsIt) {
#ifdef BERTH_SANITIZED
  GTEST_SKIP() << "ASan and TSan replace glibc's allocator; there is no arena to trim";
#else
  heap::KeepFreedMemory();
  constexpr size_t kBlock = 16 << 10;
  constexpr size_t kBlocks = 2048;  // 32 MiB, under the mmap threshold: from the thread's arena
  std::latch freed(1), trim(1), trimmed(1), done(1);
  std::thread worker([&] {
    std::vector<void*> blocks;
    blocks.reserve(kBlocks);  // below the blocks: nothing live above them once they are freed
    for (size_t i = 0; i < kBlocks; ++i) {
      blocks.push_back(std::malloc(kBlock));
      static_cast<char*>(blocks.back())[0] = 1;
    }
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
    freed.count_down();
    trim.wait();
    heap::TrimThisThreadsArena();
    trimmed.count_down();
    done.wait();
  });
  freed.wait();
  const size_t kept = ArenaBytes();
  malloc_trim(0);  // the main arena and the pages inside free chunks; not another arena's top
  EXPECT_GT(ArenaBytes() + (1 << 20), kept);
  EXPECT_GT(kept, kBlock * kBlocks);

  heap::BeginIdleTrim();
  trim.count_down();
  trimmed.wait();
  heap::EndIdleTrim();
  EXPECT_LT(ArenaBytes() + kBlock * kBlocks / 2, kept)
      << "the worker's arena kept its free top: " << kept << " -> " << ArenaBytes() << " bytes";
  done.count_down();
  worker.join();
#endif
}

}  // namespace
}  // namespace berth
