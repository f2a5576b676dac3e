// The per-step work of training that is not an op: the optimizers' updates (SGD,
// Adam/AdamW), the loss scaler's unscale with its Inf/NaN check over all gradients at
// once, and gradient clipping's norm and scaling. The engine (engine/optim/optimizer.cpp,
// engine/amp/grad_scaler.cpp) decides what to update with which constants; these run it
// over the elements. (engine/dispatch.h explains families.)
//
// The update formulas are written once below for the host and (under nvcc) the device,
// so a CUDA step computes the CPU's bits: T is the compute type of the parameter's dtype
// (float for f32/f16/bf16, double for f64), every product and sum is rounded on its own
// (nvcc would otherwise contract a * b + c into one fma, which the CPU's build does not
// do), and the result is rounded once into each buffer's dtype.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/fp_bits.h"  // AMPCHECK_HD
#include "kernels/view.h"

namespace ampcheck::kernels {

// One SGD step (PyTorch's rule): g += wd p; b = mu b + (1 - dampening) g (b = g on the
// first step with momentum); d = nesterov ? g + mu b : b; p -= lr d. The constants are
// doubles formed on the host, each converted to T where the formula uses it.
struct SgdStep {
  double lr = 0;
  double weight_decay = 0;
  double momentum = 0;
  double one_minus_dampening = 1;
  bool nesterov = false;
  bool first = false;  // the momentum buffer takes g as it is
};

// One Adam step (PyTorch's rule): g += wd p (Adam) or p *= 1 - lr wd (AdamW);
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
struct AdamStep {
  double lr_over_bias1 = 0;  // lr / (1 - b1^t)
  double bias2_sqrt = 1;     // sqrt(1 - b2^t)
  double beta1 = 0.9, one_minus_beta1 = 0.1;
  double beta2 = 0.999, one_minus_beta2 = 0.001;
  double eps = 1e-8;
  double weight_decay = 0;
  double decay = 1;  // 1 - lr wd, AdamW's factor on the weights
  bool decoupled = false;
};

namespace opmath {

// Rounded one operation at a time on both sides (the __f*_rn intrinsics are never
// contracted into an fma).
AMPCHECK_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
AMPCHECK_HD double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
AMPCHECK_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
AMPCHECK_HD double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
AMPCHECK_HD float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
AMPCHECK_HD double sub(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
// Correctly rounded on both (nvcc's default -prec-sqrt=true, and IEEE sqrt on the host).
AMPCHECK_HD float sqrt(float x) {
#if defined(__CUDA_ARCH__)
  return ::sqrtf(x);
#else
  return std::sqrt(x);
#endif
}
AMPCHECK_HD double sqrt(double x) {
#if defined(__CUDA_ARCH__)
  return ::sqrt(x);
#else
  return std::sqrt(x);
#endif
}
template <typename T>
AMPCHECK_HD bool is_finite(T x) {
#if defined(__CUDA_ARCH__)
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}

}  // namespace opmath

// SGD without momentum on one element (p updated in place).
template <typename T>
AMPCHECK_HD void sgd_element(T& p, T g, const SgdStep& s) {
  namespace op = opmath;
  if (s.weight_decay != 0) g = op::add(g, op::mul(T(s.weight_decay), p));  // (not 0 * p: an Inf weight must not turn into NaN)
  p = op::sub(p, op::mul(T(s.lr), g));
}

// SGD with momentum on one element (p and its momentum buffer b updated in place).
template <typename T>
AMPCHECK_HD void sgd_momentum_element(T& p, T g, T& b, const SgdStep& s) {
  namespace op = opmath;
  if (s.weight_decay != 0) g = op::add(g, op::mul(T(s.weight_decay), p));
  b = s.first ? g : op::add(op::mul(T(s.momentum), b), op::mul(T(s.one_minus_dampening), g));
  const T d = s.nesterov ? op::add(g, op::mul(T(s.momentum), b)) : b;
  p = op::sub(p, op::mul(T(s.lr), d));
}

// Adam / AdamW on one element (p and its moments m, v updated in place).
template <typename T>
AMPCHECK_HD void adam_element(T& p, T g, T& m, T& v, const AdamStep& s) {
  namespace op = opmath;
  if (s.weight_decay != 0 && s.decoupled) p = op::mul(p, T(s.decay));
  if (s.weight_decay != 0 && !s.decoupled) g = op::add(g, op::mul(T(s.weight_decay), p));
  m = op::add(op::mul(T(s.beta1), m), op::mul(T(s.one_minus_beta1), g));
  v = op::add(op::mul(T(s.beta2), v), op::mul(op::mul(T(s.one_minus_beta2), g), g));
  p = op::sub(p, op::mul(T(s.lr_over_bias1), m) / op::add(op::sqrt(v) / T(s.bias2_sqrt), T(s.eps)));
}

// The loss scaler's unscale of one element: g * inv_scale in T, rounded once into the
// output's dtype; `bad` is set when g or the product is not finite.
template <typename T>
AMPCHECK_HD T unscale_element(T g, T inv_scale, bool& bad) {
  bad = bad || !opmath::is_finite(g);
  const T out = opmath::mul(g, inv_scale);
  bad = bad || !opmath::is_finite(out);
  return out;
}

// One parameter of an update over all parameters at once: the weights the update reads and
// writes (the fp32 master copy, or the parameter itself), the gradient (any float dtype,
// read exactly), the buffers (SGD: state0 the momentum, or a View without data; Adam:
// state0 exp_avg and state1 exp_avg_sq), and `copy`: with master weights, the parameter,
// into which the updated weights are written rounded once to its dtype (else no data).
struct UpdateTensor {
  View weights, grad, state0, state1, copy;
};

struct TrainingKernels {
  // One SGD step of a parameter in place. grad may have another float dtype (it is read
  // exactly); momentum is the buffer in the compute type's dtype (f32, f64 for f64
  // parameters), or a View without data for SGD without momentum.
  void (*sgd)(const View& param, const View& grad, const View& momentum, const SgdStep& step);
  // One Adam/AdamW step of a parameter in place; exp_avg and exp_avg_sq as momentum above.
  void (*adam)(const View& param, const View& grad, const View& exp_avg, const View& exp_avg_sq,
               const AdamStep& step);
  // The same steps over every parameter at once, each as sgd / adam above, then its
  // weights written into its copy. On CUDA one launch for all of them (a device table of
  // the tensors and of fixed-size chunks of them, as PyTorch's fused and foreach
  // optimizers); on the CPU one parameter after another. The bits are those of the
  // per-parameter entries followed by a conversion.
  void (*sgd_all)(const std::vector<UpdateTensor>& tensors, const SgdStep& step);
  void (*adam_all)(const std::vector<UpdateTensor>& tensors, const AdamStep& step);
  // out[i] = grads[i] * inv_scale for every gradient at once (on CUDA: one launch), in
  // the compute type of out[i]'s dtype (f32, or f64), the reciprocal rounded once to it.
  // Returns whether any value, before or after the multiplication, was not finite;
  // per_tensor (nullable, grads.size() entries) gets 1 for each gradient that held one.
  bool (*unscale)(const std::vector<View>& grads, const std::vector<View>& out, double inv_scale,
                  std::uint8_t* per_tensor);
  // total + the sum of x^2 over the elements, in double, added in element order on the
  // CPU (so clipping over several gradients sums exactly as one loop would).
  double (*sum_squares)(const View& v, double total);
  // v *= factor in place, in v's compute type, rounded once.
  void (*scale)(const View& v, double factor);

  static const TrainingKernels& cpu();
  static const TrainingKernels& cuda();
};

}  // namespace ampcheck::kernels
