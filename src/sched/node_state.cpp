#include "sched/node_state.h"

#include <algorithm>
#include <cstdlib>

#include "sched/short_text.h"

namespace berth::sched::internal {
namespace {

bool DevicesFit(std::span<const DeviceFree> devices, const Need& need) {
  if (!need.wants_gpu()) return true;
  if (need.type == kNoType) return false;
  if (need.fractional) {
    return std::any_of(devices.begin(), devices.end(), [&](const DeviceFree& d) {
      return d.type == need.type && d.free >= need.milli;
    });
  }
  int whole = 0;
  for (const DeviceFree& d : devices) {
    if (d.type == need.type && d.free == kMilliPerGpu) ++whole;
  }
  return whole >= need.devices;
}

// The `needed` wholly free devices of a type that are best connected: all in one NVLink island if
// one holds them, else under one PCIe switch, else on one NUMA node (at each level the group with
// the fewest free devices that still holds them: best fit, which keeps bigger groups whole for
// bigger jobs; ties by lowest index), else the lowest indices. `whole` is in index order.
std::vector<int> BestConnected(const std::vector<const DeviceFree*>& whole, size_t needed) {
  std::vector<int> out;
  for (uint8_t DeviceFree::*level : {&DeviceFree::nvlink, &DeviceFree::pcie, &DeviceFree::numa}) {
    if (std::none_of(whole.begin(), whole.end(), [&](const DeviceFree* d) { return d->*level; })) {
      continue;  // nothing known at this level
    }
    // Group 0 is "none known": each such device is a group of its own.
    size_t best_size = 0;
    const DeviceFree* best = nullptr;
    for (const DeviceFree* d : whole) {
      if (d->*level == 0) {
        if (needed == 1 && (best == nullptr || best_size > 1)) best = d, best_size = 1;
        continue;
      }
      size_t size = 0;
      bool first = true;  // d is the lowest-indexed of its group
      for (const DeviceFree* e : whole) {
        if (e->*level != d->*level) continue;
        if (e->index < d->index) first = false;
        ++size;
      }
      if (first && size >= needed && (best == nullptr || size < best_size)) {
        best = d;
        best_size = size;
      }
    }
    if (best == nullptr) continue;
    for (const DeviceFree* e : whole) {
      if (out.size() == needed) break;
      if (e == best || (best->*level != 0 && e->*level == best->*level)) out.push_back(e->index);
    }
    return out;
  }
  for (size_t k = 0; k < needed; ++k) out.push_back(whole[k]->index);
  return out;
}

// Devices are addressed by their `index`, which need not match their position.
std::vector<GpuGrant> PickDevices(std::span<const DeviceFree> devices, const Need& need) {
  std::vector<GpuGrant> grants;
  if (!need.wants_gpu()) return grants;
  if (need.fractional) {
    const DeviceFree* best = nullptr;
    for (const DeviceFree& d : devices) {
      if (d.type != need.type || d.free < need.milli) continue;
      if (best == nullptr || d.free < best->free ||
          (d.free == best->free && d.index < best->index)) {
        best = &d;
      }
    }
    if (best != nullptr) grants.push_back({best->index, need.milli});
    return grants;
  }
  const size_t needed = static_cast<size_t>(need.devices);
  std::vector<int> whole;
  bool known = false;  // some device's topology is known
  for (const DeviceFree& d : devices) {
    if (d.type != need.type || d.free != kMilliPerGpu) continue;
    whole.push_back(d.index);
    known = known || d.nvlink != 0 || d.pcie != 0 || d.numa != 0;
  }
  if (whole.size() < needed) return grants;
  grants.reserve(needed);
  if (!known) {  // the lowest indices
    std::partial_sort(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(needed),
                      whole.end());
    for (size_t k = 0; k < needed; ++k) grants.push_back({whole[k], kMilliPerGpu});
    return grants;
  }
  std::vector<const DeviceFree*> free;
  for (const DeviceFree& d : devices) {
    if (d.type == need.type && d.free == kMilliPerGpu) free.push_back(&d);
  }
  std::sort(free.begin(), free.end(),
            [](const DeviceFree* a, const DeviceFree* b) { return a->index < b->index; });
  for (int index : BestConnected(free, needed)) grants.push_back({index, kMilliPerGpu});
  return grants;
}

MilliGpu FreeOf(std::span<const DeviceFree> devices, int type) {
  MilliGpu sum = 0;
  for (const DeviceFree& d : devices) {
    if (type == kNoType || d.type == type) sum += d.free;
  }
  return sum;
}

// Equality of short strings (GPU types, pools, node names) without a call to memcmp: building a
// pass compares one per device, and the call costs more than the comparison.
bool Same(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k] != b[k]) return false;
  }
  return true;
}

