// The reduction kernel family: sum, mean and max over any set of dims, and max's
// backward. The engine (engine/ops/reduce.cpp) works out which dims reduce and gives the
// output View the shape that says so: out's shape broadcasts to x's (numpy rules: a size
// of 1, or a dim out lacks in front, is a reduced dim; an equal size is kept), so out has
// one element per group of x's elements, in row-major order. The same entry sums a
// broadcast gradient back to its operand's shape (engine/ops/cpu_util.h: sum_to_shape).
//
// Compute type: that of out's dtype (x and out share it), each result rounded once.
// cpu() (kernels/cpu/reduce.cpp) folds each group sequentially in element order, so the
// bits do not depend on the thread count. cuda() (kernels/cuda/reduce.cu) is
// deterministic too (a fixed reduction tree per group, no atomics): a small group, or
// many groups that keep x's last dim (neighbouring threads read neighbouring elements),
// is folded by one thread per group in element order (the CPU's sum, bit for bit); a
// larger one by a block with cub::BlockReduce.
#pragma once

#include <cstdint>

#include "kernels/elementwise.h"  // is_nan
#include "kernels/fp_bits.h"      // AMPCHECK_HD
#include "kernels/view.h"

namespace ampcheck::kernels {

// The running maximum of a group and the flat index in x where it is (-1: none yet).
template <typename T>
struct ArgMax {
  T value;
  std::int64_t index;
};

// Whether the running maximum `best` gives way to `candidate`, met later in element
// order: a larger value, or a NaN, unless best is already NaN. So the maximum is the
// first NaN of the group if it holds one (NaN wins, as PyTorch's max), else the first
// element of the largest value (ties and +-0 keep the first index).
template <typename T>
AMPCHECK_HD bool max_takes(T candidate, T best) {
  return !is_nan(best) && (candidate > best || is_nan(candidate));
}

// The maximum of two partial results over disjoint parts of one group, whatever the
// parts: the later of the two (by index) wins only as max_takes says, so a tree of merges
// gives what the sequential fold gives.
template <typename T>
AMPCHECK_HD ArgMax<T> max_merge(const ArgMax<T>& p, const ArgMax<T>& q) {
  if (p.index < 0) return q;
  if (q.index < 0) return p;
  const ArgMax<T>& first = p.index < q.index ? p : q;
  const ArgMax<T>& later = p.index < q.index ? q : p;
  return max_takes(later.value, first.value) ? later : first;
}

struct ReduceKernels {
  // out[j] = the sum of group j of x (0 for an empty group).
  void (*sum)(const View& x, const View& out);
  // out[j] = that sum / the group's size (NaN for an empty group: 0 / 0).
  void (*mean)(const View& x, const View& out);
  // out[j] = the maximum of group j (max_takes), argmax[j] (i64, out's numel) = its flat
  // index in x. Every group is nonempty (the engine refuses an empty dim).
  void (*max)(const View& x, const View& out, const View& argmax);
  // grad_x = 0 everywhere but grad_x[argmax[j]] = 0 + grad[j] (each index once: the
  // groups are disjoint; a -0 lands as +0). grad has argmax's numel, grad_x x's shape and
  // dtype.
  void (*max_backward)(const View& grad, const View& argmax, const View& grad_x);

  static const ReduceKernels& cpu();
  static const ReduceKernels& cuda();
};

}  // namespace ampcheck::kernels
