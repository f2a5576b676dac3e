// The fp8 formats as numbers users look at (`ampcheck fp -d e4m3,e5m2`): names, limits,
// and the casts of kernels/fp_bits.h on binary64 values. Not tensor dtypes: fp8 values
// are GEMM operands with their scales (issue 33), not storage the engine trains in.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kernels/fp8_format.h"
#include "kernels/fp_bits.h"  // Fp8Overflow

namespace ampcheck {

using kernels::Fp8Format;

struct Fp8Info {
  Fp8Format format;
  std::string_view name;       // "e4m3"
  std::string_view long_name;  // what PyTorch and ml_dtypes call it: "float8_e4m3fn"
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool has_inf;  // E5M2; E4M3 (fn) has none: too large is NaN, or max when saturating
  double max() const;
  double min_normal() const;
  double min_subnormal() const;
};

const Fp8Info& info(Fp8Format format);
// e4m3, e4m3fn, fp8_e4m3, float8_e4m3fn, torch.float8_e4m3fn; the same for e5m2.
std::optional<Fp8Format> try_parse_fp8(std::string_view text);

// x cast to the format (one rounding, to nearest even) and its value back.
std::uint8_t encode_fp8(double x, Fp8Format format, kernels::Fp8Overflow overflow);
double decode_fp8(std::uint8_t bits, Fp8Format format);

}  // namespace ampcheck
