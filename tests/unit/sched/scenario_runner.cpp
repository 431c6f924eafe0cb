#include "scenario_runner.h"

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "common/clock.h"
#include "common/quantity.h"
#include "common/strings.h"
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
  void AddPending(const std::vector<std::string>& words);
  void AddTeam(const std::vector<std::string>& words);
  void AddUser(const std::vector<std::string>& words);
  std::map<std::string, MilliGpu> GpuAmounts(const std::string& text) const;
  std::vector<std::string> Explain(const std::vector<std::string>& words) const;
  std::vector<std::string> RunPass();
  std::vector<std::string> Check(const std::vector<std::string>& words);

  std::string name_;
  int line_no_ = 0;
  Snapshot snapshot_;
  Config config_;
  std::map<JobId, JobRequest> submitted_;  // every pending job as submitted, for requeueing
  std::optional<PassResult> last_pass_;
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
    AddPending(words);
  } else if (cmd == "team") {
    AddTeam(words);
  } else if (cmd == "user") {
    AddUser(words);
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
    for (JobId id : Apply(snapshot_, *last_pass_, mode)) {
      auto original = submitted_.find(id);
      if (original == submitted_.end()) continue;
      for (JobRequest& j : snapshot_.pending) {
        if (j.id == id) j = original->second;
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
      } else {
        Fail("unknown config '" + key + "=" + value +
             "' (starvation=D, preemption=on|off, charge=D, weights=T=W,..., reclaim-limit=N, "
             "reclaim-window=D)");
      }
    }
  } else if (cmd == "now") {
    if (words.size() != 2) Fail("now needs one time");
    snapshot_.now = Millis(words[1]);
    last_pass_.reset();
  } else if (cmd == "finish" || cmd == "cancel") {
    if (words.size() < 2) Fail(cmd + " needs job ids");
    for (size_t i = 1; i < words.size(); ++i) {
      const JobId id = Integer(words[i]);
      if (cmd == "finish") {
        if (!Finish(snapshot_, id)) Fail("job " + words[i] + " is not running");
        continue;
      }
      auto it = std::find_if(snapshot_.pending.begin(), snapshot_.pending.end(),
                             [&](const JobRequest& j) { return j.id == id; });
      if (it == snapshot_.pending.end()) Fail("job " + words[i] + " is not pending");
      snapshot_.pending.erase(it);
    }
    last_pass_.reset();  // decisions about a queue that changed must not be applied
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
    } else if (key == "selector") {
      job.node_selector = Labels(value);
    } else if (key == "exclusive") {
      job.exclusive = value;
    } else if (key == "submitted") {
      job.submitted_at = Millis(value);
    } else if (key == "limit") {
      job.time_limit = Millis(value);
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
    } else {
      Fail("unknown node option '" + key + "'");
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
}

void Script::AddPending(const std::vector<std::string>& words) {
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
  const std::map<std::string, std::string> options = Options(words, 2);
  for (JobId id = first; id <= last; ++id) {
    for (const JobRequest& j : snapshot_.pending) {
      if (j.id == id) Fail("job " + std::to_string(id) + " is already pending");
    }
    snapshot_.pending.push_back(Request(id, options));
    submitted_[id] = snapshot_.pending.back();
  }
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
  PassResult result = Schedule(snapshot_, config_);
  std::vector<std::string> out = FormatDecisions(result);
  for (const std::string& broken : CheckInvariants(snapshot_, result)) {
    out.push_back("BROKEN: " + broken);
  }
  last_pass_ = std::move(result);
  return out;
}

std::vector<std::string> Script::Check(const std::vector<std::string>& words) {
  if (words.size() < 2) Fail("check needs an id");
  const JobRequest job = Request(Integer(words[1]), Options(words, 2));
  Status status = CheckFeasible(snapshot_.nodes, job);
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
