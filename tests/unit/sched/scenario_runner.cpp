#include "scenario_runner.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "common/clock.h"
#include "common/job_status.h"
#include "common/quantity.h"
#include "common/strings.h"
#include "sched/dependencies.h"
#include "sched/scheduler.h"
#include "sched_testing.h"

namespace berth::sched::testing {
namespace {

class Script {
 public:
  explicit Script(std::string name) : name_(std::move(name)) {}

  // Runs one command line and returns what it prints (without the "> " prefix).
  std::vector<std::string> Run(const std::string& line, int line_no);

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw ScenarioError(name_ + ":" + std::to_string(line_no_) + ": " + what);
  }
  // Splits "key=value" options; bare words (like `draining`) map to "".
  std::map<std::string, std::string> Options(const std::vector<std::string>& words, size_t from);
  MilliCpu Cpus(const std::string& text) const;
  Mib Memory(const std::string& text) const;
  int64_t Integer(const std::string& text) const;
  // A time or a duration: a bare number is milliseconds; "90s", "10m", "1h30m" as in job specs.
  int64_t Millis(const std::string& text) const;
  std::map<std::string, std::string> Labels(const std::string& text) const;
  JobRequest Request(JobId id, const std::map<std::string, std::string>& options) const;

  void AddNode(const std::vector<std::string>& words);
  void AddRunning(const std::vector<std::string>& words);
  std::vector<std::string> AddPending(const std::vector<std::string>& words);
  void AddTeam(const std::vector<std::string>& words);
  void AddUser(const std::vector<std::string>& words);
  void SetGroup(const std::vector<std::string>& words);
  // A job the script declares (pending or running), in group `group` or none.
  void Declare(JobId id, std::optional<int64_t> group);
  // "ok:3", "notok:group:7", "any:1,2;ok:4" (conditions separated by ';' must all hold; without a
  // kind, ok), with the counts of targets that have already ended.
  std::vector<DepCondition> Conditions(const std::string& text) const;
  // Whether a pending job waits for its dependencies (and so is kept out of the pass).
  bool Held(JobId id) const;
  // A job ended for good with `status` (it has already left the queue or given its resources
  // back): tells the dependencies, and releases or cancels their waiters, cascading through the
  // waiters cancelled. Returns the "release ID" and "cancel ID: why" lines.
  std::vector<std::string> Ended(JobId id, JobStatus status);
  std::map<std::string, MilliGpu> GpuAmounts(const std::string& text) const;
  std::vector<std::string> Explain(const std::vector<std::string>& words) const;
  std::vector<std::string> RunPass();
  void Reserve(const std::vector<std::string>& words);
  std::vector<std::string> Check(const std::vector<std::string>& words);

