// What the op families (engine/ops/*.cpp) share of an op's meaning: dims and broadcast
// shapes with the errors users see, the float-dtype check, and the two gradient helpers
// autograd and the broadcasting ops need (both dispatch to their tensors' device).
// Arithmetic lives in kernels/; nothing here loops over elements.
#pragma once

#include <cstdint>

#include "engine/tensor.h"

namespace ampcheck::ops {

// Dims: "-1" -> last; throws std::invalid_argument naming the op when out of range.
std::int64_t normalize_dim(std::int64_t dim, std::int64_t rank, const char* op);
// numpy broadcasting; throws std::invalid_argument naming the op and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// The float dtype of an op's operand, with a clear error for an i64 one.
DType float_dtype(const Tensor& t, const char* op);
// The rows of x [..., in] as a GEMM sees them: its leading dims (counted, not divided out:
// `in` may be 0). linear and fp8_linear.
std::int64_t rows_of(const Tensor& x);

// Sums a broadcast gradient back to `shape` (the shape of the input it belongs to).
Tensor sum_to_shape(const Tensor& grad, const Shape& shape);
// Gradient accumulation: a + b with a's dtype, on their device (no autograd).
Tensor add_same(const Tensor& a, const Tensor& b);

}  // namespace ampcheck::ops
