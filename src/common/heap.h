// Heap: when the process's freed memory goes back to the kernel (glibc malloc).
//
// glibc serves threads that allocate at the same time from separate arenas, and keeps freed memory
// at the top of an arena resident until that top exceeds the trim threshold. The server raises the
// threshold (KeepFreedMemory) so that a scheduling pass does not fault its snapshot in again each
// time; that leaves every arena at the high-water mark of the busiest burst its threads served.
// malloc_trim gives back the main arena's top and the free pages inside every arena, but not the
// free top of the other arenas: only a large free in that arena does, and only while the threshold
// is low. So an idle trim has three steps: BeginIdleTrim lowers the threshold, every long-lived
// thread that allocates calls TrimThisThreadsArena, and EndIdleTrim runs malloc_trim and raises the
// threshold again. Under ASan or TSan, whose allocators replace glibc's, these do nothing useful
// and no harm.
//
// Thread-safety: every function may be called from any thread. Between BeginIdleTrim and
// EndIdleTrim every large free also gives memory back, which a busy thread pays for in page faults
// later: trim only when the process is idle.
#pragma once

namespace berth::heap {

// Keeps freed memory for reuse (blocks under 32 MiB come from the arenas, whose free tops are kept
// up to 256 MiB) until the next idle trim. Call once at start, before the threads start.
void KeepFreedMemory();

// Lowers the trim threshold for an idle trim.
void BeginIdleTrim();

// Gives the free top of the calling thread's arena back to the kernel (between BeginIdleTrim and
// EndIdleTrim; outside them it does nothing).
void TrimThisThreadsArena();

// Gives back the main arena's free top and the free pages inside every arena (malloc_trim), then
// raises the threshold again.
void EndIdleTrim();

}  // namespace berth::heap
