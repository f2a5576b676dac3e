#include "engine/ops/registry.h"

#include <atomic>
#include <stdexcept>
#include <string>

#include "engine/amp/policy.h"
#include "engine/autograd.h"
#include "engine/ops/impl.h"
#include "engine/util/strings.h"

namespace ampcheck {
namespace {

constexpr AmpCategory lower = AmpCategory::lower;
constexpr AmpCategory fp32 = AmpCategory::fp32;
constexpr AmpCategory promote = AmpCategory::promote;
constexpr AmpCategory follow = AmpCategory::follow;

// Generated from the op list: an op without impl::<id>_forward/_backward does not link.
constexpr OpInfo kOps[] = {
#define AMPCHECK_OP_INFO(id, arity, amp) \
  OpInfo{Op::id, #id, arity, amp, &impl::id##_forward, &impl::id##_backward},
    AMPCHECK_OPS(AMPCHECK_OP_INFO)
#undef AMPCHECK_OP_INFO
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == kOpCount, "op table out of step with the op list");

thread_local bool t_grad_enabled = true;
std::atomic<std::uint64_t> g_sequence{0};

}  // namespace

std::string_view amp_category_name(AmpCategory c) {
  switch (c) {
    case AmpCategory::lower: return "lower";
    case AmpCategory::fp32: return "fp32";
    case AmpCategory::promote: return "promote";
    case AmpCategory::follow: return "follow";
  }
  return "?";
}

const OpInfo& op_info(Op op) { return kOps[static_cast<std::size_t>(op)]; }
std::string_view op_name(Op op) { return op_info(op).name; }

std::optional<Op> op_from_name(std::string_view name) {
  for (const OpInfo& info : kOps)
    if (info.name == name) return info.op;
  return std::nullopt;
}

std::string_view closest_op_name(std::string_view name) {
  std::vector<std::string_view> names;
  for (const OpInfo& info : kOps) names.push_back(info.name);
  return closest(name, names, 3);
}

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

Tensor call(Op op, std::vector<Tensor> inputs, Params params) {
  const OpInfo& info = op_info(op);
  if (info.arity >= 0 && static_cast<int>(inputs.size()) != info.arity)
    throw std::invalid_argument(std::string(info.name) + " takes " + std::to_string(info.arity) +
                                " tensor inputs, got " + std::to_string(inputs.size()));
  if (inputs.empty() || !inputs[0].defined())
    throw std::invalid_argument(std::string(info.name) + ": the first input is undefined");
  // AMP: inside an autocast scope the policy casts the inputs first (as cast ops).
  if (const amp::Policy* policy = amp::active_policy()) inputs = policy->apply(op, std::move(inputs));

  bool record = false;
  if (grad_enabled())
    for (const Tensor& t : inputs) record = record || t.requires_grad();

  Saved saved;
  Tensor out;
  {
    NoGradGuard no_grad;  // an op built from other ops records as one node
    out = info.forward(ForwardArgs{inputs, params, saved});
  }
  if (record) {
    auto node = std::make_shared<Node>();
    node->op = op;
    node->output = out.detach();
    node->inputs = std::move(inputs);
    node->params = std::move(params);
    node->saved = std::move(saved);
    node->sequence = g_sequence++;
    out = out.detach();  // a fresh handle: the output may be a view of an input
    out.set_grad_fn(std::move(node));
  }
  return out;
}

}  // namespace ampcheck
