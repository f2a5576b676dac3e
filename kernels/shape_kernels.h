// The shape family: the copies behind permute, concat and slice (engine/ops/shape.cpp;
// reshape is a view and copies nothing). Elements move as bytes, so every dtype passes
// through bit for bit and the CPU and CUDA results are the same bits.
#pragma once

#include <cstdint>

#include "kernels/view.h"

namespace ampcheck::kernels {

// A copy of slabs along one dim: for every index o of the dims before `dim` and every
// j in [0, count), the slab of dst at index dst_start + j * dst_step along `dim` becomes
// the slab of src at index src_start + j * src_step (a slab: all the elements of the dims
// after `dim`). src and dst have the same dtype, and the same dims other than `dim`.
// concat places an input at an offset of its output (and its gradient takes it back),
// slice takes every step-th index (and its gradient puts them back).
struct CopyAlong {
  std::int64_t dim = 0, count = 0;
  std::int64_t src_start = 0, src_step = 1;
  std::int64_t dst_start = 0, dst_step = 1;
};

struct ShapeKernels {
  // out = x with its dims reordered: dim i of out is dim perm[i] of x (perm has x's rank
  // and names every dim once; out has the permuted shape and x's dtype).
  void (*permute)(const View& x, const Dims& perm, const View& out);
  void (*copy_along)(const View& src, const View& dst, const CopyAlong& copy);

  static const ShapeKernels& cpu();
  static const ShapeKernels& cuda();
};

}  // namespace ampcheck::kernels
