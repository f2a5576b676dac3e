// The casts an fp8 Linear makes before its GEMM, as TransformerEngine makes them, and what
// the inspector counts of them:
//
//   quantize:    code[i] = fp8(x[i] * scale), the product rounded once in binary32, then
//                cast to the format saturating (CUDA's __NV_SATFINITE, TE's casts: beyond
//                max and +-Inf become +-max, NaN stays NaN); returns amax = max |x[i]|
//                over the non-NaN elements (TE's fmaxf reduction passes NaN over, keeps
//                Inf), which the delayed-scaling recipe records (engine/amp/fp8_recipe.h).
//   cast_stats:  for the same cast, how its values land in the format (Fp8CastStats): the
//                share that saturates, the share that flushes to zero, and the binade of
//                each value that does neither.
//
// x is f32, f16 or bf16 (widened exactly first), contiguous, on the device of the codes.
// Both are elementwise with integer counts and a max, so the result is the same bits on
// the CPU and the GPU and for any thread count.
//
// MXFP8 (TransformerEngine's MXFP8BlockScaling): quantize_mx and cast_stats_mx do the same
// with one scale per block of kMxBlock consecutive values of each row of x, seen as
// [numel / cols, cols]: the block's E8M0 scale from its own amax (fp_bits.h,
// e8m0_scale_bits), its elements times the scale's exact reciprocal. They run on the CPU;
// ampcheck's GPU backend has Hopper's per-tensor fp8 GEMMs, not Blackwell's block-scaled
// ones, and its CUDA table refuses them saying so.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "kernels/fp8_format.h"
#include "kernels/fp_bits.h"
#include "kernels/view.h"

namespace ampcheck::kernels {

// The binades of fp8's finite nonzero values: 2^-9 (E4M3's smallest subnormal) .. 2^8
// (448's), 2^-16 .. 2^15 for E5M2.
AMPCHECK_HD constexpr int fp8_min_exponent(Fp8Format f) { return f == Fp8Format::e4m3 ? -9 : -16; }
AMPCHECK_HD constexpr int fp8_max_exponent(Fp8Format f) { return f == Fp8Format::e4m3 ? 8 : 15; }
inline constexpr int kFp8Binades = 32;  // E5M2's -16..15; E4M3 uses the first 18

struct Fp8CastStats {
  std::int64_t count = 0;
  std::int64_t nan = 0;        // NaN in x: NaN codes
  std::int64_t inf = 0;        // +-Inf in x: +-max codes (saturated, counted here, not below)
  std::int64_t zero = 0;       // x == 0
  std::int64_t saturated = 0;  // finite x whose x * scale lies beyond what rounds to max (a
                               // non-saturating cast would give Inf or NaN): clamped to +-max
  std::int64_t flushed = 0;    // nonzero finite x whose x * scale rounds to +-0
  // The rest, by the binade of their code's magnitude: binade[e - fp8_min_exponent] counts
  // codes in [2^e, 2^(e+1)) (subnormals in their own binades).
  std::array<std::int64_t, kFp8Binades> binade{};
  float amax = 0;  // max |x| over the non-NaN elements