  std::string name_;
  int line_no_ = 0;
  Snapshot snapshot_;
  Config config_;
  std::map<JobId, JobRequest> submitted_;  // every pending job as submitted, for requeueing
  std::optional<PassResult> last_pass_;
  std::set<JobId> declared_;                    // every job declared, for dependency targets
  std::map<JobId, int64_t> group_of_;           // the bulk group of each job declared with one
  std::map<int64_t, std::set<JobId>> members_;  // the jobs declared in each group
  std::map<int64_t, int> caps_;                 // group -> max_running
  std::map<JobId, JobStatus> ended_;            // jobs that ended, and how
  Dependencies deps_;                           // keyed by the waiting job's id
};

std::vector<std::string> Script::Run(const std::string& line, int line_no) {
  line_no_ = line_no;
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  const std::string& cmd = words[0];
  if (cmd == "node") {
    AddNode(words);
  } else if (cmd == "running") {
    AddRunning(words);
  } else if (cmd == "pending") {
    return AddPending(words);
  } else if (cmd == "team") {
    AddTeam(words);
  } else if (cmd == "user") {
    AddUser(words);
  } else if (cmd == "group") {
    SetGroup(words);
  } else if (cmd == "reserve") {
    Reserve(words);
  } else if (cmd == "unreserve") {
    if (words.size() != 2) Fail("unreserve NAME");
    std::erase_if(snapshot_.reserved, [&](const ReservedWindow& w) { return w.name == words[1]; });
  } else if (cmd == "explain") {
    return Explain(words);
  } else if (cmd == "schedule") {
    return RunPass();
  } else if (cmd == "apply") {
    if (!last_pass_) Fail("apply without a schedule before it");
    if (words.size() > 2 || (words.size() == 2 && words[1] != "stop")) Fail("apply [stop]");
    const PreemptMode mode = words.size() == 2 ? PreemptMode::kStop : PreemptMode::kInstant;
    // The server counts each reclaim against its team's rate limit when it applies it.
    for (const PreemptDecision& d : last_pass_->preemptions) {
      if (!d.reclaim) continue;
      auto team = std::find_if(snapshot_.teams.begin(), snapshot_.teams.end(),
                               [&](const TeamView& t) { return t.name == d.team; });
      if (team == snapshot_.teams.end()) {
        snapshot_.teams.push_back(TeamView{.name = d.team});
        team = snapshot_.teams.end() - 1;
      }
      team->reclaims.push_back(snapshot_.now);
    }
    // A requeued victim keeps its original request (and submission time) when the script has it.
    // A victim declared running keeps its group.
    for (JobId id : Apply(snapshot_, *last_pass_, mode)) {
      auto original = submitted_.find(id);
      auto group = group_of_.find(id);
      for (JobRequest& j : snapshot_.pending) {
        if (j.id != id) continue;
        if (original != submitted_.end()) j = original->second;
        if (group != group_of_.end()) j.group = group->second;
      }
    }
    last_pass_.reset();
  } else if (cmd == "config") {
    for (const auto& [key, value] : Options(words, 1)) {
      if (key == "starvation") {
        config_.starvation_bound = Millis(value);
      } else if (key == "preemption" && (value == "on" || value == "off")) {
        config_.preemption = value == "on";
      } else if (key == "charge") {
        config_.admission_charge_s = static_cast<double>(Millis(value)) / 1000;
      } else if (key == "weights") {
        for (const auto& [type, weight] : Labels(value)) {
          config_.gpu_weights[type] = static_cast<double>(Cpus(weight)) / 1000;
        }
      } else if (key == "reclaim-limit") {
        config_.reclaim_limit = static_cast<int>(Integer(value));
      } else if (key == "reclaim-window") {
        config_.reclaim_window = Millis(value);
      } else if (key == "topology") {
        config_.topology_levels = Split(value, ',');
      } else {
        Fail("unknown config '" + key + "=" + value +
             "' (starvation=D, preemption=on|off, charge=D, weights=T=W,..., reclaim-limit=N, "
             "reclaim-window=D, topology=LEVEL,...)");
      }
    }
  } else if (cmd == "now") {
    if (words.size() != 2) Fail("now needs one time");
    snapshot_.now = Millis(words[1]);
    last_pass_.reset();
  } else if (cmd == "finish" || cmd == "cancel") {
    if (words.size() < 2) Fail(cmd + " needs job ids");
    std::vector<std::string> out;
    for (size_t i = 1; i < words.size(); ++i) {
      const JobId id = Integer(words[i]);
      JobStatus status = JobStatus::kSucceeded;
      if (cmd == "finish") {
        if (!Finish(snapshot_, id)) Fail("job " + words[i] + " is not running");
      } else {
        auto it = std::find_if(snapshot_.pending.begin(), snapshot_.pending.end(),
                               [&](const JobRequest& j) { return j.id == id; });
        if (it == snapshot_.pending.end()) Fail("job " + words[i] + " is not pending");
        snapshot_.pending.erase(it);
        status = JobStatus::kCancelled;
      }
      for (std::string& line : Ended(id, status)) out.push_back(std::move(line));
    }
    last_pass_.reset();  // decisions about a queue that changed must not be applied
    return out;
  } else if (cmd == "end") {
    if (words.size() != 3) Fail("end needs a job id and a status (end 3 FAILED)");
    const JobId id = Integer(words[1]);
    const std::optional<JobStatus> status = ParseJobStatus(words[2]);
    if (!status || !IsTerminal(*status)) {
      Fail("bad status '" + words[2] + "' (want SUCCEEDED, FAILED, CANCELLED, LOST, ...)");
    }
    if (!Finish(snapshot_, id)) {
      auto it = std::find_if(snapshot_.pending.begin(), snapshot_.pending.end(),
                             [&](const JobRequest& j) { return j.id == id; });
      if (it == snapshot_.pending.end())
        Fail("job " + words[1] + " is neither running nor pending");
      snapshot_.pending.erase(it);
    }
    last_pass_.reset();
    return Ended(id, *status);
  } else if (cmd == "drain" || cmd == "resume") {
    if (words.size() != 2) Fail(cmd + " needs one node name");
    for (NodeView& n : snapshot_.nodes) {
      if (n.name == words[1]) {
        n.schedulable = cmd == "resume";
        return {};
      }
    }
    Fail("no node " + words[1]);
  } else if (cmd == "nodes") {
    std::vector<NodeView> nodes = snapshot_.nodes;
    std::sort(nodes.begin(), nodes.end(),
              [](const NodeView& a, const NodeView& b) { return a.name < b.name; });
    std::vector<std::string> out;
    for (const NodeView& n : nodes) out.push_back(FormatNode(n));
    return out;
  } else if (cmd == "check") {
    return Check(words);
  } else {
    Fail("unknown command '" + cmd + "'");
  }
  return {};
}

// "reserve NAME start=T end=T nodes=n1,n2|all [users=a,b] [team=T] [maintenance]": an operator's
// reservation window, as the server hands it to a pass (it replaces one of the same name).
void Script::Reserve(const std::vector<std::string>& words) {
  if (words.size() < 2) Fail("reserve NAME start=T end=T nodes=...");
  ReservedWindow w;
  w.name = words[1];
  for (const auto& [key, value] : Options(words, 2)) {
    if (key == "start") {
      w.start = Millis(value);
    } else if (key == "end") {
      w.end = Millis(value);
    } else if (key == "nodes") {
      if (value == "all") {
        w.all_nodes = true;
      } else {
        w.nodes = Split(value, ',');
      }
    } else if (key == "users") {
      w.users = Split(value, ',');
    } else if (key == "team") {
      w.team = value;
    } else if (key == "maintenance") {
      w.maintenance = true;
    } else {
      Fail("unknown reserve option '" + key + "'");
    }
  }
  std::erase_if(snapshot_.reserved, [&](const ReservedWindow& r) { return r.name == w.name; });
  snapshot_.reserved.push_back(std::move(w));
}

std::map<std::string, std::string> Script::Options(const std::vector<std::string>& words,
                                                   size_t from) {
  std::map<std::string, std::string> options;
  for (size_t i = from; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    std::string key = words[i].substr(0, eq);
    std::string value = eq == std::string::npos ? "" : words[i].substr(eq + 1);
    if (!options.emplace(key, value).second) Fail("option '" + key + "' given twice");
  }
  return options;
}

int64_t Script::Millis(const std::string& text) const {
  if (!text.empty() &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Integer(text);
  }
  std::optional<DurationMs> d = ParseDuration(text);
  if (!d) Fail("bad time '" + text + "' (want 700000, 90s, 10m or 1h30m)");
  return *d;
}

MilliCpu Script::Cpus(const std::string& text) const {
  std::optional<int64_t> milli = ParseMilli(text);
  if (!milli) Fail("bad CPU count '" + text + "'");
  return *milli;
}

Mib Script::Memory(const std::string& text) const {
  if (text.empty()) Fail("empty memory size");
  std::string number = text;
  Mib unit = kMibPerGib;
  if (number.back() == 'G') {
    number.pop_back();
  } else if (number.back() == 'M') {
    number.pop_back();
    unit = 1;
  }
  std::optional<int64_t> milli = ParseMilli(number);
  if (!milli || (*milli * unit) % 1000 != 0) Fail("bad memory size '" + text + "'");
  return *milli * unit / 1000;
}

int64_t Script::Integer(const std::string& text) const {
  const bool negative = !text.empty() && text[0] == '-';  // priorities may be negative
  std::optional<int64_t> milli = ParseMilli(negative ? text.substr(1) : text);
  if (!milli || *milli % 1000 != 0 || text.back() == '+') Fail("bad integer '" + text + "'");
  return (negative ? -*milli : *milli) / 1000;
}

std::map<std::string, std::string> Script::Labels(const std::string& text) const {
  std::map<std::string, std::string> labels;
  for (const std::string& pair : Split(text, ',')) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) Fail("bad label '" + pair + "' (want key=value)");
    labels[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return labels;
}

JobRequest Script::Request(JobId id, const std::map<std::string, std::string>& options) const {
  JobRequest job;
  job.id = id;
  for (const auto& [key, value] : options) {
    if (key == "prio") {
      job.priority = static_cast<int>(Integer(value));
    } else if (key == "user") {
      job.user = value;
    } else if (key == "gpus") {
      const size_t colon = value.find(':');
      if (colon == std::string::npos || colon == 0) Fail("bad gpus '" + value + "' (want T4:0.5)");
      job.per_node.gpu_type = value.substr(0, colon);
      job.per_node.gpu_milli = Cpus(value.substr(colon + 1));
    } else if (key == "cpus") {
      job.per_node.cpus = Cpus(value);
    } else if (key == "mem") {
      job.per_node.memory = Memory(value);
    } else if (key == "nodes") {
      job.num_nodes = static_cast<int>(Integer(value));
    } else if (key == "pool") {
      job.pool = value;
    } else if (key == "reservation") {
      job.reservation = value;
    } else if (key == "selector") {
      job.node_selector = Labels(value);
    } else if (key == "exclusive") {
      job.exclusive = value;
    } else if (key == "required" || key == "preferred") {
      // A level of `config topology=...`, by name.
      const auto& levels = config_.topology_levels;
      auto it = std::find(levels.begin(), levels.end(), value);
      const int level =
          it == levels.end() ? kUndefinedLevel : static_cast<int>(it - levels.begin());
      (key == "required" ? job.topology.required : job.topology.preferred) = level;
    } else if (key == "submitted") {
      job.submitted_at = Millis(value);
    } else if (key == "limit") {
      job.time_limit = Millis(value);
    } else if (key == "group") {
      job.group = Integer(value);
    } else {
      Fail("unknown job option '" + key + "'");
    }
  }
  return job;
}

void Script::AddNode(const std::vector<std::string>& words) {
  if (words.size() < 2) Fail("node needs a name");
  NodeView node;
  node.name = words[1];
  // GPU topology (node option nvlink=0,1,2,3/4,5,6,7: groups of device indices; pcie= and numa=
  // likewise), applied once the devices exist.
  std::vector<std::pair<uint8_t Device::*, std::string>> links;
  for (const auto& [key, value] : Options(words, 2)) {
    if (key == "cpus") {
      node.cpus_total = node.cpus_free = Cpus(value);
    } else if (key == "mem") {
      node.memory_total = node.memory_free = Memory(value);
    } else if (key == "gpus") {
      for (const std::string& group : Split(value, ',')) {
        const size_t colon = group.find(':');
        if (colon == std::string::npos || colon == 0)
          Fail("bad gpus '" + group + "' (want V100:4)");
        AddGpus(node, group.substr(0, colon), static_cast<int>(Integer(group.substr(colon + 1))));
      }
    } else if (key == "pool") {
      node.pool = value;
    } else if (key == "labels") {
      node.labels = Labels(value);
    } else if (key == "draining") {
      node.schedulable = false;
    } else if (key == "nvlink" || key == "pcie" || key == "numa") {
      links.emplace_back(key == "nvlink" ? &Device::nvlink
                         : key == "pcie" ? &Device::pcie
                                         : &Device::numa,
                         value);
    } else {
      Fail("unknown node option '" + key + "'");
    }
  }
  for (const auto& [level, groups] : links) {
    uint8_t group = 0;
    for (const std::string& members : Split(groups, '/')) {
      ++group;
      for (const std::string& index : Split(members, ',')) {
        Device* d = nullptr;
        for (Device& g : node.gpus) {
          if (g.index == Integer(index)) d = &g;
        }
        if (d == nullptr) Fail("node " + node.name + " has no device " + index);
        d->*level = group;
      }
    }
  }
  for (const NodeView& n : snapshot_.nodes) {
    if (n.name == node.name) Fail("node " + node.name + " declared twice");
  }
  snapshot_.nodes.push_back(std::move(node));
}

void Script::AddRunning(const std::vector<std::string>& words) {
  if (words.size() < 4) Fail("running needs an id and 'on NODE'");
  RunningJob job;
  job.id = Integer(words[1]);
  std::optional<int64_t> group;
  auto on = std::find(words.begin(), words.end(), "on");
  if (on == words.end()) Fail("running needs 'on NODE'");
  // Options may come before the nodes or after them: "running 1 prio=2 on n1 gpus=0 limit=1h".
  std::vector<std::string> options(words.begin(), on);
  // The rest: "on NODE [gpus=...]" repeated, one per node of the job, in rank order.
  for (auto it = on; it != words.end();) {
    if (*it != "on") {
      options.push_back(*it++);
      continue;
    }
    if (it + 1 == words.end()) Fail("expected 'on NODE'");
    NodeGrant grant;
    grant.node = *(it + 1);
    grant.rank = static_cast<int>(job.placement.size());
    it += 2;
    if (it != words.end() && StartsWith(*it, "gpus=")) {
      for (const std::string& item : Split(it->substr(5), ',')) {
        const size_t colon = item.find(':');
        GpuGrant g;
        g.index = static_cast<int>(Integer(item.substr(0, colon)));
        g.milli = colon == std::string::npos ? kMilliPerGpu : Cpus(item.substr(colon + 1));
        grant.gpus.push_back(g);
      }
      ++it;
    }
    job.placement.push_back(std::move(grant));
  }
  for (const auto& [key, value] : Options(options, 2)) {
    if (key == "prio") {
      job.priority = static_cast<int>(Integer(value));
    } else if (key == "user") {
      job.user = value;
    } else if (key == "cpus") {
      job.per_node.cpus = Cpus(value);
    } else if (key == "mem") {
      job.per_node.memory = Memory(value);
    } else if (key == "exclusive") {
      job.exclusive = value;
    } else if (key == "started") {
      job.started_at = Millis(value);
    } else if (key == "limit") {
      job.time_limit = Millis(value);
    } else if (key == "stopping") {
      job.stopping = true;
    } else if (key == "group") {
      group = Integer(value);
    } else {
      Fail("unknown running option '" + key + "'");
    }
  }
  // The job's GPU request as the scheduler would see it, from what it holds on its first node.
  const NodeGrant& first = job.placement.front();
  NodeView* node = nullptr;
  for (NodeView& n : snapshot_.nodes) {
    if (n.name == first.node) node = &n;
  }
  for (const NodeGrant& g : job.placement) {
    if (std::none_of(snapshot_.nodes.begin(), snapshot_.nodes.end(),
                     [&](const NodeView& n) { return n.name == g.node; })) {
      Fail("no node " + g.node);
    }
  }
  for (const GpuGrant& g : first.gpus) {
    job.per_node.gpu_milli += g.milli;
    for (const Device& d : node->gpus) {
      if (d.index == g.index) job.per_node.gpu_type = d.type;
    }
  }
  std::string problems = Hold(snapshot_, job);
  if (!problems.empty()) Fail("running job does not fit:" + problems);
  Declare(job.id, group);
}

std::vector<std::string> Script::AddPending(const std::vector<std::string>& words) {
  if (words.size() < 2) Fail("pending needs an id");
  JobId first = 0;
  JobId last = 0;
  const size_t dots = words[1].find("..");
  if (dots == std::string::npos) {
    first = last = Integer(words[1]);
  } else {
    first = Integer(words[1].substr(0, dots));
    last = Integer(words[1].substr(dots + 2));
    if (last < first) Fail("empty id range " + words[1]);
  }
  std::map<std::string, std::string> options = Options(words, 2);
  // Its dependencies name jobs declared before this line, so they never form a cycle.
  std::optional<std::vector<DepCondition>> conditions;
  if (auto after = options.find("after"); after != options.end()) {
    conditions = Conditions(after->second);
    options.erase(after);
  }
  std::vector<std::string> out;
  for (JobId id = first; id <= last; ++id) {
    for (const JobRequest& j : snapshot_.pending) {
      if (j.id == id) Fail("job " + std::to_string(id) + " is already pending");
    }
    JobRequest job = Request(id, options);
    Declare(id, job.group);
    snapshot_.pending.push_back(job);
    submitted_[id] = std::move(job);
    if (!conditions) continue;
    // As the server does at submission: a dependency that can no longer hold cancels the job.
    if (deps_.Add(id, *conditions) == DepState::kFailed) {
      const std::string why = deps_.Find(id)->why;
      snapshot_.pending.pop_back();
      out.push_back("cancel " + std::to_string(id) + ": " + why);
      for (std::string& line : Ended(id, JobStatus::kCancelled)) out.push_back(std::move(line));
    }
  }
  return out;
}

void Script::Declare(JobId id, std::optional<int64_t> group) {
  declared_.insert(id);
  ended_.erase(id);
  if (auto old = group_of_.find(id); old != group_of_.end()) {
    members_[old->second].erase(id);
    group_of_.erase(old);
  }
  if (group) {
    group_of_[id] = *group;
    members_[*group].insert(id);
  }
}

std::vector<DepCondition> Script::Conditions(const std::string& text) const {
  std::vector<DepCondition> conditions;
  for (const std::string& part : Split(text, ';')) {
    const std::string usage = "bad dependency '" + part + "' (want ok:3, notok:1,2, any:group:7)";
    DepCondition c;
    std::string rest = part;
    const size_t colon = part.find(':');
    if (colon != std::string::npos && !StartsWith(part, "group:")) {
      const std::string kind = part.substr(0, colon);
      if (kind == "ok") {
        c.kind = DepKind::kOk;
      } else if (kind == "notok") {
        c.kind = DepKind::kNotOk;
      } else if (kind == "any") {
        c.kind = DepKind::kAny;
      } else {
        Fail(usage);
      }
      rest = part.substr(colon + 1);
    }
    const bool groups = StartsWith(rest, "group:");
    if (groups) rest = rest.substr(6);
    if (rest.empty()) Fail(usage);
    for (const std::string& item : Split(rest, ',')) {
      DepTarget t;
      t.group = groups;
      t.id = Integer(item);
      // The counts say how the targets stand now, as the server reads them from its store (and
      // with its words for a target that has already ended).
      if (!groups) {
        if (!declared_.count(t.id)) Fail("dependency on job " + item + ", which is not declared");
        if (auto e = ended_.find(t.id); e != ended_.end()) {
          t.ended = 1;
          if (e->second != JobStatus::kSucceeded) {
            t.not_ok = 1;
            t.first_not_ok = "ended " + std::string(JobStatusName(e->second));
          }
        }
      } else {
        auto members = members_.find(t.id);
        if (members == members_.end() || members->second.empty()) {
          Fail("dependency on group " + item + ", which has no jobs declared");
        }
        t.total = static_cast<int>(members->second.size());
        for (JobId member : members->second) {
          auto e = ended_.find(member);
          if (e == ended_.end()) continue;
          ++t.ended;
          if (e->second == JobStatus::kSucceeded) continue;
          if (t.not_ok++ == 0) t.first_not_ok = "a job " + std::string(JobStatusName(e->second));
        }
      }
      c.targets.push_back(std::move(t));
    }
    conditions.push_back(std::move(c));
  }
  return conditions;
}

bool Script::Held(JobId id) const {
  const Dependencies::Waiter* w = deps_.Find(id);
  return w != nullptr && w->state == DepState::kWaiting;
}

std::vector<std::string> Script::Ended(JobId id, JobStatus status) {
  std::vector<std::string> out;
  deps_.Remove(id);  // a job that ended waits for nothing
  ended_[id] = status;
  // Breadth first: every waiter the end of one job changes is printed before the cascade that its
  // cancelled waiters start.
  std::deque<JobId> gone{id};
  while (!gone.empty()) {
    const JobId job = gone.front();
    gone.pop_front();
    std::optional<int64_t> group;
    if (auto g = group_of_.find(job); g != group_of_.end()) group = g->second;
    for (const Dependencies::Change& change : deps_.JobEnded(job, group, ended_.at(job))) {
      const std::string key = std::to_string(change.key);
      if (change.state == DepState::kMet) {
        out.push_back("release " + key);
        continue;
      }
      // Failed: the waiting job leaves the queue, CANCELLED, and its own waiters learn of it.
      out.push_back("cancel " + key + ": " + change.why);
      auto it = std::find_if(snapshot_.pending.begin(), snapshot_.pending.end(),
                             [&](const JobRequest& j) { return j.id == change.key; });
      if (it != snapshot_.pending.end()) snapshot_.pending.erase(it);
      deps_.Remove(change.key);
      ended_[change.key] = JobStatus::kCancelled;
      gone.push_back(change.key);
    }
  }
  return out;
}

std::map<std::string, MilliGpu> Script::GpuAmounts(const std::string& text) const {
  std::map<std::string, MilliGpu> out;
  for (const std::string& item : Split(text, ',')) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0) Fail("bad GPU amount '" + item + "' (A100:16)");
    out[item.substr(0, colon)] = Cpus(item.substr(colon + 1));
  }
  return out;
}

