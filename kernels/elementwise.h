// The scalar definition of every elementwise op and of its derivative, written once for
// the host and (under nvcc) the device, like fp_bits.h; T is the compute type (float or
// double). The CPU kernels (kernels/cpu/elementwise.cpp) and the CUDA kernels
// (kernels/cuda/elementwise.cu) both instantiate these, so a device computes what the
// CPU reference computes, expression for expression. At the end, MapFn names each of them
// for the elementwise kernel family (kernels/elementwise_kernels.h).
//
// For the ops whose result is a comparison or a selection, what a NaN (or an Inf in the
// gradient) becomes is a decision, not a consequence of IEEE arithmetic. Each follows
// PyTorch's CPU and CUDA kernels, so a NaN produced upstream reaches the loss as it does
// there.
//
// What PyTorch does, and so these:
//   - max_nan(a, b): NaN when either is NaN (torch.maximum, the max reductions, the
//     row max of softmax); std::max(a, NaN) would return a.
//   - relu(x) = clamp_min(x, 0) = std::max(x, 0): NaN stays NaN, -0 stays -0.
//   - relu_backward(g, y) = threshold_backward(g, y = relu(x), 0) = y <= 0 ? 0 : g: a
//     selection on the output, so a NaN input passes g through, and an Inf or NaN g
//     where x < 0 gives 0, not Inf * 0 = NaN.
//   - hardswish(x) = x * min(max(x + 3, 0), 6) / 6: NaN stays NaN, and -Inf gives
//     -Inf * 0 = NaN (PyTorch's and PaddlePaddle's formula; the piecewise form of the
//     docs would say 0); x <= -3 gives x * 0, -0 for finite x.
//   - hardswish_backward(g, x) = x < -3 ? 0 : x <= 3 ? g (2x + 3) / 6 : g: NaN x falls
//     through to g.
//   - hardsigmoid_backward(g, x) = -3 < x < 3 ? g / 6 : 0: NaN x gives 0.
//   - clamp(x, lo, hi) = min(max(x, lo), hi) with NaN kept; clamp_backward(g, x, lo, hi)
//     = lo <= x <= hi ? g : 0 (where(), so NaN x and Inf g outside give 0).
//   - sign(x) = (0 < x) - (x < 0): 0 for NaN (PyTorch's CPU sign kernel), so abs'
//     backward g * sign(x) is g * 0 at a NaN x.
//   - where(c, a, b) and masked_fill(x, m, v) select by c != 0 (m != 0): a NaN condition
//     is nonzero, so it selects a (v), as its conversion to bool does in PyTorch.
#pragma once

#include <cmath>  // the host's std:: math functions (kernels::math)

#include "kernels/fp_bits.h"  // AMPCHECK_HD

