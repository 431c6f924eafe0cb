// JobTable (server/core/job_table.h): the one door through which a job enters memory, changes and
// leaves it; every observer hears each of those, including an undo's.
#include "server/core/job_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace berth {
namespace {

// Writes down what it hears, as "event:id".
class Recorder : public JobTable::Observer {
 public:
  void Entered(ActiveJob& job) override { heard.push_back("in:" + Id(job)); }
  void Left(ActiveJob& job) override { heard.push_back("out:" + Id(job)); }
  void Edited(const ActiveJob& job) override { heard.push_back("edit:" + Id(job)); }
  void Restored(ActiveJob* was, ActiveJob& job) override {
    heard.push_back("back:" + Id(job) +
                    (was ? " from " + std::string(JobStatusName(was->row.status)) : ""));
  }
  std::vector<std::string> heard;

 private:
  static std::string Id(const ActiveJob& job) { return std::to_string(job.row.id); }
};

ActiveJob Job(int64_t id) {
  ActiveJob job;
  job.row.id = id;
  job.row.status = JobStatus::kPending;
  return job;
}

TEST(JobTableTest, ObserversHearEveryEnterEditAndLeave) {
  JobTable table;
  Recorder a, b;
  table.Subscribe(&a);
  table.Subscribe(&b);
  table.Enter(Job(1));
  table.Enter(Job(2));
  Txn txn;
  ActiveJob& two = table.Edit(txn, table.at(2));
  EXPECT_EQ(two.gen, 1u) << "an edit bumps the generation";
  table.Edit(txn, two);
  EXPECT_EQ(two.gen, 2u);
  table.Leave(table.find(1));
  EXPECT_EQ(a.heard, (std::vector<std::string>{"in:1", "in:2", "edit:2", "edit:2", "out:1"}));
  EXPECT_EQ(b.heard, a.heard);
  EXPECT_EQ(table.size(), 1u);
  table.Enter(Job(2));  // twice: the first stays, nobody hears the second
  EXPECT_EQ(a.heard.size(), 5u);
  EXPECT_EQ(table.at(2).gen, 2u);
}

TEST(JobTableTest, AnUndoPutsEditedJobsBackAndTakesEnteredOnesOut) {
  JobTable table;
  Recorder r;
  table.Subscribe(&r);
  table.Enter(Job(1));
  Txn txn;
  ActiveJob& one = table.Edit(txn, table.at(1));
  one.row.status = JobStatus::kRunning;
  table.Edit(txn, one);  // saved once: the undo goes back to PENDING
  one.row.status = JobStatus::kSucceeded;
  table.Enter(txn, Job(9));
  r.heard.clear();
  ASSERT_NE(txn.journal.Saved(table), nullptr);
  EXPECT_EQ(txn.journal.Saved(table)->size(), 2u);
  txn.journal.Undo();
  EXPECT_EQ(r.heard, (std::vector<std::string>{"back:1 from SUCCEEDED", "out:9"}));
  EXPECT_EQ(table.size(), 1u);
  EXPECT_EQ(table.at(1).row.status, JobStatus::kPending);
  EXPECT_EQ(table.at(1).gen, 0u) << "the generation goes back with the job";
}

}  // namespace
}  // namespace berth