void Script::AddTeam(const std::vector<std::string>& words) {
  if (words.size() < 2) Fail("team needs a name");
  TeamView team{.name = words[1] == "-" ? "" : words[1]};
  for (const auto& [key, value] : Options(words, 2)) {
    if (key == "quota") {
      team.quota = GpuAmounts(value);
    } else if (key == "borrow") {
      team.borrow_limit = GpuAmounts(value);
    } else if (key == "weight") {
      team.weight = static_cast<double>(Cpus(value)) / 1000;
    } else if (key == "usage") {
      team.usage = static_cast<double>(Millis(value)) / 1000;
    } else {
      Fail("unknown team option '" + key + "' (quota=, borrow=, weight=, usage=)");
    }
  }
  snapshot_.teams.push_back(std::move(team));
}

void Script::SetGroup(const std::vector<std::string>& words) {
  if (words.size() != 3 || !StartsWith(words[2], "max-running=")) {
    Fail("group needs an id and max-running=N|none");
  }
  const int64_t group = Integer(words[1]);
  const std::string value = words[2].substr(12);
  if (value == "none") {
    caps_.erase(group);
    return;
  }
  const int64_t max_running = Integer(value);
  if (max_running < 1) Fail("max-running must be at least 1 (or none)");
  caps_[group] = static_cast<int>(max_running);
}

