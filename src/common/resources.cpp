#include "common/resources.h"

namespace berth {

std::string FormatGpus(const std::string& type, MilliGpu milli) {
  if (milli == 0) return "-";
  return type + ":" + FormatMilli(milli);
}

}  // namespace berth

namespace berth {

std::string CudaVisibleDevices(const NodeGrant& grant) {
  std::string out;
  for (const auto& g : grant.gpus) {
    if (!out.empty()) out += ',';
    out += std::to_string(g.index);
  }
  return out;
}

}  // namespace berth
