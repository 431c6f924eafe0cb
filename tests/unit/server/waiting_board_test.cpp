// WaitingBoard (server/core/waiting_board.h): reasons given outside a pass, and jobs held by their
// dependencies. (A pass's own list is built only by the scheduler: the core tests cover it.)
#include "server/core/waiting_board.h"

#include <gtest/gtest.h>

namespace berth {
namespace {

// Jobs 5..7 are one submission waiting on job 4 (waiter 5); job 9's placement was not recorded.
TEST(WaitingBoardTest, NotesAndDependencyReasonsUntilTheyEnd) {
  WaitingBoard board;
  EXPECT_EQ(board.Reason(5), "");
  EXPECT_FALSE(board.Detail(5).has_value());

  board.SetDependencyReason(5, 5, 7, "waiting for job 4 to succeed");
  board.Note({9}, "the server could not record its placement (disk full); it is retried");
  EXPECT_EQ(board.Reason(6), "waiting for job 4 to succeed");
  EXPECT_EQ(board.Detail(7)->reason, "waiting for job 4 to succeed");
  EXPECT_FALSE(board.Detail(7)->explanation.has_value());
  auto reasons = board.Reasons({5, 8, 9});
  EXPECT_EQ(reasons.size(), 2u);  // 8 is unknown
  EXPECT_EQ(reasons.at(9).rfind("the server could not record its placement", 0), 0u);
  EXPECT_EQ(board.ForGauges().second, 3);  // three jobs wait for their dependencies

  // The reason changes text without re-listing its jobs; "" ends it.
  board.SetDependencyReason(5, 5, 7, "waiting for job 4 (running)");
  EXPECT_EQ(board.Reason(5), "waiting for job 4 (running)");
  board.SetDependencyReason(5, 5, 7, "");
  EXPECT_EQ(board.Reason(5), "");
  EXPECT_EQ(board.ForGauges().second, 0);
  board.SetDependencyReason(5, 5, 7, "");  // again: nothing to clear

  // Placed: the note goes. A new pass clears notes too.
  board.Placed({9});
  EXPECT_EQ(board.Reason(9), "");
  board.Note({10}, "x");
  board.NewPass(nullptr);
  EXPECT_EQ(board.Reason(10), "");

  // Forgotten with their jobs and waiter.
  board.SetDependencyReason(11, 11, 12, "waiting for group 3");
  board.Forget({11}, {11});
  EXPECT_EQ(board.Reason(11), "");
  EXPECT_EQ(board.Reason(12), "");  // its waiter's reason went with it
}

}  // namespace
}  // namespace berth
