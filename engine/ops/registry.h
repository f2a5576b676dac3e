// The op registry: the table generated from engine/ops/op_list.h, the per-op parameter
// types, and call(), the one door every op goes through (so autograd, and later the
// AMP policy and the inspector's hooks, each live in one place).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/ops/op_list.h"
#include "engine/tensor.h"
#include "kernels/fp8_format.h"

namespace ampcheck {

enum class Op : std::uint8_t {
#define AMPCHECK_OP_ENUM(id, arity, amp) id,
  AMPCHECK_OPS(AMPCHECK_OP_ENUM)
#undef AMPCHECK_OP_ENUM
};
#define AMPCHECK_OP_COUNT(id, arity, amp) +1
inline constexpr int kOpCount = 0 AMPCHECK_OPS(AMPCHECK_OP_COUNT);
#undef AMPCHECK_OP_COUNT

enum class AmpCategory : std::uint8_t { lower, fp32, promote, follow };
std::string_view amp_category_name(AmpCategory c);

// ---- parameters, one struct per kind of op ----
struct NoParams {};
struct ScalarParams { double value = 0; };        // *_scalar ops; pow's exponent
struct ClampParams { double lo = 0, hi = 0; };     // +-inf for an open side
struct GeluParams { bool tanh_approx = false; };
struct ReduceParams {                               // sum, mean, max
  std::vector<std::int64_t> dims;                   // empty: every dim
  bool keepdim = false;
};
struct DimParams { std::int64_t dim = -1; };        // softmax, log_softmax, concat
struct ShapeParams { Shape shape; };                // reshape (-1 allowed once)
struct PermuteParams { std::vector<std::int64_t> perm; };
struct SliceParams { std::int64_t dim = 0, start = 0, end = 0, step = 1; };
struct ConvParams {
  std::array<std::int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  std::int64_t groups = 1;
};
struct PoolParams {  // max/avg pool: kernel, stride, padding; adaptive: output size in kernel
  std::array<std::int64_t, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0};
};
struct BatchNormParams { bool training = true; double momentum = 0.1, eps = 1e-5; };
struct LayerNormParams { std::int64_t normalized_dims = 1; double eps = 1e-5; };
struct CrossEntropyParams { double label_smoothing = 0; };
struct DropoutParams { double p = 0.5; bool training = true; std::uint64_t seed = 0, offset = 0; };
struct FillParams { double value = 0; };            // masked_fill
struct CastParams { DType dtype = DType::f32; };
// scaled_dot_product_attention (PyTorch's F.scaled_dot_product_attention): the scale of
// Q K^T (absent: 1 / sqrt(head_dim)) and whether a query sees only the keys up to its own
// position (is_causal).
struct AttentionParams {
  std::optional<double> scale;
  bool causal = false;
};
// An fp8 Linear's scaling state for one GEMM, as TransformerEngine keeps it in fp8_meta:
// the formats and scales its casts use this step (set by the module from its recipe) and
// the amaxes those casts measure (written by the op: the input's and the weight's in the
// forward, the output gradient's in the backward; each the max over the step's calls).
struct Fp8LinearMeta {
  kernels::Fp8Format input_format = kernels::Fp8Format::e4m3, weight_format = kernels::Fp8Format::e4m3,
                     grad_format = kernels::Fp8Format::e5m2;
  float input_scale = 1.0f, weight_scale = 1.0f, grad_scale = 1.0f;
  float input_amax = 0.0f, weight_amax = 0.0f, grad_amax = 0.0f;
  // Current scaling (TE's Float8CurrentScaling): each cast takes its scale from its own
  // tensor's amax (kernels::fp8_scale_from_amax) instead of the delayed scales above, which
  // it overwrites with the scale it used. Absent: delayed scaling.
  struct Current {
    bool power_2_scales = false;
    float amax_epsilon = 0.0f;
  };
  std::optional<Current> current;
  // Block scaling (TE's MXFP8BlockScaling): every cast in blocks of 32 values along its
  // GEMM's k, each with the E8M0 scale of its own amax (kernels/fp8_kernels.h,
  // quantize_mx); the scales above stay 1, the amaxes are recorded. The CPU's only.
  bool block_scaling = false;
};
struct Fp8LinearParams { std::shared_ptr<Fp8LinearMeta> meta; };

using Params = std::variant<NoParams, ScalarParams, ClampParams, GeluParams, ReduceParams,
                            DimParams, ShapeParams, PermuteParams, SliceParams, ConvParams,
                            PoolParams, BatchNormParams, LayerNormParams, CrossEntropyParams,
                            DropoutParams, FillParams, CastParams, AttentionParams, Fp8LinearParams>;

// Intermediate values a forward keeps for its backward (a mask, the batch statistics).
struct Saved {
  std::vector<Tensor> tensors;
};

struct ForwardArgs {
  const std::vector<Tensor>& in;
  const Params& params;
  Saved& saved;
};
struct BackwardArgs {
  const Tensor& grad;             // d loss / d output, same shape and dtype as the output
  const std::vector<Tensor>& in;  // the forward's inputs (as the op saw them)
  const Tensor& out;              // the forward's output (detached)
  const Params& params;
  const Saved& saved;
  // Which inputs want a gradient: autograd sets it to the inputs that require grad (a
  // parameter, or a value computed from one), so the data batch gets none. Empty: every
  // input that can take one (a direct call).
  std::vector<bool> needs_grad = {};
  bool needs(std::size_t i) const { return needs_grad.empty() || (i < needs_grad.size() && needs_grad[i]); }
};
using ForwardFn = Tensor (*)(const ForwardArgs&);
// One gradient per input, each with its input's shape and dtype; an undefined tensor
// for an input that takes no gradient (labels, indices, masks) and for one that needs
// none (!args.needs(i)), whose work is skipped: PyTorch computes no gradient for a tensor
// that does not require one, and an Inf in one nobody asked for must not fail a run.
using BackwardFn = std::vector<Tensor> (*)(const BackwardArgs&);

struct OpInfo {
  Op op;
  std::string_view name;
  int arity;  // -1: variadic
  AmpCategory amp;
  ForwardFn forward;
  BackwardFn backward;
};

const OpInfo& op_info(Op op);
std::string_view op_name(Op op);
std::optional<Op> op_from_name(std::string_view name);
// The known op name closest to `name` (for "did you mean" messages), or empty.
std::string_view closest_op_name(std::string_view name);

// Runs an op: checks arity and devices, runs the forward, and records the autograd node
// when gradients are on and an input requires them.
Tensor call(Op op, std::vector<Tensor> inputs, Params params = NoParams{});

// What ran for an op call, as its event's `kernel`: "device:name:compute" ("cpu:matmul:f32",
// "cuda:relu_backward:f32": the compute type of `result`'s dtype), then, when the kernels
// named themselves (kernels/kernel_note.h), their notes in parentheses.
std::string kernel_id(std::string_view name, const Tensor& result, const std::string& notes = {});

// Gradient recording: on by default; NoGradGuard turns it off for a scope (nestable).
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace ampcheck