void Script::AddUser(const std::vector<std::string>& words) {
  if (words.size() < 2) Fail("user needs a name");
  UserView user{.name = words[1]};
  for (const auto& [key, value] : Options(words, 2)) {
    if (key == "team") {
      user.team = value;
    } else if (key == "usage") {
      user.usage = static_cast<double>(Millis(value)) / 1000;
    } else if (key == "max-gpus") {
      user.max_running_gpus = Cpus(value);
    } else {
      Fail("unknown user option '" + key + "' (team=, usage=, max-gpus=)");
    }
  }
  snapshot_.users.push_back(std::move(user));
}

std::vector<std::string> Script::Explain(const std::vector<std::string>& words) const {
  if (!last_pass_) Fail("explain without a schedule before it");
  if (words.size() != 2) Fail("explain needs one job id");
  const JobId id = Integer(words[1]);
  const std::optional<Explanation> explained = last_pass_->waiting.Explain(id);
  if (!explained) return {"job " + words[1] + " is not waiting"};
  const Explanation& x = *explained;
  auto num = [](double v) {
    std::ostringstream out;
    out << v;
    return out.str();
  };
  std::vector<std::string> out;
  const std::string& team = last_pass_->waiting.teams()[static_cast<size_t>(x.team)];
  out.push_back("position " + std::to_string(x.position) + ", in team " +
                (team.empty() ? "(default)" : team) + " " + std::to_string(x.team_position) +
                "; first waiting: job " + std::to_string(x.first_waiting));
  static const char* kStates[] = {"no GPU", "within quota", "borrowing", "over borrow limit"};
  if (x.quota_state != Explanation::Quota::kNoGpu) {
    out.push_back(std::string(kStates[static_cast<int>(x.quota_state)]) + ": team holds " +
                  FormatMilli(x.team_uses) + ", quota " + FormatMilli(x.quota) + ", borrow limit " +
                  (x.borrow_limit ? FormatMilli(*x.borrow_limit) : "none") + ", job needs " +
                  FormatMilli(x.job_needs));
  }
  out.push_back("scores: user " + num(x.user_score) + ", team " + num(x.team_score) + " (" +
                num(x.team_usage) + " / weight " + num(x.team_weight) + ")");
  if (x.blocking >= 0) {
    const Blocking& b = last_pass_->waiting.blockings()[static_cast<size_t>(x.blocking)];
    out.push_back("blocking: " + b.resource + " needs " + num(b.needed) + " on " +
                  std::to_string(b.nodes_needed) + " node(s); " +
                  std::to_string(b.nodes_with_enough) + " have it; most free " + num(b.most_free) +
                  (b.most_free_node.empty() ? "" : " (" + b.most_free_node + ")"));
  }
  if (x.reservation >= 0) {
    const ReservationView& r =
        last_pass_->waiting.reservations()[static_cast<size_t>(x.reservation)];
    out.push_back("reserved: " + Join(r.nodes, ",") + " until " +
                  (r.until ? std::to_string(*r.until) : "unknown"));
  }
  return out;
}

