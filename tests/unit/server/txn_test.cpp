// UndoJournal (server/core/txn.h): saves each entry once, before its first change, for any table
// that says what a snapshot is; undo puts every entry back, the tables that go first first.
#include "server/core/txn.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace berth {
namespace {

// A table of strings by int, and a log of the restores made to it.
template <bool kFirst>
struct Table {
  using Key = int;
  using Snapshot = std::optional<std::string>;
  static constexpr bool kUndoFirst = kFirst;
  std::map<int, std::string> rows;
  std::vector<std::string>* restores = nullptr;
  std::string name;

  Snapshot Save(int key) const {
    auto it = rows.find(key);
    return it == rows.end() ? Snapshot() : Snapshot(it->second);
  }
  void Restore(int key, Snapshot before) {
    if (restores) restores->push_back(name + ":" + std::to_string(key));
    if (before) {
      rows[key] = *before;
    } else {
      rows.erase(key);
    }
  }
};

TEST(UndoJournalTest, TheFirstSaveOfAnEntryIsTheOneUndoPutsBack) {
  Table<false> t;
  t.rows = {{1, "a"}, {2, "b"}};
  UndoJournal journal;
  EXPECT_TRUE(journal.empty());
  journal.Save(t, 1);
  t.rows[1] = "a2";
  journal.Save(t, 1);  // saved already: the later value is not the one to go back to
  t.rows[1] = "a3";
  journal.Save(t, 3);  // absent: undo takes it out again
  t.rows[3] = "c";
  journal.SaveAs(t, 2, [] { return Table<false>::Snapshot("b"); });
  t.rows.erase(2);
  ASSERT_NE(journal.Saved(t), nullptr);
  EXPECT_EQ(journal.Saved(t)->size(), 3u);
  journal.Undo();
  EXPECT_EQ(t.rows, (std::map<int, std::string>{{1, "a"}, {2, "b"}}));
  EXPECT_TRUE(journal.empty());
  EXPECT_EQ(journal.Saved(t), nullptr);
}

TEST(UndoJournalTest, TablesThatGoFirstAreRestoredFirstAndValuesAreSavedWhole) {
  std::vector<std::string> restores;
  Table<false> books{.restores = &restores, .name = "books"};
  Table<true> jobs{.restores = &restores, .name = "jobs"};
  std::vector<int> seq = {1, 2};
  UndoJournal journal;
  journal.Save(books, 7);
  journal.Save(jobs, 5);
  journal.Save(books, 8);
  journal.SaveValue(seq);
  seq.push_back(3);
  journal.SaveValue(seq);
  seq.clear();
  EXPECT_EQ(journal.Saved(jobs)->count(5), 1u);
  EXPECT_EQ(journal.Saved(books)->count(5), 0u);
  journal.Undo();
  EXPECT_EQ(restores, (std::vector<std::string>{"jobs:5", "books:7", "books:8"}));
  EXPECT_EQ(seq, (std::vector<int>{1, 2}));
}

TEST(UndoJournalTest, TwoTablesOfOneTypeKeepTheirOwnEntries) {
  Table<false> a, b;
  a.rows = {{1, "a"}};
  b.rows = {{1, "b"}};
  UndoJournal journal;
  journal.Save(a, 1);
  journal.Save(b, 1);
  a.rows[1] = "x";
  b.rows[1] = "y";
  journal.Undo();
  EXPECT_EQ(a.rows.at(1), "a");
  EXPECT_EQ(b.rows.at(1), "b");
}

}  // namespace
}  // namespace berth
