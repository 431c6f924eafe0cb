#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace berth::metrics {

namespace {

// Backslash and newline escaped, and double quotes too when `quotes`.
std::string Escape(std::string_view text, bool quotes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) { return Escape(value, true); }

std::string EscapeHelp(std::string_view help) { return Escape(help, false); }

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(value));
    return std::string(buf, end);
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  return buf;
}

void ExpositionWriter::Family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += EscapeHelp(help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void ExpositionWriter::AppendEscaped(std::string_view value) {
  if (value.find_first_of("\\\"\n") == std::string_view::npos) {
    out_ += value;
  } else {
    out_ += EscapeLabelValue(value);
  }
}

template <class LabelRange>
void ExpositionWriter::Series(std::string_view name, const LabelRange& labels,
                              std::string_view extra_name, std::string_view extra_value) {
  out_ += name;
  if (labels.size() == 0 && extra_name.empty()) return;
  out_ += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) out_ += ',';
    first = false;
    out_ += key;
    out_ += "=\"";
    AppendEscaped(value);
    out_ += '"';
  }
  if (!extra_name.empty()) {
    if (!first) out_ += ',';
    out_ += extra_name;
    out_ += "=\"";
    out_ += extra_value;
    out_ += '"';
  }
  out_ += '}';
}

void ExpositionWriter::Sample(std::string_view name, const Labels& labels, double value) {
  Series(name, labels, "", "");
  out_ += ' ';
  out_ += FormatValue(value);
  out_ += '\n';
}

void ExpositionWriter::Sample(std::string_view name, LabelViews labels, double value) {
  Series(name, labels, "", "");
  out_ += ' ';
  out_ += FormatValue(value);
  out_ += '\n';
}

void ExpositionWriter::Histogram(std::string_view name, const Labels& labels,
                                 const std::vector<double>& bounds,
                                 const std::vector<uint64_t>& counts, double sum) {
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t k = 0; k <= bounds.size(); ++k) {
    cumulative += k < counts.size() ? counts[k] : 0;
    Series(bucket, labels, "le", k < bounds.size() ? FormatValue(bounds[k]) : "+Inf");
    out_ += ' ';
    out_ += FormatValue(static_cast<double>(cumulative));
    out_ += '\n';
  }
  Sample(std::string(name) + "_sum", labels, sum);
  Sample(std::string(name) + "_count", labels, static_cast<double>(cumulative));
}

namespace {

Labels Zip(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  Labels labels;
  labels.reserve(names.size());
  for (size_t k = 0; k < names.size(); ++k) {
    labels.emplace_back(names[k], k < values.size() ? values[k] : std::string());
  }
  return labels;
}

}  // namespace

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names, size_t max_series)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      max_series_(max_series) {}

void CounterFamily::Add(const std::vector<std::string>& values, double amount) {
  if (!(amount >= 0)) return;  // a counter never goes down (NaN is refused too)
  MutexLock lock(mu_);
  auto it = values_.find(values);
  if (it == values_.end() && max_series_ > 0 && values_.size() >= max_series_) {
    it = values_.try_emplace(std::vector<std::string>(label_names_.size(), kOther), 0).first;
  } else if (it == values_.end()) {
    it = values_.emplace(values, 0).first;
  }
  it->second += amount;
}

double CounterFamily::Value(const std::vector<std::string>& values) const {
  MutexLock lock(mu_);
  auto it = values_.find(values);
  return it == values_.end() ? 0 : it->second;
}

void CounterFamily::Write(ExpositionWriter& out) const {
  std::map<std::vector<std::string>, double> copy;
  {
    MutexLock lock(mu_);
    copy = values_;
  }
  out.Family(name_, "counter", help_);
  // A family without labels always has its one series, at 0 before anything happened.
  if (copy.empty() && label_names_.empty()) copy[{}] = 0;
  for (const auto& [values, value] : copy) out.Sample(name_, Zip(label_names_, values), value);
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names, std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      bounds_(std::move(bounds)) {}

void HistogramFamily::Observe(const std::vector<std::string>& values, double value) {
  if (std::isnan(value)) return;
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  MutexLock lock(mu_);
  Series& s = series_[values];
  if (s.counts.empty()) s.counts.assign(bounds_.size() + 1, 0);
  ++s.counts[bucket];
  s.sum += value;
}

uint64_t HistogramFamily::Count(const std::vector<std::string>& values) const {
  MutexLock lock(mu_);
  auto it = series_.find(values);
  if (it == series_.end()) return 0;
  uint64_t n = 0;
  for (uint64_t c : it->second.counts) n += c;
  return n;
}

void HistogramFamily::Write(ExpositionWriter& out) const {
  std::map<std::vector<std::string>, Series> copy;
  {
    MutexLock lock(mu_);
    copy = series_;
  }
  out.Family(name_, "histogram", help_);
  if (copy.empty() && label_names_.empty()) copy[{}].counts.assign(bounds_.size() + 1, 0);
  for (const auto& [values, s] : copy) {
    out.Histogram(name_, Zip(label_names_, values), bounds_, s.counts, s.sum);
  }
}

std::vector<double> HistogramFamily::FastSeconds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

std::vector<double> HistogramFamily::SlowSeconds() {
  return {1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 259200, 604800};
}

}  // namespace berth::metrics
