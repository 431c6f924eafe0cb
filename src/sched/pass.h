// Pass: one run of Schedule() (scheduler.h) over one snapshot. Internal to sched/; its methods are
// split over pass.cpp (queue order, placement, exclusive domains, waiting reasons), preemption.cpp
// and reservation.cpp.
//
// A pass walks the queue once, best job first. For each job it tries, in order: to place it on what
// is free (best fit; a failed request shape is not tried again), to preempt lower-priority jobs
// (Config::preemption), and, when it has waited longer than Config::starvation_bound, to reserve
// the nodes it waits for. Every decision lowers the pass's own free amounts at once, so no later
// job of the pass counts the same unit twice.
//
// Cost: building the pass is O(nodes) (plus O(running jobs) the first time a job needs to know who
// runs where: an exclusive job, a preemption, a reservation). A search scans every node until the
// pass has made Tuning::index_after_searches of them, then walks a NodeIndex: O(log nodes + nodes
// visited before the first fit). Failures cost O(nodes) once per request shape, for the reason.
// Preemption keeps a queue of candidate nodes per shape and priority, built in O(nodes) and then
// updated only where nodes change, so jobs that evict one after another do not rescan the cluster.
// Not thread-safe; Schedule() makes one per call.
#pragma once

#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "sched/fair_share.h"
#include "sched/kept_candidates.h"
#include "sched/node_index.h"
#include "sched/node_state.h"
#include "sched/reserved_windows.h"
#include "sched/scheduler.h"
#include "sched/topology.h"

namespace berth::sched::internal {

inline constexpr TimeMs kNever = std::numeric_limits<TimeMs>::max();
inline constexpr uint32_t kNoReason = std::numeric_limits<uint32_t>::max();

// Knobs that change how a pass computes, never what it decides. Tests turn them to make sure.
struct Tuning {
  // Searches scan every node until a pass has made this many, then use the node index (building it
  // costs about as much as 30 scans; a pass that places one job never pays for it).
  int index_after_searches = 32;
  // One preemption queue serves every job of its shape and priority (else: a new one per job).
  bool reuse_preemption_queues = true;
  // Queue entries start as cheap lower bounds of their cost (else: exact, every node evaluated).
  bool bound_preemption_queues = true;
  // Topology-aware gangs read candidate counts kept across the pass (sched/kept_candidates.h; else:
  // every node that fits is found and counted for each gang).
  bool keep_topology_counts = true;
};

PassResult Schedule(const Snapshot& snapshot, const Config& config, const Tuning& tuning);

// The pool a job may use: its pool's id, -1 for any pool, -2 for a pool no node is in.
int PoolOf(const NodeState& state, const JobRequest& job);

class Pass {
 public:
  Pass(const Snapshot& snapshot, const Config& config, const Tuning& tuning);
  PassResult Run();

 private:
  // ---- Who holds resources, and where (built on first need: EnsureOccupancy) ----
  enum class Kind : uint8_t {
    kRunning,   // may be preempted by a job of higher priority
    kStopping,  // RunningJob::stopping: never a victim, but a preemptor may wait for it
    kPlaced,    // placed in this pass, or resources held for a job in this pass: never moved
    kVictim,    // evicted (or waited for) in this pass: its resources are held for the preemptor
  };
  struct Occupant {
    JobId id = 0;
    int attempt = 0;
    int priority = 0;
    Kind kind = Kind::kRunning;
    TimeMs started_at = 0;
    TimeMs end = kNever;  // when its resources are expected back
    int team = 0;         // Shares' index
    // Running work wholly beyond its team's nominal quota (or of a resource without one): other
    // teams may evict it (by priority, or to reclaim their quota). Kept current as the pass evicts.
    bool borrowed = true;
    // What it counts as against its team's quota (Shares::Counted; a MIG slice as its share of its
    // GPU's type): set where some team has a quota.
    int quota_type = -1;
    MilliGpu quota_gpus = 0;
    const ResourceRequest* per_node = nullptr;
    const std::string* exclusive = nullptr;
    const Placement* placement = nullptr;
    std::vector<NodeIdx> nodes;  // the node of each grant of `placement`; kNoNode if it left
  };
  // What a job may do with an occupant of a node it wants.
  enum class Role { kBlocks, kVictim, kWait };
  // Who a preemption may evict: lower-priority jobs of the team or borrowed ones (by priority), or
  // other teams' borrowed jobs of any priority (a reclaim).
  struct Claim {
    int priority = 0;
    int team = 0;
    bool reclaim = false;
  };