namespace ampcheck::kernels {

// The libm functions the ops call: on the host exactly the std:: overload the CPU kernels
// have always called (their bits are the baselines'), on the device CUDA's own (expf,
// erff, ...; a few ulp apart from glibc's, within the parity thresholds).
namespace math {
#if defined(__CUDA_ARCH__)
#define AMPCHECK_MATH_FN(name)                             \
  AMPCHECK_HD float name(float x) { return ::name##f(x); } \
  AMPCHECK_HD double name(double x) { return ::name(x); }
#else
#define AMPCHECK_MATH_FN(name)                             \
  AMPCHECK_HD float name(float x) { return std::name(x); } \
  AMPCHECK_HD double name(double x) { return std::name(x); }
#endif
AMPCHECK_MATH_FN(exp)
AMPCHECK_MATH_FN(log)
AMPCHECK_MATH_FN(sqrt)
AMPCHECK_MATH_FN(tanh)
AMPCHECK_MATH_FN(erf)
#undef AMPCHECK_MATH_FN

AMPCHECK_HD float abs(float x) {
#if defined(__CUDA_ARCH__)
  return ::fabsf(x);
#else
  return std::abs(x);
#endif
}
AMPCHECK_HD double abs(double x) {
#if defined(__CUDA_ARCH__)
  return ::fabs(x);
#else
  return std::abs(x);
#endif
}
AMPCHECK_HD float pow(float x, float p) {
#if defined(__CUDA_ARCH__)
  return ::powf(x, p);
#else
  return std::pow(x, p);
#endif
}
AMPCHECK_HD double pow(double x, double p) {
#if defined(__CUDA_ARCH__)
  return ::pow(x, p);
#else
  return std::pow(x, p);
#endif
}
}  // namespace math

template <typename T>
AMPCHECK_HD bool is_nan(T v) {
  return v != v;  // the one value unequal to itself (no fast-math in this project)
}

// The larger of a and b, NaN when either is NaN.
template <typename T>
AMPCHECK_HD T max_nan(T a, T b) {
  if (is_nan(a)) return a;
  if (is_nan(b)) return b;
  return a < b ? b : a;
}

template <typename T>
AMPCHECK_HD T relu(T x) {
  return x < T(0) ? T(0) : x;
}
template <typename T>
AMPCHECK_HD T relu_backward(T g, T y) {
  return y <= T(0) ? T(0) : g;
}

template <typename T>
AMPCHECK_HD T hardswish(T x) {
  if (x <= T(-3)) return x * T(0);
  if (x >= T(3)) return x;
  return x * (x + T(3)) / T(6);
}
template <typename T>
AMPCHECK_HD T hardswish_backward(T g, T x) {
  if (x < T(-3)) return T(0);
  if (x <= T(3)) return g * ((T(2) * x + T(3)) / T(6));
  return g;
}

template <typename T>
AMPCHECK_HD T hardsigmoid(T x) {
  if (x <= T(-3)) return T(0);
  if (x >= T(3)) return T(1);
  return x / T(6) + T(0.5);
}
template <typename T>
AMPCHECK_HD T hardsigmoid_backward(T g, T x) {
  return x > T(-3) && x < T(3) ? g * (T(1) / T(6)) : T(0);
}

template <typename T>
AMPCHECK_HD T clamp(T x, T lo, T hi) {
  if (is_nan(x)) return x;
  const T low = x < lo ? lo : x;
  return hi < low ? hi : low;
}
template <typename T>
AMPCHECK_HD T clamp_backward(T g, T x, T lo, T hi) {
  return x >= lo && x <= hi ? g : T(0);
}

template <typename T>
AMPCHECK_HD T sign(T x) {
  return T((T(0) < x) - (x < T(0)));
}

// ---- the arithmetic ones: IEEE arithmetic decides, the expression is all there is ----
// Constants are doubles converted to T where used; each expression keeps the order of
// its operations (its bits are the CPU baselines').
inline constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi), tanh-form GELU
inline constexpr double kInvSqrt2 = 0.7071067811865476;
inline constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1/sqrt(2 pi), the normal density
inline constexpr double kGeluCubic = 0.044715;             // the tanh form's x^3 coefficient
inline constexpr double k2OverSqrtPi = 1.1283791670955126;  // 2/sqrt(pi), erf's slope at 0

// gelu(x) = x Phi(x) = x/2 (1 + erf(x/sqrt2)); d = Phi(x) + x phi(x)
template <typename T>
AMPCHECK_HD T gelu_erf(T x) {
  return T(0.5) * x * (T(1) + math::erf(x * T(kInvSqrt2)));
}
template <typename T>
AMPCHECK_HD T gelu_erf_backward(T g, T x) {
  const T d = T(0.5) * (T(1) + math::erf(x * T(kInvSqrt2))) + x * T(kInvSqrt2Pi) * math::exp(T(-0.5) * x * x);
  return g * d;
}

// tanh form: x/2 (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3);
// d = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi)(1 + 3*0.044715 x^2)
template <typename T>
AMPCHECK_HD T gelu_tanh(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
  return T(0.5) * x * (T(1) + math::tanh(u));
}
template <typename T>
AMPCHECK_HD T gelu_tanh_backward(T g, T x) {
  const T t = math::tanh(T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x));
  const T d = T(0.5) * (T(1) + t) +
              T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
  return g * d;
}

// sigmoid(x) = 1 / (1 + e^-x); d = y (1 - y), in terms of the output y
template <typename T>
AMPCHECK_HD T sigmoid(T x) {
  return T(1) / (T(1) + math::exp(-x));
}
template <typename T>
AMPCHECK_HD T sigmoid_backward(T g, T y) {
  return g * (y * (T(1) - y));
}

// silu(x) = x sigmoid(x); d = s (1 + x (1 - s))
template <typename T>
AMPCHECK_HD T silu(T x) {
  return x * sigmoid(x);
}
template <typename T>
AMPCHECK_HD T silu_backward(T g, T x) {
  const T s = sigmoid(x);
  return g * (s * (T(1) + x * (T(1) - s)));
}

// tanh: d = 1 - y^2
template <typename T>
AMPCHECK_HD T tanh_backward(T g, T y) {
  return g * (T(1) - y * y);
}

