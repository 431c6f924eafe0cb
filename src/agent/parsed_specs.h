// ParsedSpecs: the job specs an agent has parsed, by spec id, for the launches that use them — the
// `max_specs` used last, within `max_bytes` of their text (the one just added always stays). The
// server sends each spec before the launches that use it; a launch finds it here, parsed once
// however many jobs share it.
//
// Thread-safe: its own lock, never held while parsing or while calling out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/mutex.h"
#include "spec/job_spec.h"

namespace berth {

class ParsedSpecs {
 public:
  // A spec as the launches that use it need it: parsed, or why it cannot be.
  struct Entry {
    std::shared_ptr<const JobSpec> spec;  // null when `error` says why
    std::string error;
    size_t bytes = 0;  // its text's size, what the byte cap counts
  };

  ParsedSpecs(size_t max_specs, size_t max_bytes) : max_specs_(max_specs), max_bytes_(max_bytes) {}

  // Parses a spec's text (no lock).
  static Entry Parse(const std::string& text);
  // The spec `id` if kept (it counts as used now).
  std::optional<Entry> Find(int64_t id) EXCLUDES(mu_);
  // Keeps `entry` as spec `id`, dropping the least recently used past the caps.
  void Put(int64_t id, Entry entry) EXCLUDES(mu_);
  // Forgets every spec: a new session gets every spec it uses again (and a server started afresh
  // on a new store numbers its specs from 1 again).
  void Clear() EXCLUDES(mu_);
  size_t size() const EXCLUDES(mu_);
  size_t bytes() const EXCLUDES(mu_);

 private:
  struct Kept {
    Entry entry;
    uint64_t last_use = 0;
  };
  const size_t max_specs_;
  const size_t max_bytes_;
  mutable Mutex mu_;
  std::map<int64_t, Kept> specs_ GUARDED_BY(mu_);
  size_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t uses_ GUARDED_BY(mu_) = 0;
};

}  // namespace berth
