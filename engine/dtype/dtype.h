// The floating-point dtypes ampcheck trains in, their names and their limits.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kernels/dtype.h"

namespace ampcheck {

// One row per dtype: enumerator, canonical name, long name, total bits, exponent bits,
// stored mantissa (fraction) bits, then every alias users type. Adding a row is all it
// takes for names, parsing and limits; the static_assert below catches a missed enum.
#define AMPCHECK_FLOAT_DTYPES(X)                                          \
  X(f64, "f64", "float64", 64, 11, 52, "fp64", "float64", "double", "")   \
  X(f32, "f32", "float32", 32, 8, 23, "fp32", "float32", "float", "")     \
  X(f16, "f16", "float16", 16, 5, 10, "fp16", "float16", "half", "")      \
  X(bf16, "bf16", "bfloat16", 16, 8, 7, "bfloat16", "", "", "")

// The enum itself lives with the kernels (kernels/dtype.h); this table must list the
// float dtypes in its order (the static_asserts below check).
inline constexpr std::array kFloatDTypes{DType::f64, DType::f32, DType::f16, DType::bf16};

constexpr bool is_floating(DType d) { return d != DType::i64; }
constexpr bool is_low_precision(DType d) { return d == DType::f16 || d == DType::bf16; }
// The dtype of an elementwise result of a and b: the wider float (f16 with bf16 gives
// f32, since neither holds the other).
DType promote(DType a, DType b);

// An IEEE 754 binary format described by its field widths; every limit follows from them.
struct DTypeInfo {
  DType dtype;
  std::string_view name;       // canonical: "f16"
  std::string_view long_name;  // what frameworks print: "float16"
  int bits;
  int exponent_bits;
  int mantissa_bits;  // stored fraction bits; precision p = mantissa_bits + 1
  std::array<std::string_view, 4> aliases;

  constexpr int digits() const { return mantissa_bits + 1; }  // p, as numeric_limits::digits
  constexpr int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  constexpr int max_exponent() const { return bias(); }       // emax: max = (2-2^-M) 2^emax
  constexpr int min_exponent() const { return 1 - bias(); }   // emin: min normal = 2^emin
  int digits10() const;      // decimal digits that always survive a round trip through it
  int max_digits10() const;  // decimal digits needed to write any value so it reads back
  double max() const;
  double min_normal() const;
  double min_subnormal() const;
  double epsilon() const;  // 2^-M: distance from 1 to the next value
};

static_assert(static_cast<int>(DType::bf16) + 1 == static_cast<int>(kFloatDTypes.size()),
              "every float DType must appear in kFloatDTypes and AMPCHECK_FLOAT_DTYPES");

const DTypeInfo& info(DType dtype);  // floats only: throws std::invalid_argument for i64
std::string_view name(DType dtype);

// Accepts every spelling users type (f16, fp16, float16, half, torch.float16, int64, ...).
std::optional<DType> try_parse_dtype(std::string_view text);

// Thrown for a dtype name nobody knows; the message names the closest known spelling.
class DTypeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};
DType parse_dtype(std::string_view text);  // throws DTypeError

// Every accepted spelling, for help texts: "f16 fp16 float16 half, ...".
std::string accepted_dtype_names();

}  // namespace ampcheck