bool Less(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t k = 0; k < n; ++k) {
    if (a[k] != b[k]) return static_cast<unsigned char>(a[k]) < static_cast<unsigned char>(b[k]);
  }
  return a.size() < b.size();
}

DeviceFree* DeviceAt(std::span<DeviceFree> devices, int index) {
  for (DeviceFree& d : devices) {
    if (d.index == index) return &d;
  }
  return nullptr;
}

}  // namespace

const std::string* LabelOf(const NodeView& node, std::string_view key) {
  if (node.labels.size() > 8) {
    auto it = node.labels.find(std::string(key));
    return it == node.labels.end() ? nullptr : &it->second;
  }
  for (const auto& [k, v] : node.labels) {
    if (SameText(k, key)) return &v;
  }
  return nullptr;
}

void Scratch::Release(const ResourceRequest& per_node, const NodeGrant& grant) {
  cpus += per_node.cpus;
  memory += per_node.memory;
  for (const GpuGrant& g : grant.gpus) {
    if (DeviceFree* d = DeviceAt(devices, g.index)) d->free += g.milli;
  }
}

bool Scratch::Fits(const Need& need) const {
  return need.cpus <= cpus && need.memory <= memory && DevicesFit(devices, need);
}

FitOrder Scratch::Order(const Need& need) const {
  return {need.wants_gpu() ? FreeOf(devices, need.type) - need.milli : FreeOf(devices, kNoType),
          cpus - need.cpus, memory - need.memory, node};
}

std::vector<GpuGrant> Scratch::Pick(const Need& need) const { return PickDevices(devices, need); }

void Scratch::Take(const Need& need, const std::vector<GpuGrant>& gpus) {
  cpus -= need.cpus;
  memory -= need.memory;
  for (const GpuGrant& g : gpus) {
    if (DeviceFree* d = DeviceAt(devices, g.index)) d->free -= g.milli;
  }
}

NodeState::NodeState(const std::vector<NodeView>& nodes) {
  views_.reserve(nodes.size());
  for (const NodeView& n : nodes) views_.push_back(&n);
  // The server lists nodes from a map, already in name order: Load() checks as it goes, which is
  // cheaper than sorting (building a pass is bound by reading the snapshot's scattered memory).
  if (!Load()) {
    std::stable_sort(views_.begin(), views_.end(),
                     [](const NodeView* a, const NodeView* b) { return Less(a->name, b->name); });
    Load();
  }
}

// Reading the snapshot is a chase of pointers (a node, then its separately allocated devices), so
// it is bound by memory latency: ask for nodes and devices a few steps ahead.
void NodeState::Prefetch(size_t view, size_t devices) const {
  if (view < views_.size()) {
    const char* p = reinterpret_cast<const char*>(views_[view]);
    for (size_t off = 0; off < sizeof(NodeView); off += 64) __builtin_prefetch(p + off);
  }
  if (devices < views_.size()) {
    const std::vector<Device>& gpus = views_[devices]->gpus;
    const char* p = reinterpret_cast<const char*>(gpus.data());
    for (size_t off = 0; off < gpus.size() * sizeof(Device); off += 64) __builtin_prefetch(p + off);
  }
}

