// Listings' parameters and filter (server/listing.h): every listing reads them the same way.
#include "server/listing.h"

#include <gtest/gtest.h>

#include "net/http.h"

namespace berth::listing {
namespace {

net::HttpRequest Query(std::map<std::string, std::string> query) {
  net::HttpRequest req;
  req.query = std::move(query);
  return req;
}

TEST(ListingTest, IntegerParametersAreBoundedAndNamed) {
  EXPECT_EQ(*IntParam(Query({}), "limit", 50, 0, kMaxPage), 50);
  EXPECT_EQ(*IntParam(Query({{"limit", "2000"}}), "limit", 50, 0, kMaxPage), 2000);
  EXPECT_EQ(*IntParam(Query({{"delta", "-3"}}), "delta", 0, -10, 10), -3);
  EXPECT_EQ(IntParam(Query({{"limit", "2001"}}), "limit", 50, 0, kMaxPage).status().message(),
            "'limit': expected one of the integers 0 to 2000, got '2001'");
  for (const char* bad : {"x", "1.5", "", "-", "--1", "99999999999999999999"}) {
    if (std::string(bad).empty()) continue;  // absent: the fallback
    EXPECT_FALSE(IntParam(Query({{"offset", bad}}), "offset", 0, 0, kMaxOffset).ok()) << bad;
  }
  EXPECT_EQ(IntParam(Query({{"page", "0"}}), "page", 0, 1, 5, "ask for pages").status().message(),
            "'page': expected one of the integers 1 to 5, got '0'; ask for pages");
}

TEST(ListingTest, TheFilterKeepsRowsByUserTeamStatusAndGroup) {
  auto filter = RowFilter::FromRequest(Query({{"team", "-"}, {"status", "PENDING"}}));
  ASSERT_TRUE(filter.ok());
  EXPECT_EQ(filter->team_name(), "");
  std::vector<JobRow> rows(4);
  rows[0].user = "ada";  // default team, pending: kept
  rows[0].status = JobStatus::kPending;
  rows[1].user = "bob";  // team vision
  rows[1].status = JobStatus::kPending;
  rows[2].user = "ada";  // running
  rows[2].status = JobStatus::kRunning;
  rows[3].user = "cy";  // default team, pending: kept
  rows[3].status = JobStatus::kPending;
  int lookups = 0;
  filter->Keep(rows, [&](const std::string& user) {
    ++lookups;
    return std::string(user == "bob" ? "vision" : "");
  });
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].user, "ada");
  EXPECT_EQ(rows[1].user, "cy");
  EXPECT_EQ(lookups, 3);  // once per user: ada, bob, cy
  EXPECT_EQ(RowFilter::FromRequest(Query({{"status", "DONE"}})).status().message(),
            "unknown status 'DONE'");
  EXPECT_FALSE(RowFilter::FromRequest(Query({{"group", "x"}})).ok());
}

}  // namespace
}  // namespace berth::listing
