// Sanitizers: BERTH_SANITIZED is defined (as 1) when this translation unit is built with ASan or
// TSan, under gcc or clang. Their runtimes replace glibc's allocator and watch every thread, so
// code that relies on glibc's malloc internals or on a vfork-style child checks it.
//
// Thread-safety: a macro; nothing to guard.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BERTH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define BERTH_SANITIZED 1
#endif
#endif
