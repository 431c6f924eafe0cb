// TopView: one frame of `berth top` as text, from the server's answers to `GET /v1/nodes?holders=1`
// and `GET /v1/queue`: a header with the cluster's totals, each node's GPU map (a cell per device,
// marked by the job holding it), CPU and memory bars, a legend of the jobs on the map, then as much
// of the queue as the screen has room for. Pure: no I/O, no clock (the time comes in).
//
// Thread-safety: a function of its arguments.
#pragma once

#include <string>

#include "common/clock.h"
#include "common/json_util.h"

namespace berth::cli {

struct TopFrameInput {
  const json::object* nodes = nullptr;  // {"nodes": [...]} with devices' "jobs"
  const json::object* queue = nullptr;  // {"rows": [...], ...}
  std::string server;                   // shown in the header
  int width = 80;
  int height = 24;
  TimeMs now = 0;
};

// The frame's lines joined with "\n", each at most `width` columns, at most `height` lines.
// Map cells: a letter per job (A-Z, a-z, then '#'), '+' for a device shared by several jobs, '.'
// for a free device, 'x' for a device of a node that is down.
std::string RenderTop(const TopFrameInput& in);

}  // namespace berth::cli