// abs: d = sign(x) (0 at 0 and at NaN, as PyTorch's g * sgn(x))
template <typename T>
AMPCHECK_HD T abs_backward(T g, T x) {
  return g * sign(x);
}

// square: d = 2x
template <typename T>
AMPCHECK_HD T square_backward(T g, T x) {
  return g * (T(2) * x);
}

// sqrt: d = 1 / (2y)
template <typename T>
AMPCHECK_HD T sqrt_backward(T g, T y) {
  return g / (T(2) * y);
}

// rsqrt: y = x^(-1/2); d = -y^3 / 2
template <typename T>
AMPCHECK_HD T rsqrt(T x) {
  return T(1) / math::sqrt(x);
}
template <typename T>
AMPCHECK_HD T rsqrt_backward(T g, T y) {
  return g * (T(-0.5) * y * y * y);
}

// pow(x, p): d = p x^(p-1); p - 1 is formed in double by the caller, then converted
template <typename T>
AMPCHECK_HD T pow_backward(T g, T x, T p, T p_minus_1) {
  return g * (p * math::pow(x, p_minus_1));
}

// reciprocal: d = -y^2
template <typename T>
AMPCHECK_HD T reciprocal(T x) {
  return T(1) / x;
}
template <typename T>
AMPCHECK_HD T reciprocal_backward(T g, T y) {
  return g * (-y * y);
}

// erf (torch.erf, paddle.erf, ONNX Erf): d = 2/sqrt(pi) exp(-x^2), a product as PyTorch's
// derivatives.yaml writes it (2/sqrt(pi) * exp(-x^2) * grad), so an Inf g at x = +-Inf,
// where the slope is 0, gives Inf * 0 = NaN
template <typename T>
AMPCHECK_HD T erf_backward(T g, T x) {
  return g * (T(k2OverSqrtPi) * math::exp(-(x * x)));
}

// div a / b: d b = -g a / b^2 = -g y / b
template <typename T>
AMPCHECK_HD T div_backward_divisor(T g, T y, T b) {
  return -g * y / b;
}

// ---- selections by a condition or mask tensor: nonzero (NaN included) is true ----
// where(c, a, b) = c != 0 ? a : b; d a = g [c], d b = g [!c]
template <typename T>
AMPCHECK_HD T where(T c, T a, T b) {
  return c != T(0) ? a : b;
}
template <typename T>
AMPCHECK_HD T where_backward_taken(T c, T g) {
  return c != T(0) ? g : T(0);
}
template <typename T>
AMPCHECK_HD T where_backward_other(T c, T g) {
  return c != T(0) ? T(0) : g;
}

// masked_fill(x, m, v) = m != 0 ? v : x; d x = g [!m]
template <typename T>
AMPCHECK_HD T masked_fill(T x, T m, T value) {
  return m != T(0) ? value : x;
}
template <typename T>
AMPCHECK_HD T masked_fill_backward(T g, T m) {
  return m != T(0) ? T(0) : g;
}

// safe_softmax(p, s): 0 where the softmax's input s is -Inf and its output p is NaN (a row
// every score of which is -Inf: a fully masked query), else p, as PyTorch's _safe_softmax
// (scaled_dot_product_attention's math path). A NaN score stays NaN.
template <typename T>
AMPCHECK_HD T safe_softmax(T p, T s) {
  // s is -Inf: negative, and s - s is NaN (no infinity constant needed on the device).
  return (p != p && s < T(0) && s - s != s - s) ? T(0) : p;
}

