// Describe: the wording shared by waiting reasons (Schedule) and infeasibility messages
// (CheckFeasible), so that `berth show` and a refused submit name resources the same way ("V100:4,
// 8 CPUs, 32G memory").
//
// All functions are pure and thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/resources.h"
#include "sched/cluster.h"

namespace berth::sched {

// "8 CPUs", "1 CPU", "0.5 CPUs".
std::string DescribeCpus(MilliCpu cpus);
// "32G memory", "512M memory".
std::string DescribeMemory(Mib memory);
// "V100:4, 8 CPUs, 32G memory": the non-zero parts of one node's request; "nothing" when all are
// zero.
std::string DescribeRequest(const ResourceRequest& request);
// "gpu_gen=hopper,zone=a".
std::string DescribeSelector(const std::map<std::string, std::string>& selector);
// Where a job may run, to follow the word "node": " in pool 'research' matching node_selector a=b",
// (" and allowing container.mounts /data"), or "" when the job accepts every node.
std::string DescribeScope(const JobRequest& job);
// What narrows a job's pool, to follow "no node": " matches node_selector a=b", " allows
// container.mounts /data", or both joined by "and".
std::string DescribeNarrowing(const JobRequest& job);
// "1 node", "3 nodes".
std::string CountNodes(int n);
// "n1, n2, n3, ...": at most `limit` names, then an ellipsis.
std::string ListNames(const std::vector<std::string>& names, size_t limit = 3);

}  // namespace berth::sched