  // ---- The domains of one exclusive label key ----
  struct Domains {
    std::vector<std::string> values;            // sorted; a domain is its position
    std::vector<int> of_node;                   // node -> domain, -1 without the label
    std::vector<std::vector<NodeIdx>> members;  // in node order
    std::vector<uint8_t> closed;                // held by an exclusive job: closed to others
    bool tracked = false;                       // `grants` and `free` are maintained
    std::vector<int> grants;                    // grants of occupants on the domain's nodes
    std::set<std::pair<size_t, int>> free;      // (size, domain) of domains without a grant
  };

  // What a job's shape has already shown in this pass (see Run()).
  // Under reservations a job may use a reserved node only if its time limit ends in time, so a
  // failure with limit L says the same of any longer limit and of none (and nothing of shorter).
  struct Memo {
    bool any = false;        // failed while no reservation was in force: for every limit
    bool unlimited = false;  // failed under reservations without a limit
    std::optional<DurationMs> shortest;  // the shortest limit that failed under reservations
    bool Covers(const std::optional<DurationMs>& limit) const;
    void Add(bool reservations, const std::optional<DurationMs>& limit);
  };

  // A preemption (or a wait for stopping jobs) that would let a job start.
  struct Choice {
    std::vector<int> victims;    // occupants to evict
    std::vector<int> waits;      // stopping occupants to wait for
    std::vector<NodeIdx> nodes;  // rank order
    std::vector<Scratch> after;  // per rank: the node once the set is gone
  };
  // What a set of victims costs, smaller is better: lowest priority first, then fewest victims,
  // then the most recently started, then the fewest stopping jobs waited for.
  struct Cost {
    int max_priority = std::numeric_limits<int>::min();
    int victims = 0;
    TimeMs oldest_start = kNever;
    int waits = 0;
    bool operator<(const Cost& o) const;
  };

  enum class Outcome { kNone, kPreempted, kHeld };

  // pass.cpp
  // Per position in Snapshot::pending: what the pass needs of a job without reading it again.
  struct PendingIndex {
    std::vector<JobId> id;
    std::vector<uint32_t> shape;
    std::vector<int> user;
  };
  // Fills `out` with the jobs left waiting (outcome: by position in the snapshot's pending jobs, an
  // index into `reasons` or kNoReason for a job placed; `blocking`: by shape) and its tables.
  void Explain(const std::vector<uint32_t>& considered, const std::vector<uint32_t>& outcome,
               const PendingIndex& jobs, const std::vector<Ask>& asks,
               const std::vector<int>& blocking, std::vector<std::string> reasons, Waiting& out);
  bool TryPlace(const JobRequest& job, const Need& need, std::string* reason);
  bool TryPlaceExclusive(const JobRequest& job, const Need& need, std::string* reason);
  // The `count` best nodes for `job` (fewer when fewer fit); for a gang placed by the topology,
  // its choice (sched/topology.h) in rank order, or none with *shortfall saying why.
  std::vector<NodeIdx> BestNodes(const JobRequest& job, const Need& need, size_t count,
                                 Shortfall* shortfall);
  // Nodes inside an operator's reservation window are left out: only its members' jobs may start
  // there, and BestNodes finds those by a scan.
  bool InIndex(NodeIdx i) const {
    return state_.schedulable(i) && !closed_[i] && !windows_.ActiveOn(i);
  }
  bool InScope(NodeIdx i, const JobRequest& job, int pool) const;
  // A node reserved for a starving job, which `job` may not use (reservation.cpp).
  bool Blocked(NodeIdx i, const JobRequest& job) const;