// ---- MapFn: the name of each function an elementwise kernel applies ----
// One list; the enum, the names, the arities and the CPU and CUDA kernel tables are all
// generated from it, so an entry without its Map<> below fails the build. Inputs are x,
// y, z in the order the kernel is given them (g: the incoming gradient, y: the forward's
// output where a derivative is written in terms of it); a and b are the scalars
// (kernels/elementwise_kernels.h: MapScalars), converted to T once.
#define AMPCHECK_MAP_FNS(X)                                                                    \
  /* activations and their derivatives */                                                    \
  X(relu)                 /* x */                                                            \
  X(relu_backward)        /* g, y */                                                         \
  X(gelu_erf)             /* x */                                                            \
  X(gelu_erf_backward)    /* g, x */                                                         \
  X(gelu_tanh)            /* x */                                                            \
  X(gelu_tanh_backward)   /* g, x */                                                         \
  X(silu)                 /* x */                                                            \
  X(silu_backward)        /* g, x */                                                         \
  X(sigmoid)              /* x */                                                            \
  X(sigmoid_backward)     /* g, y */                                                         \
  X(tanh)                 /* x */                                                            \
  X(tanh_backward)        /* g, y */                                                         \
  X(hardswish)            /* x */                                                            \
  X(hardswish_backward)   /* g, x */                                                         \
  X(hardsigmoid)          /* x */                                                            \
  X(hardsigmoid_backward) /* g, x */                                                         \
  /* arithmetic; mul and div are also the backward g * y of exp, g / x of log, ... */        \
  X(add)                  /* x, y */                                                         \
  X(sub)                  /* x, y */                                                         \
  X(mul)                  /* x, y */                                                         \
  X(div)                  /* x, y */                                                         \
  X(div_backward_divisor) /* g, y, b: -g y / b */                                            \
  X(add_scalar)           /* x; a */                                                         \
  X(sub_scalar)           /* x; a */                                                         \
  X(mul_scalar)           /* x; a (also the reductions' backward: g broadcast, times a) */   \
  X(div_scalar)           /* x; a */                                                         \
  X(neg)                  /* x */                                                            \
  X(abs)                  /* x */                                                            \
  X(abs_backward)         /* g, x */                                                         \
  X(square)               /* x */                                                            \
  X(square_backward)      /* g, x */                                                         \
  /* math */                                                                                 \
  X(exp)                  /* x */                                                            \
  X(log)                  /* x */                                                            \
  X(sqrt)                 /* x */                                                            \
  X(sqrt_backward)        /* g, y */                                                         \
  X(rsqrt)                /* x */                                                            \
  X(rsqrt_backward)       /* g, y */                                                         \
  X(pow)                  /* x; a = p */                                                     \
  X(pow_backward)         /* g, x; a = p, b = p - 1 */                                       \
  X(reciprocal)           /* x */                                                            \
  X(reciprocal_backward)  /* g, y */                                                         \
  X(erf)                  /* x */                                                            \
  X(erf_backward)         /* g, x */                                                         \
  X(clamp)                /* x; a = lo, b = hi */                                            \
  X(clamp_backward)       /* g, x; a = lo, b = hi */                                         \
  /* selection */                                                                            \
  X(where)                /* c, x, y */                                                      \
  X(where_backward_taken) /* c, g: d of where's x */                                         \
  X(where_backward_other) /* c, g: d of where's y */                                         \
  X(masked_fill)          /* x, m; a = value */                                              \
  X(masked_fill_backward) /* g, m */                                                         \
  X(safe_softmax)         /* p, s */

enum class MapFn : int {
#define AMPCHECK_MAP_ENUM(id) id,
  AMPCHECK_MAP_FNS(AMPCHECK_MAP_ENUM)
#undef AMPCHECK_MAP_ENUM
};

// Map<F>::arity (1 to 3 inputs) and Map<F>::apply(inputs..., a, b), the value of F.
template <MapFn F>
struct Map;

#define AMPCHECK_MAP1(id, ...)                            \
  template <>                                             \
  struct Map<MapFn::id> {                                 \
    static constexpr int arity = 1;                       \
    template <typename T>                                 \
    AMPCHECK_HD static T apply(T x, T a, T b) {           \
      (void)a, (void)b;                                   \
      return __VA_ARGS__;                                 \
    }                                                     \
  };
#define AMPCHECK_MAP2(id, ...)                            \
  template <>                                             \
  struct Map<MapFn::id> {                                 \
    static constexpr int arity = 2;                       \
    template <typename T>                                 \
    AMPCHECK_HD static T apply(T x, T y, T a, T b) {      \
      (void)a, (void)b;                                   \
      return __VA_ARGS__;                                 \
    }                                                     \
  };
#define AMPCHECK_MAP3(id, ...)                            \
  template <>                                             \
  struct Map<MapFn::id> {                                 \
    static constexpr int arity = 3;                       \
    template <typename T>                                 \
    AMPCHECK_HD static T apply(T x, T y, T z, T a, T b) { \
      (void)a, (void)b;                                   \
      return __VA_ARGS__;                                 \
    }                                                     \
  };

