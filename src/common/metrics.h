// Metrics in the Prometheus data model, kept in memory: counter and histogram families with labels,
// and the text exposition format (version 0.0.4) that the server's /metrics serves. Our own small
// writer (Debian has no prometheus-cpp): `# HELP` and `# TYPE` once per family, label values and
// help text escaped as the format asks, histograms as cumulative `_bucket{le=...}` series ending
// with `le="+Inf"`, then `_sum` and `_count`.
//
// Thread-safety: CounterFamily and HistogramFamily may be updated and written from any thread (one
// mutex per family, held for a map lookup and an add, or for copying the values out).
// ExpositionWriter is not thread-safe: one per scrape.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace berth::metrics {

// Label (name, value) pairs, in the order they are written.
using Labels = std::vector<std::pair<std::string, std::string>>;

// `\` -> `\\`, `"` -> `\"`, newline -> `\n` (a label value).
std::string EscapeLabelValue(std::string_view value);
// `\` -> `\\`, newline -> `\n` (HELP text).
std::string EscapeHelp(std::string_view help);
// A sample value: integers exactly ("42"), others with up to 17 significant digits, "NaN", "+Inf",
// "-Inf".
std::string FormatValue(double value);

class ExpositionWriter {
 public:
  // Starts a family: its HELP and TYPE lines. `type`: counter, gauge, histogram, untyped.
  void Family(std::string_view name, std::string_view type, std::string_view help);
  // One sample: `name{labels} value`.
  void Sample(std::string_view name, const Labels& labels, double value);
  // The same without copying the labels (a page of 20,000 node series builds no strings for them).
  using LabelViews = std::initializer_list<std::pair<std::string_view, std::string_view>>;
  void Sample(std::string_view name, LabelViews labels, double value);
  // A histogram's series: `counts` has one count per bucket of `bounds` (upper bounds, ascending,
  // not cumulative) plus one for the values above the last bound.
  void Histogram(std::string_view name, const Labels& labels, const std::vector<double>& bounds,
                 const std::vector<uint64_t>& counts, double sum);
  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  template <class LabelRange>
  void Series(std::string_view name, const LabelRange& labels, std::string_view extra_name,
              std::string_view extra_value);
  void AppendEscaped(std::string_view value);
  std::string out_;
};

class CounterFamily {
 public:
  // `max_series` (0: no cap) bounds the series kept: once that many exist, an amount for label
  // values not seen yet goes to the series whose every label is kOther (label values that come
  // from requests, user names, must not grow a server's memory without bound).
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names,
                size_t max_series = 0);
  static constexpr const char* kOther = "_other";
  // Adds `amount` (>= 0; a negative amount is ignored) to the series of these label values (one
  // per label name, in order).
  void Add(const std::vector<std::string>& values, double amount = 1) EXCLUDES(mu_);
  double Value(const std::vector<std::string>& values) const EXCLUDES(mu_);
  void Write(ExpositionWriter& out) const EXCLUDES(mu_);
  const std::string& name() const { return name_; }

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const size_t max_series_;
  mutable Mutex mu_;
  std::map<std::vector<std::string>, double> values_ GUARDED_BY(mu_);
};

class HistogramFamily {
 public:
  // `bounds`: the buckets' upper bounds, ascending (the +Inf bucket is implied).
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds);
  void Observe(const std::vector<std::string>& values, double value) EXCLUDES(mu_);
  // How many values the series of these label values has seen.
  uint64_t Count(const std::vector<std::string>& values) const EXCLUDES(mu_);
  void Write(ExpositionWriter& out) const EXCLUDES(mu_);
  const std::string& name() const { return name_; }

  // Bucket bounds for durations from a millisecond to ten seconds (requests, commits, passes),
  // and from a second to a week (waits, run times).
  static std::vector<double> FastSeconds();
  static std::vector<double> SlowSeconds();

 private:
  struct Series {
    std::vector<uint64_t> counts;  // per bucket, plus the +Inf one; not cumulative
    double sum = 0;
  };
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;
  mutable Mutex mu_;
  std::map<std::vector<std::string>, Series> series_ GUARDED_BY(mu_);
};

}  // namespace berth::metrics
