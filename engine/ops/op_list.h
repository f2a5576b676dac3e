// THE op list. Every op is declared here once:
//   X(id, arity, amp_category)
//   - id: the name users know (PyTorch / PaddlePaddle spelling) and the C++ identifier;
//   - arity: number of tensor inputs (-1: any number, as concat);
//   - amp_category: the slot the AMP policy fills (the AMP issue owns the final table):
//       lower   - worth running in fp16/bf16 (GEMM-like)
//       fp32    - numerically sensitive (exp, log, reductions, normalisation, losses)
//       promote - runs in the widest input dtype
//       follow  - runs in its input's dtype
// Each id must have impl::<id>_forward and impl::<id>_backward (engine/ops/impl.h); the
// registry table is generated from this list, so a missing one fails the build, and a
// static_assert keeps kOpCount in step. Checklist for adding an op: docs/adding_an_op.md.
#pragma once

#define AMPCHECK_OPS(X)              \
  /* GEMM and convolution */         \
  X(matmul, 2, lower)                \
  X(linear, -1, lower)               \
  X(bmm, 2, lower)                   \
  X(scaled_dot_product_attention, -1, lower) \
  /* recurrent layers: a whole sequence */ \
  X(lstm, -1, lower)                 \
  X(gru, -1, lower)                  \
  X(rnn_tanh, -1, lower)             \
  X(rnn_relu, -1, lower)             \
  X(fp8_linear, -1, follow)          \
  X(conv2d, -1, lower)               \
  /* normalisation */                \
  X(batch_norm, 5, follow)           \
  X(layer_norm, -1, fp32)            \
  /* activations */                  \
  X(relu, 1, follow)                 \
  X(gelu, 1, follow)                 \
  X(silu, 1, follow)                 \
  X(sigmoid, 1, follow)              \
  X(tanh, 1, follow)                 \
  X(hardswish, 1, follow)            \
  X(hardsigmoid, 1, follow)          \
  /* arithmetic */                   \
  X(add, 2, promote)                 \
  X(sub, 2, promote)                 \
  X(mul, 2, promote)                 \
  X(div, 2, promote)                 \
  X(add_scalar, 1, follow)           \
  X(sub_scalar, 1, follow)           \
  X(mul_scalar, 1, follow)           \
  X(div_scalar, 1, follow)           \
  X(neg, 1, follow)                  \
  X(abs, 1, follow)                  \
  X(square, 1, follow)               \
  /* math */                         \
  X(exp, 1, fp32)                    \
  X(log, 1, fp32)                    \
  X(sqrt, 1, follow)                 \
  X(rsqrt, 1, fp32)                  \
  X(pow, 1, fp32)                    \
  X(reciprocal, 1, fp32)             \
  X(erf, 1, follow)                  \
  X(clamp, 1, follow)                \
  /* reductions */                   \
  X(sum, 1, fp32)                    \
  X(mean, 1, fp32)                   \
  X(max, 1, follow)                  \
  X(softmax, 1, fp32)                \
  X(log_softmax, 1, fp32)            \
  /* losses */                       \
  X(cross_entropy, 2, fp32)          \
  X(mse_loss, 2, fp32)               \
  /* layers */                       \
  X(embedding, 2, follow)            \
  X(dropout, 1, follow)              \
  X(max_pool2d, 1, follow)           \
  X(avg_pool2d, 1, follow)           \
  X(adaptive_avg_pool2d, 1, follow)  \
  /* shape */                        \
  X(reshape, 1, follow)              \
  X(permute, 1, follow)              \
  X(concat, -1, promote)             \
  X(slice, 1, follow)                \
  X(where, 3, promote)               \
  X(masked_fill, 2, follow)          \
  X(cast, 1, follow)
