#include "engine/ops/op_util.h"

#include <stdexcept>
#include <string>

#include "engine/dispatch.h"
#include "kernels/elementwise_kernels.h"
#include "kernels/reduce_kernels.h"

namespace ampcheck::ops {

std::int64_t rows_of(const Tensor& x) {
  std::int64_t rows = 1;
  for (std::int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  return rows;
}

std::int64_t normalize_dim(std::int64_t dim, std::int64_t rank, const char* op) {
  const std::int64_t r = std::max<std::int64_t>(rank, 1);
  if (dim < -r || dim >= r)
    throw std::invalid_argument(std::string(op) + ": dim " + std::to_string(dim) +
                                " out of range for a tensor of rank " + std::to_string(rank));
  return dim < 0 ? dim + r : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument(std::string(op) + ": shapes " + to_string(a) + " and " +
                                  to_string(b) + " do not broadcast (dim " + std::to_string(i) +
                                  ": " + std::to_string(da) + " vs " + std::to_string(db) + ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

DType float_dtype(const Tensor& t, const char* op) {
  if (!is_floating(t.dtype()))
    throw std::invalid_argument(std::string(op) + ": expects a floating-point tensor, got i64 " +
                                to_string(t.shape()) + "; cast it first");
  return t.dtype();
}

// A sum over the broadcast dims: the reduction family's sum, whose output shape (here the
// operand's) names the dims it reduces. On the CPU, sequential in element order.
Tensor sum_to_shape(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  Tensor out = Tensor::empty(shape, grad.dtype(), grad.device());
  kernels_on<kernels::ReduceKernels>(grad.device()).sum(view_of(grad), view_of(out));
  return out;
}

Tensor add_same(const Tensor& a, const Tensor& b) {
  const char* op = "gradient accumulation";
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  const Device device = common_device(op, {&a, &b});
  Tensor out = Tensor::empty(shape, a.dtype(), device);
  const kernels::View in[2] = {view_of(a), view_of(b)};
  kernels_on<kernels::ElementwiseKernels>(device).map(kernels::MapFn::add, {}, in, 2, view_of(out));
  return out;
}

}  // namespace ampcheck::ops
