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
//           [group=G] on NODE [gpus=I[:SHARE],...] [on NODE ...]  (options may also follow nodes)
//   pending ID|FIRST..LAST [prio=P] [gpus=TYPE:N] [cpus=N] [mem=M] [nodes=N] [pool=P]
//           [selector=k=v[,k=v]] [exclusive=KEY] [submitted=T] [limit=D] [group=G]
//           [after=KIND:IDS[;KIND:IDS...]]
//                     group=G: the job belongs to bulk group G (JobRequest::group; a running job,
//                     or a pending one once `apply` starts it, keeps its group, also when
//                     requeued). after=: its dependencies (sched::Dependencies, one waiter per job,
//                     keyed by its id), all of which must hold: KIND is ok, notok or any (a bare id
//                     list means ok); IDS are job ids (ok:1,2) or bulk groups (ok:group:7). They
//                     must name jobs declared on earlier lines; a group stands for the jobs
//                     declared in it so far, so declare a group before its waiters. Targets that
//                     have already ended count as ended. A job whose dependencies cannot hold any
//                     more is cancelled at once ("cancel ID: why", with the cascade below).
//   group G max-running=N|none   bulk group G's max_running (none: no cap). Before each pass the
//                     runner fills Snapshot::group_caps, counting as running the group's jobs in
//                     `running`, stopping ones too.
//   config [starvation=D] [preemption=on|off] [charge=D] [weights=TYPE=W,...] [reclaim-limit=N]
//          [reclaim-window=D]        (defaults: Config{}: 10m, on, 1h, 1 each, 3, 1m)
//   team NAME|- [quota=TYPE:N,...] [borrow=TYPE:N,...] [weight=W] [usage=D]   (- = default team;
//                     usage: decayed weighted GPU-time, e.g. usage=2h is 7200 GPU-seconds)
//   user NAME [team=T] [usage=D] [max-gpus=N]
//   (pending and running jobs take user=NAME; without it they belong to the anonymous user "")
//   explain ID        print the last pass's Explanation of a waiting job
//   now T             the time of the next passes (starts at 0)
//   schedule          run one pass; print "place ...", "preempt ...", "reclaim ..." and
//                     "wait ID: reason" lines, then "held ID: waiting for its dependencies" for
//                     each pending job whose dependencies do not hold yet: like the server, the
//                     runner leaves those out of the pass's queue
//   apply             carry out the last pass: placed jobs start (their resources become taken);
//                     victims stop at once and return to the queue, and their preemptor starts
//   apply stop        the same, but victims only begin to stop (they keep their resources) and
//                     their preemptor stays pending, as the server does it; `finish` them later
//   finish ID...      running jobs end (SUCCEEDED, for dependencies); their resources become free
//   cancel ID...      pending jobs leave the queue (CANCELLED, for dependencies)
//   end ID STATUS     a running or pending job ends with STATUS (SUCCEEDED, FAILED, LOST...):
//                     its resources become free, or it leaves the queue
//   finish, cancel and end tell the dependencies (Dependencies::JobEnded, with the job's group) and
//   print "release ID" for each waiter whose dependencies now hold and "cancel ID: why" for each
//   whose can no longer hold ("cancel 5: dependency 1 failed"): that job leaves the queue, ends
//   CANCELLED, and its own waiters are told in turn (breadth first: all lines for one job's end,
//   then those of the jobs it cancelled, in that order)
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
