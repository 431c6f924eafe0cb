// Scenario runner: executes a golden scheduler scenario (tests/scenarios/*.scn, flux-sched style)
// and returns the script with each command's output rewritten, so that a scenario passes when the
// rewritten text equals the file. A script reads like a story; `#` starts a comment, and the lines
// that start with `>` right after a command are what that command printed:
//
//   # Seed scenario: one node with 4 V100s; job 1 holds all four.
//   node n1 cpus=8 mem=32G gpus=V100:4
//   running 1 on n1 gpus=0,1,2,3
//   pending 2 gpus=V100:1
//   schedule
//   > wait 2: waiting for resources: ...
//
// Commands (quantities as in job specs: cpus=0.5, mem=512M or 32G (a bare number is GiB); times and
// durations: a bare number is milliseconds, or 90s, 10m, 1h30m):
//   node NAME [cpus=N] [mem=M] [gpus=TYPE:N[,TYPE:N]] [pool=P] [labels=k=v[,k=v]] [draining]
//   running ID [prio=P] [cpus=N] [mem=M] [exclusive=KEY] [started=T] [limit=D] [stopping]
//           on NODE [gpus=I[:SHARE],...] [on NODE ...]    (options may also follow the nodes)
//   pending ID|FIRST..LAST [prio=P] [gpus=TYPE:N] [cpus=N] [mem=M] [nodes=N] [pool=P]
//           [selector=k=v[,k=v]] [exclusive=KEY] [submitted=T] [limit=D]
//   config [starvation=D] [preemption=on|off] [charge=D] [weights=TYPE=W,...] [reclaim-limit=N]
//          [reclaim-window=D]        (defaults: Config{}: 10m, on, 1h, 1 each, 3, 1m)
//   team NAME|- [quota=TYPE:N,...] [borrow=TYPE:N,...] [weight=W] [usage=D]   (- = default team;
//                     usage: decayed weighted GPU-time, e.g. usage=2h is 7200 GPU-seconds)
//   user NAME [team=T] [usage=D] [max-gpus=N]
//   (pending and running jobs take user=NAME; without it they belong to the anonymous user "")
//   explain ID        print the last pass's Explanation of a waiting job
//   now T             the time of the next passes (starts at 0)
//   schedule          run one pass; print "place ...", "preempt ...", "reclaim ..." and
//                     "wait ID: reason" lines
//   apply             carry out the last pass: placed jobs start (their resources become taken);
//                     victims stop at once and return to the queue, and their preemptor starts
//   apply stop        the same, but victims only begin to stop (they keep their resources) and
//                     their preemptor stays pending, as the server does it; `finish` them later
//   finish ID...      running jobs end; their resources become free
//   cancel ID...      pending jobs leave the queue
//   drain NODE / resume NODE
//   nodes             print every node's free resources
//   check ID [same options as pending]   print CheckFeasible() for that request
//
// Every pass is also checked against CheckInvariants(); a violation prints a "> BROKEN: ..." line.
// Not thread-safe; each call owns its state.
#pragma once

#include <stdexcept>
#include <string>

namespace berth::sched::testing {

// A malformed script: the message says "name:line: what".
class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs `script` (called `name` in error messages) and returns it with the `>` lines replaced by
// what each command prints now. Throws ScenarioError on a malformed script.
std::string RunScenario(const std::string& name, const std::string& script);

}  // namespace berth::sched::testing
