#include "engine/ops/registry.h"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>

#include "engine/amp/policy.h"
#include "engine/autograd.h"
#include "engine/hooks.h"
#include "engine/ops/impl.h"
#include "engine/util/strings.h"
#include "kernels/kernel_note.h"

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

namespace {

// The begin event of an op call: dtypes as called, the policy's decision and casts.
OpEvent begin_event(Op op, const std::vector<DType>& before, const std::vector<Tensor>& inputs,
                    const amp::Policy* policy) {
  OpEvent e;
  e.sequence = hooks::next_sequence();
  e.step = current_step();
  e.phase = current_phase();
  e.op = op;
  e.module = current_module();
  e.amp = policy != nullptr;
  if (policy) {
    e.level = policy->options().level;
    e.reason = policy->reason(op);
  }
  e.inserted_cast = inserting_cast();
  e.dtypes_before = before;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    e.shapes.push_back(inputs[i].defined() ? inputs[i].shape() : Shape{});
    if (inputs[i].defined() && inputs[i].dtype() != before[i]) e.casts.push_back({i, before[i], inputs[i].dtype()});
  }
  e.inputs = &inputs;
  return e;
}

std::vector<DType> dtypes_of(const std::vector<Tensor>& inputs) {
  std::vector<DType> d;
  for (const Tensor& t : inputs) d.push_back(t.defined() ? t.dtype() : DType::f32);
  return d;
}

}  // namespace

std::string kernel_id(std::string_view name, const Tensor& result, const std::string& notes) {
  // One allocation (every observed op call builds one).
  const std::string_view device = device_name(result.device());
  std::string id;
  id.reserve(device.size() + name.size() + 5 + (notes.empty() ? 0 : notes.size() + 3));
  id.append(device).append(":").append(name).append(result.dtype() == DType::f64 ? ":f64" : ":f32");
  if (!notes.empty()) id.append(" (").append(notes).append(")");
  return id;
}

Tensor call(Op op, std::vector<Tensor> inputs, Params params) {
  const OpInfo& info = op_info(op);
  if (info.arity >= 0 && static_cast<int>(inputs.size()) != info.arity)
    throw std::invalid_argument(std::string(info.name) + " takes " + std::to_string(info.arity) +
                                " tensor inputs, got " + std::to_string(inputs.size()));
  if (inputs.empty() || !inputs[0].defined())
    throw std::invalid_argument(std::string(info.name) + ": the first input is undefined");
  const bool observe = observed();
  const std::vector<DType> before = observe ? dtypes_of(inputs) : std::vector<DType>{};
  // AMP: inside an autocast scope the policy casts the inputs first (as cast ops).
  const amp::Policy* policy = amp::active_policy();
  if (policy) inputs = policy->apply(op, std::move(inputs));

  bool record = false;
  if (grad_enabled())
    for (const Tensor& t : inputs) record = record || t.requires_grad();

  OpEvent event;
  if (observe) {
    event = begin_event(op, before, inputs, policy);
    event.params = &params;
    hooks::op_begin(event);
  }
  const auto start = observe ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  Saved saved;
  Tensor out;
  kernels::set_noting(observe);
  kernels::take_kernel_notes();  // what an earlier op left unread is not this op's
  {
    NoGradGuard no_grad;  // an op built from other ops records as one node
    out = info.forward(ForwardArgs{inputs, params, saved});
  }
  if (observe) {
    event.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    event.start = std::chrono::duration<double>(start.time_since_epoch()).count();
    event.output = &out;
    event.out_dtype = out.dtype();
    event.kernel = kernel_id(op_name(op), out, kernels::take_kernel_notes());
    hooks::op_end(event);
  }
  if (record) {
    auto node = std::make_shared<Node>();
    node->op = op;
    node->output = out.detach();
    node->inputs = std::move(inputs);
    node->params = std::move(params);
    node->saved = std::move(saved);
    node->sequence = g_sequence++;
    if (observe) node->module = current_module();
    out = out.detach();  // a fresh handle: the output may be a view of an input
    out.set_grad_fn(std::move(node));
  }
  return out;
}

}  // namespace ampcheck
