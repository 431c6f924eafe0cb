#include "store/wal_checkpointer.h"

#include <sqlite3.h>

#include "common/executor.h"
#include "common/log.h"

namespace berth {

Result<std::unique_ptr<WalCheckpointer>> WalCheckpointer::Start(SqliteDb& writer, int pages) {
  Result<std::unique_ptr<SqliteDb>> db = SqliteDb::Open(writer.path(), /*create=*/false);
  if (!db.ok()) return db.status();
  // A connection reads the file's header (and learns it is in WAL mode) at its first statement;
  // before that, a checkpoint through it does nothing.
  Result<std::string> mode = (*db)->QueryText("PRAGMA journal_mode");
  if (!mode.ok()) return mode.status();
  std::unique_ptr<WalCheckpointer> self(new WalCheckpointer(writer, std::move(*db), pages));
  self->thread_ = std::thread([p = self.get()] { p->Loop(); });
  // Replaces the auto-checkpoint, which is itself a WAL hook.
  sqlite3_wal_hook(writer.handle(), &WalCheckpointer::Hook, self.get());
  return self;
}

WalCheckpointer::~WalCheckpointer() {
  sqlite3_wal_hook(writer_.handle(), nullptr, nullptr);
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.Signal();
  thread_.join();
}

int WalCheckpointer::Hook(void* self, sqlite3* db, const char* name, int pages) {
  auto* checkpointer = static_cast<WalCheckpointer*>(self);
  if (pages >= checkpointer->pages_ * kCatchUpFactor) {
    // Writes come faster than the thread copies them out: the WAL would grow without end (it only
    // starts over once a checkpoint has copied all of it). This commit catches up, as SQLite's own
    // auto-checkpoint would have done at `pages`.
    // SQLITE_BUSY: the thread is checkpointing right now; the next commit tries again.
    if (sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr) ==
        SQLITE_OK) {
      checkpointer->in_commit_.fetch_add(1);
    }
  } else if (pages >= checkpointer->pages_) {
    MutexLock lock(checkpointer->mu_);
    checkpointer->due_ = true;
    checkpointer->cv_.Signal();
  }
  return SQLITE_OK;
}

void WalCheckpointer::Loop() {
  NameThisThread("berth-wal");
  while (true) {
    {
      MutexLock lock(mu_);
      while (!due_ && !stop_) cv_.Wait(mu_);
      if (stop_) return;
      due_ = false;
    }
    int rc = sqlite3_wal_checkpoint_v2(db_->handle(), nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr,
                                       nullptr);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY) {
      LogWarn("{}", db_->Error("checkpoint", rc).message());
    }
    background_.fetch_add(1);
  }
}

}  // namespace berth