  std::int64_t representable() const { return count - nan - inf - zero - saturated - flushed; }
  // The statistics of both sets of values together (counts added, the larger amax).
  void merge(const Fp8CastStats& o) {
    count += o.count;
    nan += o.nan;
    inf += o.inf;
    zero += o.zero;
    saturated += o.saturated;
    flushed += o.flushed;
    for (std::size_t k = 0; k < binade.size(); ++k) binade[k] += o.binade[k];
    amax = amax < o.amax ? o.amax : amax;
  }
};

// TransformerEngine's compute_scale_from_amax (transformer_engine/common/recipe/
// recipe_common.cuh), the scale current scaling casts a tensor with, from its own amax: an
// amax below epsilon is raised to it; a zero or infinite amax gives 1; max_fp8 / amax
// rounded once (TE's __fdiv_rn), FLT_MAX where that overflows, 1 where it is NaN; with
// power-of-2 scales the mantissa bits cleared (rounded down). One definition for the host
// (amp::current_scale, fp8_linear) and the device.
AMPCHECK_HD float fp8_scale_from_amax(float amax, float max_fp8, bool power_2_scales, float epsilon) {
  if (amax < epsilon) amax = epsilon;  // a NaN compares false: kept
  const std::uint32_t ba = bits_of(amax) & 0x7fffffffu;
  if (ba == 0x7f800000u || ba == 0) return 1.0f;
  float scale = max_fp8 / amax;
  const std::uint32_t bs = bits_of(scale) & 0x7fffffffu;
  if (bs == 0x7f800000u) scale = 3.40282346638528859812e+38f;  // FLT_MAX
  if (bs > 0x7f800000u) return 1.0f;                           // NaN
  if (power_2_scales) scale = float_of(bits_of(scale) & 0xFF800000u);
  return scale;
}

// One element's part of Fp8CastStats (the CPU and the GPU both count with it).
AMPCHECK_HD void fp8_cast_count(float x, float scale, Fp8Format format, std::int64_t& nan, std::int64_t& inf,
                                std::int64_t& zero, std::int64_t& saturated, std::int64_t& flushed, int& binade) {
  binade = -1;
  const std::uint32_t bx = bits_of(x) & 0x7fffffffu;
  if (bx > 0x7f800000u) {
    ++nan;
    return;
  }
  if (bx == 0x7f800000u) {
    ++inf;
    return;
  }
  if (bx == 0) {
    ++zero;
    return;
  }
  const float y = x * scale;  // rounded once in binary32, as the cast sees it
  const std::uint32_t by = bits_of(y);
  const std::uint8_t code = format == Fp8Format::e4m3 ? f32_to_e4m3_bits(by, Fp8Overflow::to_nonfinite)
                                                      : f32_to_e5m2_bits(by, Fp8Overflow::to_nonfinite);
  const std::uint32_t wide =
      (format == Fp8Format::e4m3 ? e4m3_bits_to_f32_bits(code) : e5m2_bits_to_f32_bits(code)) & 0x7fffffffu;
  if (wide >= 0x7f800000u) {  // beyond max (or a scale that made y non-finite)
    ++saturated;
    return;
  }
  if (wide == 0) {
    ++flushed;
    return;
  }
  // The binade of the widened code: its binary32 exponent (fp8's subnormals are binary32
  // normals).
  binade = static_cast<int>(wide >> 23) - 127 - fp8_min_exponent(format);
}

struct Fp8QuantizeDesc {
  const char* op = "fp8_quantize";  // named by every error message
  View x;                            // f32, f16 or bf16
  std::uint8_t* codes = nullptr;     // x.numel() bytes on x's device
  Fp8Format format = Fp8Format::e4m3;
  float scale = 1.0f;
};

// Why the GPU refuses block scaling, after the op's name.
inline constexpr const char* kMxfp8CpuOnly =
    "MXFP8 block scaling runs on the CPU (--device cpu): ampcheck's GPU backend runs Hopper's per-tensor fp8 GEMMs, "
    "not Blackwell's block-scaled ones";

struct Fp8MxQuantizeDesc {
  const char* op = "fp8_quantize_mx";  // named by every error message
  View x;                               // f32, f16 or bf16, [numel / cols, cols]
  std::int64_t cols = 0;                // the length of a row (> 0, divides numel)
  // Blocks down x's columns instead (the columnwise copy TE makes for a GEMM that contracts
  // x's rows): the codes are then x's transpose, [cols, rows], and the scales
  // [cols, ceil(rows / kMxBlock)].
  bool columnwise = false;
  std::uint8_t* codes = nullptr;        // x.numel() bytes
  std::uint8_t* scales = nullptr;       // rows * ceil(cols / kMxBlock) E8M0 codes, row by row
  Fp8Format format = Fp8Format::e4m3;
};

struct Fp8Kernels {
  float (*quantize)(const Fp8QuantizeDesc& desc);  // returns the amax
  Fp8CastStats (*cast_stats)(const View& x, float scale, Fp8Format format);
  float (*quantize_mx)(const Fp8MxQuantizeDesc& desc);  // returns the amax of the whole of x
  Fp8CastStats (*cast_stats_mx)(const View& x, std::int64_t cols, Fp8Format format);

  static const Fp8Kernels& cpu();
  static const Fp8Kernels& cuda();
};

}  // namespace ampcheck::kernels
