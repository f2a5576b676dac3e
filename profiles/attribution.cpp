#include "profiles/attribution.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace ampcheck::profiles {
namespace {

// Which of two ranges with the same span is the outer one.
int kind_rank(OpKind k) {
  switch (k) {
    case OpKind::step: return 0;
    case OpKind::module: return 1;
    case OpKind::annotation: return 2;
    case OpKind::op: return 3;
  }
  return 3;
}

bool attributable(OpKind k) { return k == OpKind::op || k == OpKind::annotation; }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// An autograd node: "AddmmBackward0", "CudnnConvolutionBackward" (1.x), "autograd::engine::
// evaluate_function: MmBackward0"; Paddle's backward kernels: "matmul_v2_grad".
bool backward_marker(std::string_view name, OpKind kind) {
  if (name.starts_with("autograd::engine::evaluate_function:")) return true;
  std::string_view s = name;
  while (!s.empty() && is_digit(s.back())) s.remove_suffix(1);
  if (s.ends_with("Backward") && s.find_first_of(" :,()") == std::string_view::npos) return true;
  return kind == OpKind::op && name.ends_with("_grad");
}

bool optimizer_marker(std::string_view name) { return name.starts_with("Optimizer."); }

}  // namespace

void attribute(Profile& p) {
  // --- nest the ops of each thread
  std::vector<std::size_t> order(p.ops.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const Op& x = p.ops[a];
    const Op& y = p.ops[b];
    return std::make_tuple(x.thread, x.begin_ns, -x.end_ns, kind_rank(x.kind)) <
           std::make_tuple(y.thread, y.begin_ns, -y.end_ns, kind_rank(y.kind));
  });
  {
    std::vector<Op> sorted;
    sorted.reserve(p.ops.size());
    for (const std::size_t i : order) sorted.push_back(p.ops[i]);
    p.ops = std::move(sorted);
  }
  std::vector<std::int32_t> stack;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    Op& op = p.ops[i];
    if (i > 0 && p.ops[i - 1].thread != op.thread) stack.clear();
    // A range that ended by the time this one begins is closed. One that ends a little
    // after its child (profilers round each end on its own) still holds it.
    while (!stack.empty() && p.ops[static_cast<std::size_t>(stack.back())].end_ns <= op.begin_ns &&
           !(p.ops[static_cast<std::size_t>(stack.back())].begin_ns == op.begin_ns))
      stack.pop_back();
    op.parent = stack.empty() ? -1 : stack.back();
    stack.push_back(static_cast<std::int32_t>(i));
  }

  // --- phases: markers, then what is around; the autograd engine's thread is backward
  // throughout (AccumulateGrad and the optimizer's hooks run there with no node around).
  std::unordered_map<std::uint32_t, std::pair<std::int64_t, std::int64_t>> top_time;  // thread -> (backward, all)
  for (const Op& op : p.ops) {
    const bool top = op.parent < 0 || p.ops[static_cast<std::size_t>(op.parent)].kind == OpKind::step;
    if (!top || !attributable(op.kind)) continue;
    auto& [back, all] = top_time[op.thread];
    const std::int64_t d = std::max<std::int64_t>(op.end_ns - op.begin_ns, 1);
    all += d;
    if (backward_marker(p.str(op.name), op.kind)) back += d;
  }
  for (Op& op : p.ops) {
    const std::string_view name = p.str(op.name);
    if (op.phase_marked) continue;
    if (backward_marker(name, op.kind)) {
      op.phase = Phase::backward;
    } else if (optimizer_marker(name)) {
      op.phase = Phase::optimizer;
    } else if (op.parent >= 0) {
      op.phase = p.ops[static_cast<std::size_t>(op.parent)].phase;
    } else {
      const auto it = top_time.find(op.thread);
      op.phase = it != top_time.end() && it->second.first * 2 >= it->second.second && it->second.first > 0
                     ? Phase::backward
                     : Phase::forward;
    }
  }

  // --- module paths: the nn.Module frames around a forward op; a backward node takes the
  // path of the forward op that recorded its sequence number.
  for (Op& op : p.ops) {
    const std::uint32_t outer = op.parent >= 0 ? p.ops[static_cast<std::size_t>(op.parent)].module : 0;
    if (op.kind == OpKind::module) {
      const std::string& name = p.str(op.name);
      op.module = outer == 0 ? p.intern(name) : p.intern(p.str(outer) + "." + name);
    } else {
      op.module = outer;
    }
  }
  std::unordered_map<std::int64_t, std::uint32_t> forward_module;  // sequence number -> module
  for (const Op& op : p.ops)
    if (op.phase == Phase::forward && op.sequence >= 0 && op.module != 0) forward_module.try_emplace(op.sequence, op.module);
  if (!forward_module.empty()) {
    for (Op& op : p.ops) {
      if (op.phase != Phase::backward) continue;
      if (op.sequence >= 0) {
        if (const auto it = forward_module.find(op.sequence); it != forward_module.end()) {
          op.module = it->second;
          continue;
        }
      }
      if (op.parent >= 0) op.module = p.ops[static_cast<std::size_t>(op.parent)].module;
    }
  }

  // --- each launch: the innermost op or annotation open on its thread when it was made
  std::vector<std::size_t> launches(p.launches.size());
  std::iota(launches.begin(), launches.end(), std::size_t{0});
  std::sort(launches.begin(), launches.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(p.launches[a].thread, p.launches[a].ns, p.launches[a].correlation) <
           std::tie(p.launches[b].thread, p.launches[b].ns, p.launches[b].correlation);
  });
  std::vector<std::int32_t> launch_op(p.launches.size(), -1);
  {
    std::size_t j = 0;  // the next op to open
    std::vector<std::int32_t> open;
    std::uint32_t thread = 0;
    bool first = true;
    for (const std::size_t li : launches) {
      const Launch& l = p.launches[li];
      if (first || l.thread != thread) {
        first = false;
        thread = l.thread;
        open.clear();
        j = static_cast<std::size_t>(std::lower_bound(p.ops.begin(), p.ops.end(), thread,
                                                      [](const Op& o, std::uint32_t t) { return o.thread < t; }) -
                                     p.ops.begin());
      }
      while (j < p.ops.size() && p.ops[j].thread == thread && p.ops[j].begin_ns <= l.ns) {
        while (!open.empty() && p.ops[static_cast<std::size_t>(open.back())].end_ns <= p.ops[j].begin_ns &&
               p.ops[static_cast<std::size_t>(open.back())].begin_ns != p.ops[j].begin_ns)
          open.pop_back();
        open.push_back(static_cast<std::int32_t>(j));
        ++j;
      }
      for (auto it = open.rbegin(); it != open.rend(); ++it) {
        const Op& o = p.ops[static_cast<std::size_t>(*it)];
        if (o.end_ns >= l.ns && attributable(o.kind)) {
          launch_op[li] = *it;
          break;
        }
      }
    }
  }

  // --- each kernel: its launch, else its External id
  std::unordered_map<std::int64_t, std::size_t> by_correlation;
  by_correlation.reserve(p.launches.size());
  for (std::size_t i = 0; i < p.launches.size(); ++i) {
    // A runtime or driver event wins over a flow's start with the same id (flows come last).
    by_correlation.try_emplace(p.launches[i].correlation, i);
  }
  std::unordered_map<std::int64_t, std::int32_t> by_external;  // -1: two ops share it
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const Op& o = p.ops[i];
    if (o.external_id <= 0 || !attributable(o.kind)) continue;
    auto [it, fresh] = by_external.try_emplace(o.external_id, static_cast<std::int32_t>(i));
    if (!fresh) it->second = -1;
  }
  auto external_op = [&](std::int64_t id) -> std::int32_t {
    if (id <= 0) return -1;
    const auto it = by_external.find(id);
    return it == by_external.end() ? -1 : it->second;
  };
  auto encloses = [&](std::int32_t outer, std::int32_t inner) {
    for (std::int32_t o = inner; o >= 0; o = p.ops[static_cast<std::size_t>(o)].parent)
      if (o == outer) return true;
    return false;
  };

  AttributionStats& s = p.attribution;
  s = AttributionStats{};
  for (Kernel& k : p.kernels) {
    // Copies and memsets are joined the same way, counted apart from the kernels.
    const bool kernel = k.kind == ActivityKind::kernel;
    if (kernel) {
      ++s.kernels;
      s.kernel_ns += k.duration_ns;
    }
    k.op = -1;
    k.by_external_id = false;
    if (!p.links) {
      k.no_op = NoOp::no_links;
      if (kernel) ++s.no_links, s.no_links_ns += k.duration_ns;
      continue;
    }
    const auto l = k.correlation >= 0 ? by_correlation.find(k.correlation) : by_correlation.end();
    std::int32_t external = external_op(k.external_id);
    if (l != by_correlation.end()) {
      const Launch& launch = p.launches[l->second];
      k.launch = launch.name;
      if (external < 0) external = external_op(launch.external_id);
      if (kernel) ++s.launched, s.launched_ns += k.duration_ns;
      k.op = launch_op[l->second];
      if (k.op >= 0 && external >= 0 && external != k.op && !encloses(external, k.op) && !encloses(k.op, external) &&
          kernel)
        ++s.external_id_differs;
      if (k.op < 0 && external >= 0) {
        k.op = external;
        k.by_external_id = true;
      }
      k.no_op = k.op >= 0 ? NoOp::attributed : NoOp::outside_ops;
    } else if (external >= 0) {
      k.op = external;
      k.by_external_id = true;
      k.no_op = NoOp::attributed;
    } else {
      k.no_op = NoOp::no_launch;
    }
    if (!kernel) continue;
    switch (k.no_op) {
      case NoOp::attributed:
        ++s.attributed, s.attributed_ns += k.duration_ns;
        s.by_external_id += k.by_external_id;
        break;
      case NoOp::no_launch: ++s.no_launch, s.no_launch_ns += k.duration_ns; break;
      case NoOp::outside_ops: ++s.outside_ops, s.outside_ops_ns += k.duration_ns; break;
      case NoOp::no_links: break;
    }
  }
}

}  // namespace ampcheck::profiles
