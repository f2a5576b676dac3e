// The normalisation, softmax, loss, embedding and dropout family: batch_norm (with its
// running statistics), layer_norm, softmax / log_softmax, cross_entropy (with label
// smoothing), mse_loss, embedding and dropout, forward and backward. The op code
// (engine/ops/norm_loss.cpp) checks operands, chooses dtypes and allocates every output;
// a kernel fills the outputs it is given. (engine/dispatch.h explains families.)
//
// Conventions of every entry:
//   - Operands are read exactly into the compute type ("opmath": double when the engine's
//     compute dtype is f64, float otherwise) and each result is rounded once to its
//     output's dtype, so an f16/bf16 result is the f32 result rounded once.
//   - An absent operand or an output nobody needs is a View with data == nullptr (what
//     view_of gives for an undefined Tensor): an absent weight counts as ones, an absent
//     bias as zeros, an absent output is not written.
//   - The statistics a backward needs (mean, invstd, lse) are outputs of the forward in
//     the compute dtype, so they are kept without rounding.
//   - Row statistics run in a fixed order: on the CPU the order the kernels always had (the
//     same bits for any thread count); on CUDA one block per row or channel reduced with
//     cub::BlockReduce (the same bits from run to run on one GPU, not the CPU's).
//
// The per-element formulas below are written once for the host and (under nvcc) the
// device and called by both backends' kernels.
#pragma once

#include <cmath>  // std::exp, std::log, std::sqrt: the formulas on the host
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/fp_bits.h"  // AMPCHECK_HD
#include "kernels/random.h"   // uniform01: dropout's mask
#include "kernels/view.h"

namespace ampcheck::kernels {

// softmax's tensor seen as [outer, n, inner] around the reduced dim: line (o, i) holds the
// n elements o * n * inner + i + k * inner, k = 0..n-1.
struct SoftmaxLines {
  std::int64_t outer = 1, n = 1, inner = 1;
};

// batch_norm's x seen as [N, C, S] (S: the product of the dims after the channels), and
// the op's parameters. In training the batch statistics normalise and, when the running
// statistics are present, update them in place; in evaluation the running ones normalise.
struct BatchNormArgs {
  std::int64_t n = 0, c = 0, s = 0;
  bool training = true;
  double momentum = 0.1, eps = 1e-5;
  DType compute = DType::f32;  // f64 or f32: the opmath of the op
};

// layer_norm's x seen as `rows` rows of `len` elements (the normalised trailing dims).
struct LayerNormArgs {
  std::int64_t rows = 0, len = 0;
  double eps = 1e-5;
  DType compute = DType::f32;  // f64 or f32
};

struct NormLossKernels {
  // y = softmax (or, with log, log_softmax) of x along the lines; in the compute type of
  // y's dtype. A line holding a NaN gives NaN throughout, as PyTorch.
  void (*softmax)(const View& x, const SoftmaxLines& lines, bool log, const View& y);
  // dx from the forward's output y and the gradient, in the compute type of dx's dtype:
  //   softmax: dx_k = y_k (g_k - sum_j g_j y_j);  log_softmax: dx_k = g_k - exp(y_k) sum_j g_j.
  void (*softmax_backward)(const View& grad, const View& y, const SoftmaxLines& lines, bool log, const View& dx);

  // y = (x - mean) invstd weight + bias per row; mean and invstd [rows] are outputs in
  // a.compute (two passes: mean, then squared deviations).
  void (*layer_norm)(const View& x, const View& weight, const View& bias, const LayerNormArgs& a, const View& y,
                     const View& mean, const View& invstd);
  // Per row, xhat = (x - mean) invstd and h = g weight: dx = invstd (h - mean(h) - xhat
  // mean(h xhat)); dweight = sum over rows of g xhat, dbias = sum over rows of g (each
  // column summed in row order).
  void (*layer_norm_backward)(const View& grad, const View& x, const View& weight, const View& mean,
                              const View& invstd, const LayerNormArgs& a, const View& dx, const View& dweight,
                              const View& dbias);

  // y = (x - mean) invstd weight + bias per channel; mean and invstd [C] are outputs in
  // a.compute. Training: biased batch variance (two passes); running_mean/var, when
  // present, become (1 - momentum) running + momentum batch (the unbiased variance),
  // rounded once to their own dtypes, in place.
  void (*batch_norm)(const View& x, const View& weight, const View& bias, const View& running_mean,
                     const View& running_var, const BatchNormArgs& a, const View& y, const View& mean,
                     const View& invstd);
  // xhat = (x - mean) invstd per channel: dbias = sum g, dweight = sum g xhat; training
  // dx = weight invstd (g - mean(g) - xhat mean(g xhat)), evaluation dx = weight invstd g.
  void (*batch_norm_backward)(const View& grad, const View& x, const View& weight, const View& mean,
                              const View& invstd, const BatchNormArgs& a, const View& dx, const View& dweight,
                              const View& dbias);

  // logits [N, C], labels [N] (i64, in range: the engine checked). With lse_n = log
  // sum_c exp(x_nc) and q = (1 - smoothing) onehot(y) + smoothing / C: lse [N] (an output
  // in the compute type of logits' dtype) and loss (one element, logits' dtype) = (1/N)
  // sum_n -(sum_c q_c (x_nc - lse_n)), the row losses summed in a fixed order.
  void (*cross_entropy)(const View& logits, const View& labels, double smoothing, const View& lse,
                        const View& loss);
  // dlogits_nc = g / N (exp(x_nc - lse_n) - q_c), g the one element of grad.
  void (*cross_entropy_backward)(const View& grad, const View& logits, const View& labels, const View& lse,
                                 double smoothing, const View& dlogits);

