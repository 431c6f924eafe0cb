#include "sched/describe.h"

#include "common/quantity.h"

namespace berth::sched {

std::string DescribeCpus(MilliCpu cpus) {
  return FormatMilli(cpus) + (cpus == kMilliPerCpu ? " CPU" : " CPUs");
}

std::string DescribeMemory(Mib memory) { return FormatMib(memory) + " memory"; }

std::string DescribeRequest(const ResourceRequest& request) {
  std::vector<std::string> parts;
  if (request.wants_gpu()) parts.push_back(FormatGpus(request.gpu_type, request.gpu_milli));
  if (request.cpus > 0) parts.push_back(DescribeCpus(request.cpus));
  if (request.memory > 0) parts.push_back(DescribeMemory(request.memory));
  if (parts.empty()) return "nothing";
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

std::string DescribeSelector(const std::map<std::string, std::string>& selector) {
  std::string out;
  for (const auto& [key, value] : selector) out += (out.empty() ? "" : ",") + key + "=" + value;
  return out;
}

namespace {

// The selector and the mounts, after verbs of the caller's form ("matching" / "matches").
std::string Narrowing(const JobRequest& job, const char* selector_verb, const char* mounts_verb) {
  std::string out;
  if (!job.node_selector.empty())
    out +=
        std::string(" ") + selector_verb + " node_selector " + DescribeSelector(job.node_selector);
  if (!job.container_mounts.empty())
    out += std::string(out.empty() ? " " : " and ") + mounts_verb + " container.mounts " +
           ListNames(job.container_mounts, 4);
  return out;
}

}  // namespace

std::string DescribeScope(const JobRequest& job) {
  return (job.pool.empty() ? "" : " in pool '" + job.pool + "'") +
         Narrowing(job, "matching", "allowing");
}

std::string DescribeNarrowing(const JobRequest& job) { return Narrowing(job, "matches", "allows"); }

std::string CountNodes(int n) { return std::to_string(n) + (n == 1 ? " node" : " nodes"); }

std::string ListNames(const std::vector<std::string>& names, size_t limit) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < limit; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > limit) out += ", ...";
  return out;
}

}  // namespace berth::sched
