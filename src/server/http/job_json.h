// The JSON shapes of jobs and nodes in the users' API (docs/api.md), shared by the API's handlers
// and the dashboard's. Pure functions; thread-safe.
#pragma once

#include <string>

#include "common/json_util.h"
#include "server/core/core.h"
#include "store/store.h"

namespace berth {

json::object ResourcesJson(const ResourceRequest& r);
json::array PlacementJson(const Placement& placement);
// A job's row; `waiting` (the last pass's reason) replaces the stored reason of a pending job.
json::object JobJson(const JobRow& row, const std::string& waiting);
json::object NodeJson(const NodeStatus& node);
// A node's place in the cluster's topology levels (docs/topology.md): {"rack": "r1", "switch":
// "r1/s1"}, each level's domain as its values down to that level joined by "/", null where the
// node lacks the level's label (it is then outside every domain of that level).
json::object NodeTopologyJson(const std::vector<std::string>& levels,
                              const std::map<std::string, std::string>& labels);
// A node's "health": state ok|degraded (a GPU fenced)|drained, reason, since, the fenced GPUs,
// every open fault and the last run of each probe.
json::object NodeHealthJson(const proto::NodeHealth& health);
// One attempt of job `row` for `berth show`: placement, times, outcome, and what it used against
// what it asked for (docs/api.md "Jobs").
json::object AttemptJson(const AttemptRow& a, const JobRow& row);
// A bulk group's jobs per status: {"PENDING": 26, "RUNNING": 4}.
json::object StatusCountsJson(const std::map<JobStatus, int>& counts);
// A bulk group as one row of a queue listing: the row of the job that stands for it, with
// "kind": "group", its "counts" per status and its number of "jobs".
json::object GroupRowJson(const JobRow& stands_for, const std::map<JobStatus, int>& counts);

}  // namespace berth