AMPCHECK_MAP1(relu, relu(x))
AMPCHECK_MAP2(relu_backward, relu_backward(x, y))
AMPCHECK_MAP1(gelu_erf, gelu_erf(x))
AMPCHECK_MAP2(gelu_erf_backward, gelu_erf_backward(x, y))
AMPCHECK_MAP1(gelu_tanh, gelu_tanh(x))
AMPCHECK_MAP2(gelu_tanh_backward, gelu_tanh_backward(x, y))
AMPCHECK_MAP1(silu, silu(x))
AMPCHECK_MAP2(silu_backward, silu_backward(x, y))
AMPCHECK_MAP1(sigmoid, sigmoid(x))
AMPCHECK_MAP2(sigmoid_backward, sigmoid_backward(x, y))
AMPCHECK_MAP1(tanh, math::tanh(x))
AMPCHECK_MAP2(tanh_backward, tanh_backward(x, y))
AMPCHECK_MAP1(hardswish, hardswish(x))
AMPCHECK_MAP2(hardswish_backward, hardswish_backward(x, y))
AMPCHECK_MAP1(hardsigmoid, hardsigmoid(x))
AMPCHECK_MAP2(hardsigmoid_backward, hardsigmoid_backward(x, y))
AMPCHECK_MAP2(add, x + y)
AMPCHECK_MAP2(sub, x - y)
AMPCHECK_MAP2(mul, x * y)
AMPCHECK_MAP2(div, x / y)
AMPCHECK_MAP3(div_backward_divisor, div_backward_divisor(x, y, z))
AMPCHECK_MAP1(add_scalar, x + a)
AMPCHECK_MAP1(sub_scalar, x - a)
AMPCHECK_MAP1(mul_scalar, x * a)
AMPCHECK_MAP1(div_scalar, x / a)
AMPCHECK_MAP1(neg, -x)
AMPCHECK_MAP1(abs, math::abs(x))
AMPCHECK_MAP2(abs_backward, abs_backward(x, y))
AMPCHECK_MAP1(square, x * x)
AMPCHECK_MAP2(square_backward, square_backward(x, y))
AMPCHECK_MAP1(exp, math::exp(x))
AMPCHECK_MAP1(log, math::log(x))
AMPCHECK_MAP1(sqrt, math::sqrt(x))
AMPCHECK_MAP2(sqrt_backward, sqrt_backward(x, y))
AMPCHECK_MAP1(rsqrt, rsqrt(x))
AMPCHECK_MAP2(rsqrt_backward, rsqrt_backward(x, y))
AMPCHECK_MAP1(pow, math::pow(x, a))
AMPCHECK_MAP2(pow_backward, pow_backward(x, y, a, b))
AMPCHECK_MAP1(reciprocal, reciprocal(x))
AMPCHECK_MAP2(reciprocal_backward, reciprocal_backward(x, y))
AMPCHECK_MAP1(erf, math::erf(x))
AMPCHECK_MAP2(erf_backward, erf_backward(x, y))
AMPCHECK_MAP1(clamp, clamp(x, a, b))
AMPCHECK_MAP2(clamp_backward, clamp_backward(x, y, a, b))
AMPCHECK_MAP3(where, where(x, y, z))
AMPCHECK_MAP2(where_backward_taken, where_backward_taken(x, y))
AMPCHECK_MAP2(where_backward_other, where_backward_other(x, y))
AMPCHECK_MAP2(masked_fill, masked_fill(x, y, a))
AMPCHECK_MAP2(masked_fill_backward, masked_fill_backward(x, y))
AMPCHECK_MAP2(safe_softmax, safe_softmax(x, y))

#undef AMPCHECK_MAP1
#undef AMPCHECK_MAP2
#undef AMPCHECK_MAP3

inline constexpr int kMapFnCount = 0
#define AMPCHECK_MAP_COUNT(id) +1
    AMPCHECK_MAP_FNS(AMPCHECK_MAP_COUNT)
#undef AMPCHECK_MAP_COUNT
    ;

// How many inputs F takes, and its name ("relu_backward") for messages and kernel notes.
constexpr int map_arity(MapFn fn) {
  switch (fn) {
#define AMPCHECK_MAP_ARITY(id) \
  case MapFn::id: return Map<MapFn::id>::arity;
    AMPCHECK_MAP_FNS(AMPCHECK_MAP_ARITY)
#undef AMPCHECK_MAP_ARITY
  }
  return 0;
}
constexpr const char* map_fn_name(MapFn fn) {
  switch (fn) {
#define AMPCHECK_MAP_NAME(id) \
  case MapFn::id: return #id;
    AMPCHECK_MAP_FNS(AMPCHECK_MAP_NAME)
#undef AMPCHECK_MAP_NAME
  }
  return "?";
}

}  // namespace ampcheck::kernels
