// DelayedScaling's scaling_factor_compute_algo: the Python function a TransformerEngine
// user hands the recipe to turn the amax from the history into the next scale. TE calls
// it as fn(amax, scale, fp8_max, recipe) in its Python update path
// (transformer_engine/pytorch/fp8.py, _compute_scaling_factor) and uses what it returns
// as the scale, with none of its default's guards: a function written as
// `fp8_max / amax` turns a tensor whose amax is 0 (a zero-initialised LoRA B, a dead
// branch) into an infinite scale, and every later cast of it into +-max and NaN.
//
// ampcheck runs the function as the user wrote it, a lambda in the recipe's text:
//   DelayedScaling(scaling_factor_compute_algo=lambda amax, scale, fp8_max, recipe:
//                  torch.where(amax > 0, fp8_max / amax / 2 ** recipe.margin, scale))
// evaluated as PyTorch evaluates it on TE's one-element float32 tensors: amax and scale
// are float32 tensors, fp8_max a Python float and recipe.margin a Python int; an operation
// with a tensor operand rounds to float32 (a Python number meeting a tensor takes the
// tensor's dtype), one between Python numbers is Python's (double, or int); a Python number
// over a tensor is Tensor.__rtruediv__, the tensor's reciprocal times the number. The language
// is that of such functions: numbers, the four parameters, recipe.margin and
// recipe.amax_history_len, + - * / ** and unary -, comparisons, `a if c else b`, and the
// functions listed in docs/fp8.md (torch.where, torch.isfinite, torch.clamp, ...). Anything
// else is refused by name when the recipe is parsed, never at run time.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ampcheck::amp {

// A recipe's or function's text as an error message quotes it: whole when short, its first
// 100 characters and its length when long (a hostile recipe is not echoed back whole).
std::string quoted_source(std::string_view text);

class Fp8ScaleFunction {
 public:
  struct Node;

  // Parses `lambda a, b, c, d: EXPR` (four parameters, TE's positional order). Throws
  // std::invalid_argument naming what is not understood and what is.
  static Fp8ScaleFunction parse(std::string_view text);

  // The new scale for this amax (after the history's max or most recent), the current
  // scale, the format's largest value (448, 57344) and the recipe's margin and history
  // length. A result that is not a number throws std::domain_error (a boolean, say).
  float operator()(float amax, float scale, float fp8_max, int margin, std::int64_t amax_history_len) const;

  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::shared_ptr<const Node> body_;
};

}  // namespace ampcheck::amp
