// What happens to one number when it is stored in a dtype: the value kept, its bits,
// the rounding error, the ulp there and its class. The answer to "what is 70000 in fp16".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/dtype/dtype.h"
#include "engine/dtype/fp8.h"

namespace ampcheck {

enum class FpClass : std::uint8_t {
  zero,       // +-0 (from a zero input)
  subnormal,  // stored below the min normal, with lost precision
  normal,
  infinity,   // an infinite input stays infinite
  nan,
  overflow,   // a finite input too large: stored as +-Inf
  underflow,  // a nonzero input too small: stored as +-0
  overflow_nan,  // fp8 E4M3, which has no Inf: a finite input too large, stored as NaN
  infinity_nan,  // fp8 E4M3: an infinite input, stored as NaN
};
std::string_view class_name(FpClass c);  // "overflow -> inf", "underflow -> 0", ...

struct FpValue {
  DType dtype;            // for an fp8 format: f32 (fp8 is not a tensor dtype), see format
  std::string_view format;  // the name shown: "f16", "e4m3"
  int total_bits = 0, exponent_bits = 0, mantissa_bits = 0;
  bool fp8 = false;
  double saturated = 0;   // fp8 only: the value a saturating cast keeps (TransformerEngine's, CUDA's SATFINITE)
  double input;   // the value asked for (as the nearest binary64)
  double stored;  // what the dtype holds: the input rounded to nearest, ties to even
  std::uint64_t bits;
  FpClass cls;
  bool exact;           // stored == input
  bool sign;            // the sign bit
  std::uint64_t exponent_field;
  std::uint64_t mantissa_field;
  int exponent;         // unbiased; emin for subnormals and zero; NaN/Inf: emax + 1
  double abs_error;     // stored - input (exact: both are doubles within a factor 2, or 0)
  double rel_error;     // |stored - input| / |input|; 0 for a zero input; NaN if undefined
  double ulp;           // spacing of the dtype's values at |input|; NaN for NaN/Inf inputs

  std::string bit_string() const;  // "0 11110 1111111111": sign, exponent, mantissa
  std::string hex() const;         // "0x7bff"
};

FpValue inspect_value(double x, DType dtype);
// x in an fp8 format: `stored` is the cast that does not saturate (ml_dtypes', PyTorch's
// .to(float8)), `saturated` the one that does.
FpValue inspect_fp8(double x, Fp8Format format);
// The same for bits computed elsewhere (on a GPU, say): `bits` must be what `input`
// became in `dtype`.
FpValue describe_stored(double input, std::uint64_t bits, DType dtype);

// The shortest decimal that reads back to exactly `bits` in `dtype` (what numpy and
// PyTorch print for the value), e.g. "0.1" for the fp16 nearest to 0.1.
std::string shortest_decimal(std::uint64_t bits, DType dtype);
// The same for v's format (fp8 included).
std::string shortest_decimal(const FpValue& v);

// The exact decimal value of a stored value, trimmed: f16 0.1 -> "0.0999755859375".
// Values whose exact expansion passes `max_digits` significant digits come back rounded
// to that many, with a leading "~".
std::string exact_decimal(double stored, int max_digits = 40);

}  // namespace ampcheck
