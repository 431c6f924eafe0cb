// Txn: one change to the server's state while it is built, then committed or undone — the store
// Batch to commit, the Outbox of what may happen only once that batch is durable (messages to
// agents, sessions opened and closed, log followers woken, tallies moved, metrics counted, a pass
// asked for), and the UndoJournal that puts the memory back if the commit fails.
//
// The journal names no table. A table that takes part says, for its own key, what a snapshot of an
// entry is and how to put one back:
//
//   using Key = ...;       using Snapshot = ...;     // Snapshot: e.g. std::optional<Row>
//   Snapshot Save(const Key& key) const;             // the entry as it is now (absent: nullopt)
//   void Restore(const Key& key, Snapshot before);   // the entry as it was
//
// and every change saves its entry before its first change in the txn:
// `txn.journal.Save(table, key)`. The first save of a key wins; later ones are free. Undo restores
// the entries table by table. A table whose restores tell observers of their own (the job table:
// group limits and waiters keep their books by its enter and leave) declares `kUndoFirst`, so that
// the observers' own saved entries are put back after it, over what the notices changed. A plain
// value (a set, a struct) is saved whole with `SaveValue`.
//
// Thread-safety: none; a Txn belongs to the one thread building it, under the state lock of the
// tables it saves (server/core/core.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/job_status.h"
#include "protocol/agent_protocol.h"
#include "sched/dependencies.h"
#include "server/core/core_metrics.h"
#include "store/store.h"

namespace berth {

class UndoJournal {
 public:
  UndoJournal() = default;
  UndoJournal(const UndoJournal&) = delete;
  UndoJournal& operator=(const UndoJournal&) = delete;
  UndoJournal(UndoJournal&&) = default;
  UndoJournal& operator=(UndoJournal&&) = default;

  // Saves `table`'s entry `key` (table.Save(key)) unless this journal saved it already.
  template <class Table>
  void Save(Table& table, const typename Table::Key& key) {
    auto& before = LogOf(table).before;
    if (before.find(key) == before.end()) before.emplace(key, table.Save(key));
  }
  // The same, with the snapshot made by `make()` (the caller holds the entry already: no lookup).
  template <class Table, class Make>
  void SaveAs(Table& table, const typename Table::Key& key, Make&& make) {
    auto& before = LogOf(table).before;
    if (before.find(key) == before.end()) before.emplace(key, make());
  }
  // Saves the whole of `value` (copied), unless saved already.
  template <class T>
  void SaveValue(T& value) {
    auto& log = LogOf<ValueLog<T>>(&value);
    if (!log.before) log.before = std::make_unique<T>(value);
  }
  // The entries of `table` this journal saved, with their snapshots (nullptr: none).
  template <class Table>
  const std::map<typename Table::Key, typename Table::Snapshot>* Saved(const Table& table) const {
    for (const auto& log : logs_) {
      if (log->owner == &table && log->type == Tag<TableLog<Table>>()) {
        return &static_cast<const TableLog<Table>&>(*log).before;
      }
    }
    return nullptr;
  }
  bool empty() const { return logs_.empty(); }

  // Puts every saved entry back (kUndoFirst tables first, then the others in the order they were
  // first saved) and forgets them.
  void Undo() {
    for (int pass = 0; pass < 2; ++pass) {
      for (auto& log : logs_) {
        if (log->undo_first == (pass == 0)) log->Undo();
      }
    }
    logs_.clear();
    last_ = nullptr;
  }

 private:
  struct Log {
    const void* owner = nullptr;
    const void* type = nullptr;
    bool undo_first = false;
    virtual ~Log() = default;
    virtual void Undo() = 0;
  };
  template <class Table>
  struct TableLog final : Log {
    Table* table = nullptr;
    std::map<typename Table::Key, typename Table::Snapshot> before;
    void Undo() override {
      for (auto& [key, snapshot] : before) table->Restore(key, std::move(snapshot));
    }
  };
  template <class T>
  struct ValueLog final : Log {
    T* value = nullptr;
    std::unique_ptr<T> before;
    void Undo() override { *value = std::move(*before); }
  };
  template <class L>
  static const void* Tag() {
    static const char tag = 0;
    return &tag;
  }
  template <class Table>
  static constexpr bool UndoFirst() {
    if constexpr (requires { Table::kUndoFirst; }) {
      return Table::kUndoFirst;
    } else {
      return false;
    }
  }

  template <class Table>
  TableLog<Table>& LogOf(Table& table) {
    auto& log = LogOf<TableLog<Table>>(&table);
    log.table = &table;
    log.undo_first = UndoFirst<Table>();
    return log;
  }
  template <class L, class Owner>
  L& LogOf(Owner* owner) {
    if (last_ != nullptr && last_->owner == owner && last_->type == Tag<L>()) {
      return static_cast<L&>(*last_);
    }
    for (auto& log : logs_) {
      if (log->owner == owner && log->type == Tag<L>()) {
        last_ = log.get();
        return static_cast<L&>(*log);
      }
    }
    auto log = std::make_unique<L>();
    log->owner = owner;
    log->type = Tag<L>();
    if constexpr (requires { log->value; }) log->value = owner;
    last_ = log.get();
    logs_.push_back(std::move(log));
    return static_cast<L&>(*last_);
  }

  std::vector<std::unique_ptr<Log>> logs_;
  Log* last_ = nullptr;  // the log saved to last (a run of saves to one table finds it at once)
};

// What a committed Txn does after its commit, in this order (CoreState::CountCommitted, then
// CoreState::SendCommitted): books and metrics, then sessions, messages, wakes, reaping and a pass.
struct Outbox {
  std::vector<std::pair<std::string, std::string>> opens;  // (node, session)
  std::vector<std::string> closes;
  std::vector<std::pair<std::string, proto::WatchMessage>> sends;
  std::set<int64_t> wake_logs;
  // (group, from, to): a job's moves in its group's tally, made there once committed (the tallies
  // are read without the state lock, so they never show a change that may yet be undone).
  std::vector<std::tuple<int64_t, JobStatus, JobStatus>> tally_moves;
  bool kick = false;                  // request a scheduling pass
  bool reap = false;                  // drop jobs that ended for good from memory
  std::vector<std::string> reclaims;  // teams whose reclaims this txn applies (rate limit)
  std::set<sched::Dependencies::Key> deps_changed;   // their waiting reasons are written again
  std::vector<std::pair<TimeMs, int64_t>> backoffs;  // (not_before, job): restarts to wake for
  TxnEvents events;                                  // counted in the metrics once committed
  bool notices = false;  // the batch holds notices: the sender is woken (server/core/notices.h)
};

// A bulk group one of whose jobs ended in a txn, and whose owner asked to hear of its end: once
// the txn's moves are counted, a group with no job left active gets its summary
// (AddGroupSummaries, server/core/notices.h).
struct GroupNoticeAsk {
  std::string user;
  std::string name;
  int64_t job = 0;     // the job whose end was seen (the summary names the group by it)
  std::string events;  // the jobs' notify events (spec/notify_events.h)
};

struct Txn {
  std::string by;  // the user on whose request the change is made; recorded in its events
  Batch batch;
  Outbox out;
  UndoJournal journal;
  // Waiters whose dependencies can no longer hold, to cancel: a worklist, so that a long chain of
  // cancellations does not recurse (Lifecycle::DrainDependencyFailures).
  std::vector<sched::Dependencies::Key> dep_failures;
  bool draining_deps = false;
  std::map<int64_t, GroupNoticeAsk> notice_groups;  // by group
};

}  // namespace berth
