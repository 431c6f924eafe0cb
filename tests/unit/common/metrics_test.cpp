// The Prometheus text exposition writer and the in-memory counter and histogram families.
#include "common/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace berth::metrics {
namespace {

TEST(Metrics, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(EscapeHelp("quote \" stays; back\\slash\nnewline"),
            "quote \" stays; back\\\\slash\\nnewline");
}

TEST(Metrics, FormatsValues) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(FormatValue(0.1)), 0.1);  // round-trips
}

TEST(Metrics, WritesFamiliesAndSamples) {
  ExpositionWriter w;
  w.Family("berth_nodes", "gauge", "Nodes by state.");
  w.Sample("berth_nodes", {{"state", "up"}}, 3);
  w.Sample("berth_nodes", {{"state", "we\"ird"}, {"pool", ""}}, 0);
  w.Family("berth_build_info", "gauge", "Build.");
  w.Sample("berth_build_info", {}, 1);
  EXPECT_EQ(w.text(),
            "# HELP berth_nodes Nodes by state.\n"
            "# TYPE berth_nodes gauge\n"
            "berth_nodes{state=\"up\"} 3\n"
            "berth_nodes{state=\"we\\\"ird\",pool=\"\"} 0\n"
            "# HELP berth_build_info Build.\n"
            "# TYPE berth_build_info gauge\n"
            "berth_build_info 1\n");
}

TEST(Metrics, HistogramBucketsAreCumulativeAndEndWithInf) {
  HistogramFamily h("berth_x_seconds", "X.", {"route"}, {0.1, 1});
  h.Observe({"/a"}, 0.05);
  h.Observe({"/a"}, 0.1);  // on the bound: in the 0.1 bucket (le)
  h.Observe({"/a"}, 0.5);
  h.Observe({"/a"}, 7);
  h.Observe({"/a"}, std::nan(""));  // ignored
  EXPECT_EQ(h.Count({"/a"}), 4U);
  ExpositionWriter w;
  h.Write(w);
  EXPECT_EQ(w.text(),
            "# HELP berth_x_seconds X.\n"
            "# TYPE berth_x_seconds histogram\n"
            "berth_x_seconds_bucket{route=\"/a\",le=\"0.10000000000000001\"} 2\n"
            "berth_x_seconds_bucket{route=\"/a\",le=\"1\"} 3\n"
            "berth_x_seconds_bucket{route=\"/a\",le=\"+Inf\"} 4\n"
            "berth_x_seconds_sum{route=\"/a\"} 7.6500000000000004\n"
            "berth_x_seconds_count{route=\"/a\"} 4\n");
}

TEST(Metrics, FamiliesWithoutLabelsShowZeroBeforeAnything) {
  CounterFamily c("berth_launches_total", "Launches.", {});
  HistogramFamily h("berth_pass_seconds", "Passes.", {}, {1});
  ExpositionWriter w;
  c.Write(w);
  h.Write(w);
  EXPECT_NE(w.text().find("berth_launches_total 0\n"), std::string::npos);
  EXPECT_NE(w.text().find("berth_pass_seconds_bucket{le=\"+Inf\"} 0\n"), std::string::npos);
  EXPECT_NE(w.text().find("berth_pass_seconds_count 0\n"), std::string::npos);
}

TEST(Metrics, CountersOnlyGoUp) {
  CounterFamily c("berth_jobs_finished_total", "Jobs.", {"status"});
  c.Add({"SUCCEEDED"});
  c.Add({"SUCCEEDED"}, 2);
  c.Add({"SUCCEEDED"}, -5);
  c.Add({"SUCCEEDED"}, std::nan(""));
  EXPECT_EQ(c.Value({"SUCCEEDED"}), 3);
  EXPECT_EQ(c.Value({"FAILED"}), 0);
}

// Updates from many threads while another writes the page (run under TSan by scripts/test.sh).
TEST(Metrics, ConcurrentUpdatesAndScrapes) {
  CounterFamily c("berth_c_total", "C.", {"k"});
  HistogramFamily h("berth_h_seconds", "H.", {"k"}, HistogramFamily::FastSeconds());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        c.Add({std::to_string(t % 2)});
        h.Observe({std::to_string(t % 2)}, 0.001 * i);
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    ExpositionWriter w;
    c.Write(w);
    h.Write(w);
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(c.Value({"0"}) + c.Value({"1"}), 4000);
  EXPECT_EQ(h.Count({"0"}) + h.Count({"1"}), 4000U);
}

}  // namespace
// Label values that come from requests (user names a node may make up) must not grow the series
// without bound: past the cap, new values are counted together under "_other".
TEST(Metrics, ACappedFamilyCountsNewSeriesPastItsCapTogether) {
  CounterFamily f("f_total", "help", {"user", "team"}, 3);
  f.Add({"a", "t"}, 1);
  f.Add({"b", "t"}, 1);
  f.Add({"c", "t"}, 1);
  f.Add({"d", "t"}, 2);
  f.Add({"e", "u"}, 3);
  f.Add({"a", "t"}, 1);  // an existing series still counts on its own
  EXPECT_EQ(f.Value({"a", "t"}), 2);
  EXPECT_EQ(f.Value({"d", "t"}), 0);
  EXPECT_EQ(f.Value({CounterFamily::kOther, CounterFamily::kOther}), 5);
}

}  // namespace berth::metrics
