// The fused attention family: scaled_dot_product_attention in one library call per pass,
// as PyTorch's F.scaled_dot_product_attention runs it on a GPU (flash / cuDNN), for the
// shapes and dtypes a device's fused kernels take.
//
// What the op computes is defined once, by its composed path in engine/ops/attention.cpp
// (GEMMs and softmax of the other families, on either device): for each batch-head b,
//   S = scale * Q_b K_b^T + mask_b   (f32; a causal mask sets S_ij = -inf where j > i)
//   P = softmax(S) along the keys     (f32), rounded to the inputs' dtype
//   O_b = P V_b                       (f32 accumulation, rounded once to the dtype)
// and the backward from the same S, P. That path is the CPU's, the reference of
// `ampcheck selftest --device cuda`, and the GPU's wherever fused_problem() names a reason.
// cuda() runs cuDNN's scaled-dot-product attention built through its graph API (forward
// and backward; kernels/cuda/attention.cu), which keeps S and P on chip: the same
// arithmetic in another order, held to the composed path within the dtype's tolerance.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/view.h"

namespace ampcheck::kernels {

// Q [batch, heads, q_len, head_dim], K [batch, heads, kv_len, head_dim], V [batch, heads,
// kv_len, value_dim], O [batch, heads, q_len, value_dim]: packed row-major. The mask, when
// present, is additive, of Q's dtype or f32, element (b, h, i, j) at
//   mask.data + b * mask_strides[0] + h * mask_strides[1] + i * mask_strides[2] + j * mask_strides[3]
// (in elements; a stride of 0 broadcasts that dim).
struct AttentionShape {
  std::int64_t batch = 1, heads = 1, q_len = 0, kv_len = 0, head_dim = 0, value_dim = 0;
  double scale = 1;
  bool causal = false;  // key j is hidden from query i where j > i (PyTorch's is_causal)
  std::int64_t mask_strides[4] = {0, 0, 0, 0};
};

struct AttentionKernels {
  // Empty where forward/backward below run these (q's dtype, the mask's presence and dtype):
  // else why not, in a user's words ("cuDNN's fused attention takes fp16 and bf16 only"),
  // and the op runs its composed path. Never throws.
  std::string (*fused_problem)(DType dtype, const AttentionShape& shape, bool has_mask, DType mask_dtype);
  // O and stats [batch, heads, q_len] f32: the log of each row's softmax denominator with
  // the row's max added back (log-sum-exp of S), which the backward takes.
  void (*forward)(const View& q, const View& k, const View& v, const View& mask, const AttentionShape& shape,
                  const View& out, const View& stats);
  // dq, dk, dv (the inputs' shapes and dtype) from the output's gradient, the forward's
  // inputs, its output and stats. The mask takes no gradient.
  void (*backward)(const View& grad_out, const View& q, const View& k, const View& v, const View& mask,
                   const View& out, const View& stats, const AttentionShape& shape, const View& dq, const View& dk,
                   const View& dv);

  static const AttentionKernels& cpu();
  static const AttentionKernels& cuda();
};

}  // namespace ampcheck::kernels
