// WalCheckpointer: copies a WAL database's committed pages back into the database file on a thread
// and connection of its own, so that no commit pays for it. By default SQLite does this inside the
// commit that takes the WAL past 1000 pages: with synchronous=NORMAL that is the only place the
// WAL and the database are synced, and it added ~10-13 ms to one 10,000-job submission in three.
//
// It replaces the writing connection's auto-checkpoint (its WAL hook, which SQLite calls after
// each commit with the WAL's size): past `pages`, the hook wakes the thread, which runs a PASSIVE
// checkpoint. A PASSIVE checkpoint never waits for, nor blocks, the writer or readers; frames a
// reader still needs are copied by a later one. The WAL starts over from its beginning at the first
// commit after a complete checkpoint. Under writes with no pause between them the thread may never
// complete one: past kCatchUpFactor times `pages`, the commit checkpoints itself, as SQLite would
// have, so the WAL stays bounded however much is written.
//
// Thread-safety: the hook runs on the committing thread and only signals; the thread owns its
// connection. Destroy it before the writing connection (it removes its hook).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "store/sqlite.h"

namespace berth {

class WalCheckpointer {
 public:
  // Opens its own connection to `writer`'s file and installs the hook on `writer`.
  static Result<std::unique_ptr<WalCheckpointer>> Start(SqliteDb& writer, int pages = 1000);
  ~WalCheckpointer();
  WalCheckpointer(const WalCheckpointer&) = delete;
  WalCheckpointer& operator=(const WalCheckpointer&) = delete;

  // Past this many times `pages`, the commit checkpoints itself: the thread has fallen behind.
  static constexpr int kCatchUpFactor = 4;

  // Checkpoints run so far on the thread, and in commits (for tests).
  int64_t background_checkpoints() const { return background_.load(); }
  int64_t commit_checkpoints() const { return in_commit_.load(); }

 private:
  WalCheckpointer(SqliteDb& writer, std::unique_ptr<SqliteDb> db, int pages)
      : writer_(writer), db_(std::move(db)), pages_(pages) {}
  static int Hook(void* self, sqlite3* db, const char* name, int pages);
  void Loop() EXCLUDES(mu_);

  SqliteDb& writer_;
  const std::unique_ptr<SqliteDb> db_;  // used by the thread only
  const int pages_;
  std::atomic<int64_t> background_{0};
  std::atomic<int64_t> in_commit_{0};
  Mutex mu_;
  CondVar cv_;
  bool due_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace berth
