// The tape: each recorded op call is a Node holding what its backward needs; backward()
// walks the nodes from the loss in reverse creation order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/ops/registry.h"

namespace ampcheck {

struct Node {
  Op op;
  std::vector<Tensor> inputs;  // as the forward saw them (their grad_fn are the edges)
  Tensor output;               // detached: same storage, no edge back to this node
  Params params;
  Saved saved;
  std::uint64_t sequence = 0;  // creation order: a valid reverse topological order
  bool released = false;       // saved values dropped by a backward without retain_graph
  std::string module;          // the module it ran in (recorded while observed)
};

// Runs reverse mode from `root` with d root = `grad`; accumulates into the .grad of
// every leaf that requires it. Throws std::logic_error when the graph was freed.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

}  // namespace ampcheck