  void Commit(const JobRequest& job, const Need& need, const std::vector<NodeIdx>& nodes);
  void TakeOn(NodeIdx i, const Need& need, const std::vector<GpuGrant>& gpus);
  // From now on `job` holds `placement` on `nodes` in this pass.
  void Hold(const JobRequest& job, const Placement* placement, const std::vector<NodeIdx>& nodes);
  void CloseDomainOf(const std::string& key, NodeIdx i);
  Domains& DomainsOf(const std::string& key);
  void Track(Domains& domains);
  void EnsureOccupancy();
  // The node of every grant of every running job, in order (kNoNode: the node left).
  const std::vector<NodeIdx>& RunningNodes();
  int AddOccupant(Occupant o);
  Occupant OccupantOf(const JobRequest& job, const Placement* placement,
                      std::vector<NodeIdx> nodes) const;
  // Waiting reasons.
  // The nodes a job may use at all: schedulable, in its pool and selector, outside any domain held
  // exclusively. Empty, with *reason set, when there are none.
  std::vector<NodeIdx> EligibleNodes(const JobRequest& job, std::string* reason) const;
  std::vector<NodeIdx> ScanEligible(const JobRequest& job, std::string* reason) const;
  // Why a job was not placed, in words (waiting_reasons.h): it reads this pass's state.
  friend class WaitingReasons;

  // preemption.cpp
  // Where a preemption could go, cheapest first: a node (or an exclusive domain) and what evicting
  // there would cost. Lazy: an entry may hold only a lower bound of the cost until it reaches the
  // top, and is recomputed when its node changed since (version_). One queue per shape, priority
  // and time limit serves every job of that kind in the pass, so a queue of jobs that all preempt
  // pays for one scan of the nodes, not one each.
  struct Candidate {
    Cost cost;
    FitOrder order;
    uint32_t where = 0;  // a node, or a domain
    uint64_t version = 0;
    bool exact = false;  // `cost` is exact, not a lower bound
  };
  struct CandidateQueue {
    std::vector<Candidate> heap;
    // Per node (or domain): the version of its one live entry; older entries are dropped when they
    // come out. A node's cost can fall as well as rise when it changes (another job's victims
    // leave it), so a changed node gets a new entry with a fresh bound at once (see Sync).
    std::vector<uint64_t> latest;
    size_t synced = 0;  // touched_ entries seen
    void Push(const Candidate& c);
    Candidate Pop();
  };
  using QueueKey = std::tuple<uint32_t, int, std::optional<DurationMs>, int>;  // team: reclaim
  static bool Later(const Candidate& a, const Candidate& b);  // heap order: a comes out after b

  Outcome TryPreempt(uint32_t shape, const JobRequest& job, const Need& need, const Claim& claim,
                     std::string* reason);
  Role RoleOf(const Occupant& o) const;
  // After `victim` was evicted: its team's jobs of its GPU type, oldest first, fill the quota
  // again; those that now fit in it are no longer borrowed.
  void UpdateBorrowed(const Occupant& victim);
  // Whether another team holds borrowed work `job` could reclaim (for its waiting reason).
  bool AnyBorrowedOutside(int team);
  std::optional<Choice> ChooseVictims(CandidateQueue& queue, const JobRequest& job,
                                      const Need& need);
  std::optional<Choice> ChooseDomain(CandidateQueue& queue, const JobRequest& job,
                                     const Need& need);
  std::optional<Candidate> NodeBound(NodeIdx i, const JobRequest& job, const Need& need) const;
  // The cheapest set that frees node i for one node's share of `job`, with its cost in *out.
  std::optional<Candidate> NodeExact(NodeIdx i, const JobRequest& job, const Need& need,
                                     std::vector<int>* set) const;
  std::vector<int> LocalVictims(NodeIdx i, const Need& need, const std::vector<int>& must,
                                const std::vector<int>& may) const;
  std::optional<Candidate> DomainExact(const Domains& d, size_t dom, const JobRequest& job,
                                       const Need& need, std::vector<int>* set) const;
  uint64_t DomainVersion(const Domains& d, size_t dom) const;
  // Drops from `set` (most expensive first) every job but those in `keep` without which `fits`
  // still holds.
  template <class Fits>
  void Prune(std::vector<int>& set, const std::vector<int>& keep, Fits fits) const;
  Cost CostOf(const std::vector<int>& set) const;
  void ReleaseOn(Scratch& s, const Occupant& o, NodeIdx i) const;  // o's grant on node i, if any
  TimeMs EndOf(const Occupant& o) const;  // when o's resources come back (reservation.cpp)
  // Node i with the jobs of `set` gone (and its grants of them given back).
  Scratch Without(NodeIdx i, const std::vector<int>& set) const;
  // Whether `need` fits on node i once the jobs marked in `marked_` are gone.
  bool FitsWithout(NodeIdx i, const Need& need, Scratch* after) const;
  Outcome Execute(const JobRequest& job, const Need& need, Choice choice, std::string* reason);
  void Touch(NodeIdx i) {
    ++version_[i];
    touched_.push_back(i);
  }
  void TouchOccupant(const Occupant& o);  // its nodes, and the domains it holds

