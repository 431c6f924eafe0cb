// JobBooks: the counts, group tallies and pass index kept by watching the job table.
#include "server/core/job_books.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/json_util.h"
#include "common/log.h"
#include "common/quantity.h"
#include "common/strings.h"
#include "net/tls.h"
#include "server/core/sorted_entries.h"

namespace berth {

void JobBooks::Entered(ActiveJob& job) {
  s_.AssertHeld();
  // A job of a tallied group entering memory again (held after a restart) is counted there under
  // its status already; a submitted one arrives tallied with its group's new tally.
  if (job.row.group && !job.tallied && s_.tallies.Enter(*job.row.group)) {
    job.tallied = job.row.status;
  }
  CountJob(job);
  s_.node_jobs.Add(job.row.id, job.row.placement);
  Touch(job.row.id);
}

void JobBooks::Left(ActiveJob& job) {
  s_.AssertHeld();
  UncountJob(job);
  if (job.tallied) s_.tallies.Leave(*job.row.group);  // counted under its final status still
  Touch(job.row.id);
}

void JobBooks::Edited(const ActiveJob& job) {
  s_.AssertHeld();
  Touch(job.row.id);
}

void JobBooks::Restored(ActiveJob* was, ActiveJob& job) {
  s_.AssertHeld();
  // The counts go back with the job: the job as it had become leaves them, the job as it was is
  // counted again where it was then. (The group tallies were not moved: that waits for the commit,
  // Outbox::tally_moves.)
  if (was != nullptr) UncountJob(*was);
  AddToCounts(job);
  // A placement put back may be one a rebuild during the txn no longer had.
  s_.node_jobs.MarkStale();
  Touch(job.row.id);
}

void JobBooks::Touch(int64_t id) {
  if (s_.rebuild_index) return;
  s_.touched.insert(id);
  if (s_.touched.size() > s_.jobs.size() / 4 + 64) {
    // Changes to more than a quarter of the jobs since the last refresh (a pass that placed many,
    // or many ended while nothing was pending): one walk of jobs_ in order, reusing the views of
    // the unchanged jobs, costs less than looking each change up. (It was an eighth while pending
    // entries were merged into a vector; a rebuild also makes the next pass copy the whole index,
    // pass_mirror.h.)
    s_.rebuild_index = true;
    s_.touched.clear();
  }
}

void JobBooks::RefreshPassIndex() {
  if (s_.rebuild_index) {
    std::vector<std::pair<int64_t, HeldView>> out;
    out.reserve(s_.held_index.size());
    auto was = s_.held_index.begin();  // views of unchanged jobs are kept
    s_.pending_index.clear();
    for (auto& [id, job] : s_.jobs) {
      if (job.row.status == JobStatus::kPending) {
        s_.pending_index.emplace_hint(s_.pending_index.end(), id, PendingViewOf(job));
        continue;
      }
      while (was != s_.held_index.end() && was->first < id) ++was;
      std::optional<HeldView> before;
      if (was != s_.held_index.end() && was->first == id) before = std::move(was++->second);
      if (auto h = IndexJob(id, &job, std::move(before))) out.emplace_back(id, std::move(*h));
    }
    s_.held_index = std::move(out);
    s_.rebuild_index = false;
    ++s_.index_rebuilds;
    s_.touched.clear();
    s_.pass_delta_full = true;
    s_.pass_delta.clear();
    return;
  }
  if (!s_.pass_delta_full) {
    s_.pass_delta.insert(s_.pass_delta.end(), s_.touched.begin(), s_.touched.end());
    if (s_.pass_delta.size() > s_.jobs.size() / 2 + 64) {
      s_.pass_delta_full = true;  // a copy of the whole index costs less than looking each up
      s_.pass_delta.clear();
    }
  }
  // A touched job filed before and after is updated in place; the held entries to add or remove
  // (sorted by id, as touched_ is) are merged in with one pass over the vector. Pending entries
  // come and go one by one: placements take them from all over a deep queue, and a merge would
  // rewrite every entry under the lock (a million pending: ~150 ms, measured).
  std::vector<std::pair<int64_t, std::optional<HeldView>>> held_changes;
  for (int64_t id : s_.touched) {
    auto found = s_.jobs.find(id);
    ActiveJob* job = found == s_.jobs.end() ? nullptr : &found->second;
    auto was = s_.pending_index.find(id);
    if (job != nullptr && job->row.status == JobStatus::kPending) {
      if (was != s_.pending_index.end()) {
        was->second = PendingViewOf(*job);
      } else {
        s_.pending_index.emplace(id, PendingViewOf(*job));
      }
    } else if (was != s_.pending_index.end()) {
      s_.pending_index.erase(was);
    }
    auto at = FindEntry(s_.held_index, id);
    const bool present = at != s_.held_index.end() && at->first == id;
    std::optional<HeldView> h =
        IndexJob(id, job, present ? std::optional<HeldView>(std::move(at->second)) : std::nullopt);
    if (present && h) {
      at->second = std::move(*h);
    } else if (present || h) {
      held_changes.emplace_back(id, std::move(h));  // nullopt: remove
    }
  }
  s_.touched.clear();
  MergeChanges(s_.held_index, held_changes);
}

PassDelta JobBooks::TakePassDelta() {
  RefreshPassIndex();
  PassDelta delta;
  delta.full = s_.pass_delta_full;
  if (delta.full) {
    delta.pending.reserve(s_.pending_index.size());
    for (const auto& [id, p] : s_.pending_index) delta.pending.emplace_back(id, Mirrored(p));
    delta.held.reserve(s_.held_index.size());
    for (const auto& [id, h] : s_.held_index) delta.held.emplace_back(id, Mirrored(h));
  } else {
    std::sort(s_.pass_delta.begin(), s_.pass_delta.end());
    s_.pass_delta.erase(std::unique(s_.pass_delta.begin(), s_.pass_delta.end()),
                        s_.pass_delta.end());
    delta.pending.reserve(s_.pass_delta.size());
    delta.held.reserve(s_.pass_delta.size());
    for (int64_t id : s_.pass_delta) {
      auto p = s_.pending_index.find(id);
      delta.pending.emplace_back(
          id, p != s_.pending_index.end() ? std::optional(Mirrored(p->second)) : std::nullopt);
      auto h = FindEntry(s_.held_index, id);
      delta.held.emplace_back(id, h != s_.held_index.end() && h->first == id
                                      ? std::optional(Mirrored(h->second))
                                      : std::nullopt);
    }
  }
  last_delta_ = {delta.full, delta.full ? s_.pending_index.size() + s_.held_index.size()
                                        : s_.pass_delta.size()};
  s_.pass_delta.clear();
  s_.pass_delta_full = false;
  return delta;
}

MirroredPending JobBooks::Mirrored(const PendingView& p) {
  return MirroredPending{p.job->request, p.gen, p.not_before,
                         p.awaits_dependencies ? std::optional(p.job->row.spec_id) : std::nullopt};
}

MirroredHeld JobBooks::Mirrored(const HeldView& h) { return MirroredHeld{h.view, h.gen, h.group}; }

PendingView JobBooks::PendingViewOf(ActiveJob& job) {
  return PendingView{&job, job.request.get(), job.gen, job.row.not_before,
                     !job.spec->depends_on.empty() && job.row.attempt == 0};
}

std::optional<HeldView> JobBooks::IndexJob(int64_t id, ActiveJob* job,
                                           std::optional<HeldView> was) {
  if (job == nullptr || job->row.status == JobStatus::kPending ||
      (!IsActive(job->row.status) && !job->terminating)) {
    return std::nullopt;
  }
  if (was && was->gen == job->gen) return was;
  auto r = std::make_shared<sched::RunningJob>();
  r->id = id;
  r->attempt = job->row.attempt;
  r->user = job->row.user;
  r->priority = job->row.priority;
  r->per_node = job->row.resources;
  r->exclusive = job->spec->exclusive;
  r->placement = job->row.placement;
  r->started_at = job->row.started_at.value_or(job->placed_at);
  r->time_limit = job->spec->time_limit;
  r->stopping = job->terminating;
  const bool time_limited = !job->terminating && job->spec->time_limit.has_value();
  const bool holds_gpus = !job->terminating && job->row.resources.gpu_milli > 0;
  return HeldView{std::move(r), job->gen, job->row.group, time_limited, holds_gpus, job->placed_at};
}

bool JobBooks::PassIndexConsistentForTesting() {
  CoreLock lock(s_);
  RefreshPassIndex();
  return PassIndexConsistent();
}

std::pair<bool, size_t> JobBooks::LastPassDeltaForTesting() {
  CoreLock lock(s_);
  return last_delta_;
}

int JobBooks::PassIndexRebuildsForTesting() {
  CoreLock lock(s_);
  return s_.index_rebuilds;
}

bool JobBooks::PassIndexConsistent() {
  if (!s_.touched.empty() || s_.rebuild_index) return false;
  size_t pending = 0;
  size_t held = 0;
  for (auto& [id, job] : s_.jobs) {
    if (job.row.status == JobStatus::kPending) {
      auto it = s_.pending_index.find(id);
      if (it == s_.pending_index.end() || !(it->second == PendingViewOf(job))) {
        return false;
      }
      ++pending;
    } else if (IsActive(job.row.status) || job.terminating) {
      auto it = FindEntry(s_.held_index, id);
      if (it == s_.held_index.end() || it->first != id || it->second.gen != job.gen) return false;
      const sched::RunningJob& r = *it->second.view;
      if (r.attempt != job.row.attempt || r.placement != job.row.placement ||
          r.stopping != job.terminating || r.user != job.row.user ||
          r.started_at != job.row.started_at.value_or(job.placed_at) ||
          it->second.time_limited != (!job.terminating && job.spec->time_limit.has_value()) ||
          it->second.holds_gpus != (!job.terminating && job.row.resources.gpu_milli > 0) ||
          it->second.placed_at != job.placed_at) {
        return false;
      }
      ++held;
    }
  }
  return pending == s_.pending_index.size() && held == s_.held_index.size();
}

void JobBooks::TallyJob(Txn& txn, ActiveJob& job) {
  if (!job.tallied || *job.tallied == job.row.status || !job.row.group) return;
  txn.out.tally_moves.emplace_back(*job.row.group, *job.tallied, job.row.status);
  job.tallied = job.row.status;  // with the job: an undo puts it back
}

Status JobBooks::LoadGroupTallies() {
  std::map<int64_t, GroupTallies::Tally> loaded;  // group -> its jobs in memory (live, user)
  for (const auto& [id, job] : s_.jobs) {
    if (!job.row.group) continue;
    GroupTallies::Tally& t = loaded[*job.row.group];
    ++t.live;
    t.user = job.row.user;
    t.size = job.group_size;
  }
  if (loaded.empty()) return Status::Ok();
  std::vector<int64_t> groups;
  groups.reserve(loaded.size());
  for (const auto& [group, t] : loaded) groups.push_back(group);
  auto counts = s_.store.GroupStatusCounts(groups);
  if (!counts.ok()) return counts.status();
  for (auto& [group, t] : loaded) {
    for (const auto& [status, n] : (*counts)[group]) t.by_status[static_cast<int>(status)] = n;
    t.max_running = s_.group_limits.Limit(group);
    s_.tallies.Start(group, std::move(t));
  }
  for (auto& [id, job] : s_.jobs) {
    if (job.row.group) job.tallied = job.row.status;
  }
  return Status::Ok();
}

bool JobBooks::GroupTalliesConsistentForTesting() {
  CoreLock lock(s_);
  std::map<int64_t, int64_t> live;
  const std::unordered_map<int64_t, GroupTallies::Tally> tallies = s_.tallies.All();
  for (const auto& [id, job] : s_.jobs) {
    const bool tallied = job.row.group && tallies.count(*job.row.group);
    if (tallied != job.tallied.has_value()) {
      LogError("job {}: tallied {} but its group's tally {}", id, job.tallied.has_value(),
               tallied ? "exists" : "does not");
      return false;
    }
    if (!tallied) continue;
    if (*job.tallied != job.row.status) {
      LogError("job {} is tallied as {} but is {}", id, JobStatusName(*job.tallied),
               JobStatusName(job.row.status));
      return false;
    }
    ++live[*job.row.group];
  }
  std::vector<int64_t> groups;
  for (const auto& [group, t] : tallies) groups.push_back(group);
  auto stored = s_.store.GroupStatusCounts(groups);
  if (!stored.ok()) return false;
  for (const auto& [group, t] : tallies) {
    if (t.live != live[group] || t.Counts() != (*stored)[group] ||
        t.max_running != s_.group_limits.Limit(group)) {
      LogError("group {}: tally of {} live jobs differs from memory ({}) or the store", group,
               t.live, live[group]);
      return false;
    }
    int64_t sum = 0;
    for (int64_t n : t.by_status) sum += n;
    if (sum != t.size) {
      LogError("group {}: tally counts {} jobs of {}", group, sum, t.size);
      return false;
    }
  }
  return true;
}

uint32_t JobBooks::CountGroup(const std::string& pool, const std::string& user) {
  return s_.counts.Group(pool, s_.shares.TeamOf(user));
}

uint32_t JobBooks::CountGroupOf(ActiveJob& job) {
  if (!job.count_group) job.count_group = CountGroup(job.spec ? job.spec->pool : "", job.row.user);
  return *job.count_group;
}

void JobBooks::CountJob(ActiveJob& job) {
  std::optional<std::pair<int, uint32_t>> key;
  if (!IsTerminal(job.row.status) || job.terminating) {
    const int slot = job.terminating ? JobCounts::kStoppingSlot : static_cast<int>(job.row.status);
    key.emplace(slot, CountGroupOf(job));
  }
  if (key == job.counted) return;
  UncountJob(job);
  job.counted = key;
  AddToCounts(job);
}

void JobBooks::AddToCounts(const ActiveJob& job) {
  if (job.counted) s_.counts.Add(*job.counted, job.row.user);
}

void JobBooks::UncountJob(ActiveJob& job) {
  if (!job.counted) return;
  s_.counts.Remove(*job.counted, job.row.user);
  job.counted.reset();
}

void JobBooks::RecountAllJobs() {
  s_.counts.Clear();
  for (auto& [id, job] : s_.jobs) {
    job.counted.reset();
    job.count_group.reset();  // its user may have changed teams
    CountJob(job);
  }
}

bool JobBooks::JobCountsConsistentForTesting() {
  CoreLock lock(s_);
  const JobCounts kept = s_.counts;
  RecountAllJobs();
  return kept.SameCounts(s_.counts);
}

std::vector<int64_t> JobBooks::JobsOn(const std::string& node) {
  if (s_.node_jobs.NeedsRebuild(s_.jobs.size())) {
    s_.node_jobs.Clear();
    for (const auto& [id, job] : s_.jobs) s_.node_jobs.Add(id, job.row.placement);
  }
  return s_.node_jobs.Of(node);
}

}  // namespace berth
