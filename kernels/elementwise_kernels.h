// The elementwise kernel family: one entry, map, that applies any MapFn of
// kernels/elementwise.h (every elementwise op, its derivatives, and the plain arithmetic
// the engine's other ops need, such as gradient accumulation) over tensors broadcast
// numpy-style to the output's shape. The engine (engine/ops/elementwise.cpp) decides the
// output's shape and dtype and which function to map; the kernels only compute.
//
// Compute type: that of the output's dtype (kernels/view.h: double for f64, float for
// every other float dtype); each input element is loaded exactly into it (i64 condition
// and mask tensors included) and each result is rounded once to the output's dtype.
// cpu() runs the CPU reference maps (kernels/cpu/elementwise.cpp: one loop per MapFn, over
// chunks on the thread pool, bits independent of the thread count); cuda() one grid-stride
// kernel per MapFn instantiated from the same scalar definitions (kernels/cuda/elementwise.cu).
#pragma once

#include "kernels/elementwise.h"  // MapFn, Map<F>: the scalar definitions
#include "kernels/view.h"

namespace ampcheck::kernels {

// The scalar arguments of a MapFn (which ones it reads: the comment on its entry in
// AMPCHECK_MAP_FNS); each is converted to the compute type once.
struct MapScalars {
  double a = 0;
  double b = 0;
};

struct ElementwiseKernels {
  // out = fn(inputs[0], ..., inputs[n_inputs - 1]) elementwise. n_inputs must be
  // map_arity(fn) (std::invalid_argument otherwise); each input's shape broadcasts to
  // out's (the engine checked); out overlaps no input.
  void (*map)(MapFn fn, const MapScalars& scalars, const View* inputs, int n_inputs, const View& out);

  static const ElementwiseKernels& cpu();
  static const ElementwiseKernels& cuda();
};

}  // namespace ampcheck::kernels