  // reservation.cpp
  bool Starving(const JobRequest& job) const;
  // Reserves what a starving job waits for; returns the words to add to its waiting reason, or ""
  // when there is nothing to reserve.
  std::string Reserve(const JobRequest& job, const Need& need);
  // The earliest time `need` fits on node i as the jobs there end (kNever: only once a job without
  // a time limit ends); nullopt when it does not fit even with the node empty.
  std::optional<TimeMs> FreeTime(NodeIdx i, const Need& need) const;

  const Snapshot& snapshot_;
  const Config& config_;
  const Tuning& tuning_;
  Shares shares_;
  Claim claim_;  // of the preemption being decided
  NodeState state_;
  NodeIndex index_;
  Topology topology_;            // the cluster's topology levels (Config::topology_levels)
  KeptCandidates kept_;          // for topology-aware gangs: what fits, per domain
  ReservedWindows windows_;      // operators' reservations (Snapshot::reserved)
  std::vector<uint8_t> closed_;  // inside a domain held by an exclusive job
  uint64_t closings_ = 0;        // nodes closed so far
  struct Eligible {
    uint64_t closed;  // closings_ when computed
    std::vector<NodeIdx> nodes;
    std::string reason;
  };
  mutable std::map<std::string, Eligible, std::less<>>
      eligible_;  // by pool, for jobs without a selector
  std::map<std::string, std::unique_ptr<Domains>, std::less<>> domains_;
  int searches_ = 0;
  std::optional<int> min_running_priority_;  // computed on the first attempt to preempt

  bool occupancy_built_ = false;
  std::vector<Occupant> occupants_;
  std::vector<std::vector<int>> on_node_;  // occupants with a grant on node i
  std::vector<std::vector<int>> holders_;  // exclusive occupants whose domain contains node i
  std::vector<NodeIdx> running_nodes_;     // see RunningNodes()
  std::vector<Occupant> early_;  // placed before occupancy was built: added to it when it is
  mutable std::vector<uint8_t> marked_;  // scratch flags per occupant (preemption)
  std::vector<uint32_t> version_;        // per node: bumped whenever it changes
  std::vector<NodeIdx> touched_;         // every change, in order: queues catch up from it
  std::map<QueueKey, CandidateQueue> queues_;
  bool any_quota_ = false;  // some team has a quota
  uint64_t evictions_ = 0;  // decisions that evicted someone so far
  std::vector<std::pair<uint64_t, bool>> borrowed_outside_;  // by team: (evictions_, answer)
  // (team, GPU type) -> its running occupants, oldest first: whose work is borrowed.
  std::map<std::pair<int, int>, std::vector<int>> borrow_groups_;
  int queues_priority_ = std::numeric_limits<int>::max();  // queues_ serve jobs of this priority

  // Decisions, in deques so that occupants can point at their placements.
  std::deque<PlaceDecision> placed_;
  std::deque<PreemptDecision> preempted_;
  std::deque<HoldDecision> held_;

  struct Reservation {
    JobId job = 0;
    TimeMs until = kNever;  // when the reserved nodes are expected to be free
  };
  std::vector<Reservation> reservations_;
  std::vector<int> reserved_;  // node -> reservation, -1; empty until the first reservation
  // Times Blocked() kept a job off a node: an attempt that never was failed whatever the job's
  // time limit (its Memo needs no limit).
  mutable uint64_t blocks_ = 0;

  // Why the last WhyNot() call's job waits, as numbers (waiting_reasons.cpp).
  mutable std::optional<Blocking> blocking_;
  std::vector<Blocking> blockings_;  // one per failing shape that had numbers
};

}  // namespace berth::sched::internal