bool NodeState::Load() {
  const size_t n = views_.size();
  pool_.resize(n);
  schedulable_.resize(n);
  cpus_.resize(n);
  memory_.resize(n);
  dev_begin_.resize(n + 1);
  all_free_.assign(n, 0);
  devices_.clear();
  if (n > 0) devices_.reserve(n * views_.front()->gpus.size());
  types_.clear();
  pools_.clear();
  type_free_.clear();
  whole_.clear();
  largest_.clear();
  count_.clear();

  const std::string* last_type = nullptr;  // nodes usually have one type: skip most lookups
  int last_type_id = kNoType;
  const std::string* last_pool = nullptr;
  int last_pool_id = -1;
  for (size_t i = 0; i < n; ++i) {
    Prefetch(i + 8, i + 4);
    const NodeView& v = *views_[i];
    if (i > 0 && Less(v.name, views_[i - 1]->name)) return false;
    if (last_pool == nullptr || !Same(v.pool, *last_pool)) {
      last_pool_id = PoolId(v.pool);
      if (last_pool_id < 0) {
        last_pool_id = static_cast<int>(pools_.size());
        pools_.push_back(v.pool);
      }
      last_pool = &v.pool;
    }
    pool_[i] = last_pool_id;
    schedulable_[i] = v.schedulable ? 1 : 0;
    cpus_[i] = v.cpus_free;
    memory_[i] = v.memory_free;
    dev_begin_[i] = static_cast<uint32_t>(devices_.size());
    // Totals are summed in locals over each run of devices of one type (a node has one run,
    // usually) and stored once per run: stores into the arrays inside the loop would make the
    // compiler reload every vector's pointer after each one.
    MilliGpu all = 0;
    int run_type = kNoType;
    MilliGpu run_free = 0, run_largest = 0;
    int32_t run_whole = 0, run_count = 0;
    auto flush = [&] {
      if (run_type == kNoType) return;
      const size_t at = At(run_type, static_cast<NodeIdx>(i));
      type_free_[at] += run_free;
      whole_[at] += run_whole;
      largest_[at] = std::max(largest_[at], run_largest);
      count_[at] += run_count;
      run_free = run_largest = 0;
      run_whole = run_count = 0;
    };
    for (const Device& d : v.gpus) {
      if (last_type == nullptr || !Same(d.type, *last_type)) {
        last_type_id = TypeId(d.type);
        if (last_type_id < 0) {
          last_type_id = static_cast<int>(types_.size());
          types_.push_back(d.type);
          const size_t cells = types_.size() * n;  // a new type: room for its totals
          type_free_.resize(cells, 0);
          whole_.resize(cells, 0);
          largest_.resize(cells, 0);
          count_.resize(cells, 0);
        }
        last_type = &d.type;
      }
      if (last_type_id != run_type) {
        flush();
        run_type = last_type_id;
      }
      devices_.push_back(DeviceFree{static_cast<int16_t>(d.index),
                                    static_cast<int16_t>(last_type_id), d.nvlink, d.pcie, d.numa,
                                    d.free});
      run_free += d.free;
      run_whole += d.free == kMilliPerGpu ? 1 : 0;
      run_largest = std::max(run_largest, d.free);
      ++run_count;
      all += d.free;
    }
    flush();
    all_free_[i] = all;
  }
  dev_begin_[n] = static_cast<uint32_t>(devices_.size());
  return true;
}

void NodeState::IndexNames() {
  if (!name_table_.empty()) return;
  size_t slots = 16;
  while (slots < 2 * views_.size()) slots *= 2;
  name_table_.assign(slots, kNoNode);
  for (NodeIdx i = 0; i < views_.size(); ++i) {
    size_t at = HashName(views_[i]->name) & (slots - 1);
    while (name_table_[at] != kNoNode) {
      if (Same(views_[name_table_[at]]->name, views_[i]->name))
        break;  // a duplicate: keep the first
      at = (at + 1) & (slots - 1);
    }
    if (name_table_[at] == kNoNode) name_table_[at] = i;
  }
}

NodeIdx NodeState::Find(std::string_view name) const {
  if (!name_table_.empty()) {
    const size_t mask = name_table_.size() - 1;
    for (size_t at = HashName(name) & mask;; at = (at + 1) & mask) {
      const NodeIdx i = name_table_[at];
      if (i == kNoNode || Same(views_[i]->name, name)) return i;
    }
  }
  auto it =
      std::lower_bound(views_.begin(), views_.end(), name,
                       [](const NodeView* v, std::string_view s) { return Less(v->name, s); });
  if (it == views_.end() || !Same((*it)->name, name)) return kNoNode;
  return static_cast<NodeIdx>(it - views_.begin());
}