  // loss (one element) = mean of (input - target)^2 in the compute type of loss's dtype,
  // summed in a fixed order.
  void (*mse_loss)(const View& input, const View& target, const View& loss);
  // dinput = 2 g (input - target) / numel, dtarget = -dinput (each when present), in
  // `compute` (f64 or f32).
  void (*mse_loss_backward)(const View& grad, const View& input, const View& target, DType compute,
                            const View& dinput, const View& dtarget);

  // out [indices..., D] = the rows of weight [V, D] that the i64 indices name (in range:
  // the engine checked), copied bit for bit.
  void (*embedding)(const View& indices, const View& weight, const View& out);
  // dweight [V, D] = for each row v, the sum of the grad rows at the positions whose
  // index is v, added in position order in the compute type of dweight's dtype and
  // rounded once; rows no index names are 0.
  void (*embedding_backward)(const View& indices, const View& grad, const View& dweight);

  // Element i is dropped iff uniform01(seed, offset + i) < p: y = x * (mask / (1 - p)) with
  // mask (x's dtype) 1 for kept elements and 0 for dropped ones, so an Inf in x shows as
  // a NaN where it is dropped, as PyTorch.
  void (*dropout)(const View& x, double p, std::uint64_t seed, std::uint64_t offset, const View& y,
                  const View& mask);
  // dx = g * (mask / (1 - p)).
  void (*dropout_backward)(const View& grad, const View& mask, double p, const View& dx);

  static const NormLossKernels& cpu();
  static const NormLossKernels& cuda();
};

// ---- the scalar definitions both backends use ---------------------------------------
namespace norm_loss {

// The math functions of the compute type: std:: on the host (what the CPU kernels have
// always called), CUDA's on the device.
template <typename T>
AMPCHECK_HD T exp_of(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) {
    return ::expf(x);
  } else {
    return ::exp(x);
  }
#else
  return std::exp(x);
#endif
}
template <typename T>
AMPCHECK_HD T log_of(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) {
    return ::logf(x);
  } else {
    return ::log(x);
  }
#else
  return std::log(x);
#endif
}
template <typename T>
AMPCHECK_HD T sqrt_of(T x) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 4) {
    return ::sqrtf(x);
  } else {
    return ::sqrt(x);
  }
#else
  return std::sqrt(x);
#endif
}

// softmax_k = exp(x_k - max) / sum; log_softmax_k = (x_k - max) - log(sum). Subtracting
// the max keeps exp <= 1: no overflow for any finite input.
template <typename T>
AMPCHECK_HD T softmax_value(T x, T max, T sum) {
  return exp_of(x - max) / sum;
}
template <typename T>
AMPCHECK_HD T log_softmax_value(T x, T max, T log_sum) {
  return (x - max) - log_sum;
}
// What a line's backward sums: g y for softmax, g for log_softmax.
template <typename T>
AMPCHECK_HD T softmax_backward_term(T g, T y, bool log) {
  return log ? g : g * y;
}
template <typename T>
AMPCHECK_HD T softmax_backward_value(T g, T y, T sum, bool log) {
  return log ? g - exp_of(y) * sum : y * (g - sum);
}

template <typename T>
AMPCHECK_HD T inverse_std(T var, T eps) {
  return T(1) / sqrt_of(var + eps);
}

// layer_norm's output and input gradient at one element (w: the weight, or 1).
template <typename T>
AMPCHECK_HD T layer_norm_value(T x, T mean, T invstd, T w, T b) {
  return (x - mean) * invstd * w + b;
}
template <typename T>
AMPCHECK_HD T layer_norm_dx(T g, T x, T w, T mean, T invstd, T mean_h, T mean_hx) {
  const T xhat = (x - mean) * invstd;
  return invstd * (g * w - mean_h - xhat * mean_hx);
}

// batch_norm's output (scale = invstd weight), input gradient (scale = weight invstd)
// and running-statistic update.
template <typename T>
AMPCHECK_HD T batch_norm_value(T x, T mean, T scale, T b) {
  return (x - mean) * scale + b;
}
template <typename T>
AMPCHECK_HD T batch_norm_dx(T g, T x, T mean, T invstd, T scale, T mean_g, T mean_gx, bool training) {
  return training ? scale * (g - mean_g - (x - mean) * invstd * mean_gx) : scale * g;
}
template <typename T>
AMPCHECK_HD T running_update(T running, T batch, T momentum) {
  return (T(1) - momentum) * running + momentum * batch;
}

// One row's cross-entropy from its max, sum of exp(x - max), sum of (x - max) and the
// label's logit. log p_k = (x_k - max) - log_sum; summed over k: sum_shifted - C log_sum.
// Without smoothing that sum is left out (an Inf in it must not make a NaN).
template <typename T>
AMPCHECK_HD T cross_entropy_row(T x_label, T max, T log_sum, T sum_shifted, T classes, bool smoothing, T hit,
                                T per_class) {
  const T logp_label = (x_label - max) - log_sum;
  T l = -hit * logp_label;
  if (smoothing) l -= per_class * (sum_shifted - classes * log_sum);
  return l;
}
template <typename T>
AMPCHECK_HD T cross_entropy_dx(T g_over_n, T x, T lse, bool is_label, T hit, T per_class) {
  const T q = (is_label ? hit : T(0)) + per_class;
  return g_over_n * (exp_of(x - lse) - q);
}

// Whether dropout keeps element `index` of the stream (the comparison in double, as the
// engine has always made it).
AMPCHECK_HD bool dropout_keeps(std::uint64_t seed, std::uint64_t index, double p) {
  return static_cast<double>(uniform01(seed, index)) >= p;
}

}  // namespace norm_loss
}  // namespace ampcheck::kernels