std::vector<std::string> Script::RunPass() {
  // The pass sees what the server gives it: jobs that wait for their dependencies are left out of
  // the queue, and each capped group says how many of its jobs hold resources (stopping ones too).
  Snapshot view = snapshot_;
  std::vector<JobId> held;
  if (deps_.size() > 0) {
    view.pending.clear();
    for (const JobRequest& j : snapshot_.pending) {
      if (Held(j.id)) {
        held.push_back(j.id);
      } else {
        view.pending.push_back(j);
      }
    }
    std::sort(held.begin(), held.end());
  }
  for (const auto& [group, max_running] : caps_) {
    GroupCap& cap = view.group_caps[group];
    cap.max_running = max_running;
    for (const auto& r_view : view.running) {
      const RunningJob& r = *r_view;
      auto g = group_of_.find(r.id);
      if (g != group_of_.end() && g->second == group) ++cap.running;
    }
  }
  PassResult result = Schedule(view, config_);
  std::vector<std::string> out = FormatDecisions(result);
  // The server's form of the same queue decides the same: every request shared (here each its
  // own, with another job's id, which the pass must not read).
  Snapshot shared = view;
  shared.pending.clear();
  for (const JobRequest& j : view.pending) {
    auto request = std::make_shared<JobRequest>(j);
    request->id = -1;
    shared.shared_pending.push_back({j.id, std::move(request)});
  }
  if (FormatDecisions(Schedule(shared, config_)) != out) {
    out.push_back("BROKEN: the pass decides otherwise when the requests are shared");
  }
  for (JobId id : held)
    out.push_back("held " + std::to_string(id) + ": waiting for its dependencies");
  for (const std::string& broken : CheckInvariants(view, result)) {
    out.push_back("BROKEN: " + broken);
  }
  last_pass_ = std::move(result);
  return out;
}

std::vector<std::string> Script::Check(const std::vector<std::string>& words) {
  if (words.size() < 2) Fail("check needs an id");
  const JobRequest job = Request(Integer(words[1]), Options(words, 2));
  Status status = CheckFeasible(snapshot_.nodes, job, config_.topology_levels);
  if (status.ok()) return {"feasible"};
  if (status.code() == Code::kInfeasible) return {"infeasible: " + status.message()};
  return {"error: " + status.message()};
}

}  // namespace

std::string RunScenario(const std::string& name, const std::string& script) {
  Script runner(name);
  std::string out;
  std::istringstream in(script);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const std::string trimmed = Trim(line);
    if (StartsWith(trimmed, ">")) continue;  // the old output; replaced below
    out += line + "\n";
    if (trimmed.empty() || trimmed[0] == '#') continue;
    for (const std::string& printed : runner.Run(trimmed, line_no)) out += "> " + printed + "\n";
  }
  return out;
}

}  // namespace berth::sched::testing