int NodeState::TypeId(std::string_view type) const {
  for (size_t t = 0; t < types_.size(); ++t) {
    if (Same(types_[t], type)) return static_cast<int>(t);
  }
  return kNoType;
}

int NodeState::PoolId(std::string_view pool) const {
  for (size_t p = 0; p < pools_.size(); ++p) {
    if (Same(pools_[p], pool)) return static_cast<int>(p);
  }
  return -1;
}

Need NodeState::NeedOf(const ResourceRequest& request) const {
  Need need;
  need.cpus = request.cpus;
  need.memory = request.memory;
  if (request.wants_gpu()) {
    need.milli = request.gpu_milli;
    need.devices = request.gpu_devices();
    need.fractional = request.fractional_gpu();
    need.type = TypeId(request.gpu_type);
    need.unknown_type = need.type == kNoType;
  }
  return need;
}

bool NodeState::Fits(NodeIdx i, const Need& need) const {
  if (need.cpus > cpus_[i] || need.memory > memory_[i]) return false;
  if (!need.wants_gpu()) return true;
  if (need.type == kNoType) return false;
  return need.fractional ? largest_[At(need.type, i)] >= need.milli
                         : whole_[At(need.type, i)] >= need.devices;
}

FitOrder NodeState::Order(NodeIdx i, const Need& need) const {
  return {need.wants_gpu() ? free_of_type(need.type, i) - need.milli : all_free_[i],
          cpus_[i] - need.cpus, memory_[i] - need.memory, i};
}

std::vector<GpuGrant> NodeState::Pick(NodeIdx i, const Need& need) const {
  return PickDevices(devices(i), need);
}

void NodeState::Take(NodeIdx i, const Need& need, const std::vector<GpuGrant>& gpus) {
  cpus_[i] -= need.cpus;
  memory_[i] -= need.memory;
  std::span<DeviceFree> mine(devices_.data() + dev_begin_[i], devices_.data() + dev_begin_[i + 1]);
  for (const GpuGrant& g : gpus) {
    DeviceFree* d = DeviceAt(mine, g.index);
    // A grant for a device the node lacks means the pass's own bookkeeping is broken.
    if (d == nullptr) std::abort();
    d->free -= g.milli;
  }
  Refresh(i);
}

void NodeState::LowerTo(NodeIdx i, const Scratch& after) {
  cpus_[i] = std::min(cpus_[i], after.cpus);
  memory_[i] = std::min(memory_[i], after.memory);
  std::span<DeviceFree> mine(devices_.data() + dev_begin_[i], devices_.data() + dev_begin_[i + 1]);
  for (DeviceFree& d : mine) {
    for (const DeviceFree& a : after.devices) {
      if (a.index == d.index) d.free = std::min(d.free, a.free);
    }
  }
  Refresh(i);
}

Scratch NodeState::ScratchOf(NodeIdx i) const {
  Scratch s;
  s.node = i;
  s.cpus = cpus_[i];
  s.memory = memory_[i];
  std::span<const DeviceFree> mine = devices(i);
  s.devices.assign(mine.begin(), mine.end());
  return s;
}

void NodeState::Refresh(NodeIdx i) {
  for (size_t t = 0; t < types_.size(); ++t) {
    const size_t at = At(static_cast<int>(t), i);
    type_free_[at] = 0;
    whole_[at] = 0;
    largest_[at] = 0;
    count_[at] = 0;
  }
  Accumulate(i);
}

void NodeState::Accumulate(NodeIdx i) {
  MilliGpu all = 0;
  for (const DeviceFree& d : devices(i)) {
    const size_t at = At(d.type, i);
    type_free_[at] += d.free;
    if (d.free == kMilliPerGpu) ++whole_[at];
    largest_[at] = std::max(largest_[at], d.free);
    ++count_[at];
    all += d.free;
  }
  all_free_[i] = all;
}

}  // namespace berth::sched::internal
