// The two anchors of correctness for ops, as reusable checks:
//   - gradcheck: autograd's gradients in f64 against central finite differences;
//   - precision: an f32 evaluation against an f64 evaluation of the same op (NMSE), and
//     for f16/bf16 the output equal, bit for bit, to the f32 result rounded once.
// An op under test is a function of its input tensors that calls the public API.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/ops/ops.h"

namespace ampcheck::test {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Uniform in [lo, hi), f64 (or `dtype`), from a seeded generator.
Tensor random(const Shape& shape, Generator& gen, double lo = -1, double hi = 1,
              DType dtype = DType::f64);

struct GradCheck {
  double max_rel_error = 0;  // max over inputs of ||analytic - numeric|| / ||numeric||
  std::string report;        // per input: the error and the worst element
};
// Inputs are f64 tensors; `wrt[i]` says whether input i is differentiated (default: every
// f64 input). L = sum(f(inputs) * r) for a fixed random r; dL/dx by autograd and by
// (L(x + eps) - L(x - eps)) / (2 eps), element by element.
GradCheck gradcheck(const OpFn& f, const std::vector<Tensor>& inputs,
                    std::vector<bool> wrt = {}, double eps = 1e-6);

// Normalised mean squared error of f on f32 inputs against f on the same values in f64:
// sum((y32 - y64)^2) / sum(y64^2). Inputs of other dtypes (i64 labels) pass unchanged.
double nmse_f32_vs_f64(const OpFn& f, const std::vector<Tensor>& inputs);

// Elements where f on `dtype` inputs differs from round_to(dtype, f on the same values in
// f32). 0 means bit-exact emulation of an f32-opmath kernel.
std::int64_t low_precision_mismatches(const OpFn& f, const std::vector<Tensor>& inputs,
                                      DType dtype);

// The message of the std::invalid_argument f throws, or "" when it throws none.
std::string error_of(const std::function<void()>& f);

// Inputs converted: every float tensor to `dtype`, others unchanged.
std::vector<Tensor> as_dtype(const std::vector<Tensor>& inputs, DType dtype);

}  // namespace ampcheck::test
