#include "engine/autograd.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "engine/hooks.h"
#include "engine/ops/op_util.h"
#include "kernels/kernel_note.h"

namespace ampcheck {
namespace {

std::string describe(const Tensor& t) {
  return to_string(t.shape()) + " " + std::string(name(t.dtype()));
}

// Every node reachable from root, newest first (a node is always newer than the nodes
// that produced its inputs, so this is a reverse topological order).
// Held as shared_ptr: releasing a node's inputs must not destroy nodes still to run.
std::vector<std::shared_ptr<Node>> collect(const std::shared_ptr<Node>& root) {
  std::vector<std::shared_ptr<Node>> nodes, stack{root};
  std::unordered_set<Node*> seen{root.get()};
  while (!stack.empty()) {
    std::shared_ptr<Node> n = stack.back();
    stack.pop_back();
    if (n->released)
      throw std::logic_error(
          "backward through a graph that was already freed: the first backward() dropped the "
          "values saved for it; pass retain_graph = true to that backward to run another");
    nodes.push_back(n);
    for (const Tensor& in : n->inputs)
      if (in.defined() && in.grad_fn() && seen.insert(in.grad_fn().get()).second)
        stack.push_back(in.grad_fn());
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const auto& a, const auto& b) { return a->sequence > b->sequence; });
  return nodes;
}

// A backward op's event: its forward's inputs and module, the incoming gradient.
OpEvent backward_event(const Node& node, const Tensor& g) {
  OpEvent e;
  e.sequence = hooks::next_sequence();
  e.step = current_step();
  e.phase = Phase::backward;
  e.op = node.op;
  e.module = node.module;
  for (const Tensor& t : node.inputs) {
    e.dtypes_before.push_back(t.defined() ? t.dtype() : DType::f32);
    e.shapes.push_back(t.defined() ? t.shape() : Shape{});
  }
  e.inputs = &node.inputs;
  e.params = &node.params;
  e.grad_output = &g;
  e.out_dtype = g.dtype();
  e.kernel = kernel_id(std::string(op_name(node.op)) + "_backward", g);
  hooks::op_begin(e);
  return e;
}

// What a backward without retain_graph drops once a node has run.
void release(Node& node) {
  node.inputs.clear();
  node.saved = Saved{};
  node.output = Tensor();
  node.released = true;
}

void accumulate_leaf(const Tensor& leaf, const Tensor& g) {
  Tensor& target = const_cast<Tensor&>(leaf);
  // A fresh copy: the optimizer and clipping update .grad in place, and g may be shared.
  target.set_grad(target.grad().defined() ? ops::add_same(target.grad(), g) : g.clone());
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  if (!root.requires_grad())
    throw std::logic_error(
        "backward() on a tensor that does not require grad: no input of its computation has "
        "set_requires_grad(true), or it was computed under NoGradGuard");
  Tensor grad = grad_in;
  if (!grad.defined()) {
    if (root.numel() != 1)
      throw std::invalid_argument("backward() on a tensor of shape " + to_string(root.shape()) +
                                  " needs an explicit gradient; only one-element outputs "
                                  "default to 1");
    grad = Tensor::ones(root.shape(), root.dtype(), root.device());
  }
  if (grad.shape() != root.shape())
    throw std::invalid_argument("backward(): gradient " + describe(grad) + " for output " +
                                describe(root));
  if (grad.dtype() != root.dtype()) grad = grad.to(root.dtype());
  if (root.is_leaf()) {
    accumulate_leaf(root, grad);
    return;
  }

  NoGradGuard no_grad;
  PhaseScope phase(Phase::backward);
  std::unordered_map<Node*, Tensor> grads{{root.grad_fn().get(), grad}};
  for (const std::shared_ptr<Node>& node : collect(root.grad_fn())) {
    auto it = grads.find(node.get());
    if (it == grads.end()) continue;  // no gradient flows into this branch
    const Tensor g = std::move(it->second);
    grads.erase(it);
    const OpInfo& info = op_info(node->op);
    // Only the inputs that require grad get one (as in PyTorch): the data batch, labels
    // and masks do not, so their gradients are neither computed nor shown to observers.
    std::vector<bool> needs(node->inputs.size());
    bool any = false;
    for (std::size_t i = 0; i < needs.size(); ++i) {
      needs[i] = node->inputs[i].defined() && node->inputs[i].requires_grad();
      any = any || needs[i];
    }
    if (!any) {  // an input's requires_grad was switched off after the forward
      if (!retain_graph) release(*node);
      continue;
    }
    const bool observe = observed();
    OpEvent event;
    if (observe) event = backward_event(*node, g);
    const auto start = observe ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    kernels::set_noting(observe);
    kernels::take_kernel_notes();
    const std::vector<Tensor> in_grads =
        info.backward(BackwardArgs{g, node->inputs, node->output, node->params, node->saved, needs});
    if (in_grads.size() != node->inputs.size())
      throw std::logic_error(std::string(info.name) + " backward returned " +
                             std::to_string(in_grads.size()) + " gradients for " +
                             std::to_string(node->inputs.size()) + " inputs");
    for (std::size_t i = 0; i < in_grads.size(); ++i)
      if (!needs[i] && in_grads[i].defined())
        throw std::logic_error(std::string(info.name) + " backward computed a gradient for input " +
                               std::to_string(i) + ", which does not require one: it must leave "
                               "it undefined when !args.needs(" + std::to_string(i) + ")");
    if (observe) {
      event.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      event.start = std::chrono::duration<double>(start.time_since_epoch()).count();
      event.grad_inputs = &in_grads;
      event.kernel = kernel_id(std::string(op_name(node->op)) + "_backward", g, kernels::take_kernel_notes());
      hooks::op_end(event);
    }
    for (std::size_t i = 0; i < in_grads.size(); ++i) {
      const Tensor& in = node->inputs[i];
      const Tensor& gi = in_grads[i];
      if (!needs[i] || !gi.defined()) continue;
      if (gi.shape() != in.shape() || gi.dtype() != in.dtype())
        throw std::logic_error(std::string(info.name) + " backward: gradient " + describe(gi) +
                               " for input " + std::to_string(i) + " " + describe(in));
      if (in.grad_fn()) {
        auto [slot, fresh] = grads.try_emplace(in.grad_fn().get(), gi);
        if (!fresh) slot->second = ops::add_same(slot->second, gi);
      } else {
        accumulate_leaf(in, gi);
      }
    }
    if (!retain_graph) release(*node);
  }
}

}  // namespace ampcheck
