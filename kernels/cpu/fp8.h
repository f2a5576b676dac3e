// Buffer casts between binary32 and the fp8 formats on the CPU, and the casts
// TransformerEngine makes of a tensor before an fp8 GEMM:
//   - f32_to_fp8 / fp8_to_f32: kernels/fp_bits.h's definitions (one rounding to nearest,
//     ties to even; both overflow rules), a scalar path and an AVX2 path that are
//     bit-identical on every binary32 input (tests/fp8_convert_test.cpp checks all 2^32);
//   - quantize_fp8: TE's cast of a tensor with its scale, x * scale rounded once in
//     binary32 and then cast to fp8, with the amax of x (max |x| over the elements; a NaN
//     element does not enter it, as TE's fmaxf reduction does not take it);
//   - dequantize_fp8: fp8 code * scale_inv in binary32 (exact products but for a scale_inv
//     that is not a power of two).
// The paths are convert.h's Isa: scalar, and AVX2 for f16c and above.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/convert.h"  // Isa
#include "kernels/fp8_format.h"   // Fp8Format
#include "kernels/fp_bits.h"      // Fp8Overflow

namespace ampcheck::kernels::cpu {

void f32_to_fp8(const float* src, std::uint8_t* dst, std::size_t n, Fp8Format format, Fp8Overflow overflow, Isa isa);
void fp8_to_f32(const std::uint8_t* src, float* dst, std::size_t n, Fp8Format format, Isa isa);

// dst[i] = fp8(src[i] * scale); returns max |src[i]| over the non-NaN elements (0 for none).
float quantize_fp8(const float* src, std::uint8_t* dst, std::size_t n, float scale, Fp8Format format,
                   Fp8Overflow overflow, Isa isa);
// dst[i] = value(src[i]) * scale_inv.
void dequantize_fp8(const std::uint8_t* src, float* dst, std::size_t n, float scale_inv, Fp8Format format, Isa isa);

// An MXFP8 block's E8M0 scale from the amax of its n values (fp_bits.h's e8m0_scale_bits;
// its elements are multiplied by e8m0_multiplier of it before their cast).
std::uint8_t mx_block_code(const float* x, std::size_t n, Fp8Format format);
// MXFP8 (OCP MX, as TransformerEngine's MXFP8BlockScaling quantizes): a [rows, cols]
// row-major tensor in blocks of kMxBlock consecutive elements of a row (the last block of
// a row may be shorter). Each block takes the E8M0 scale of its amax (fp_bits.h,
// e8m0_scale_bits: amax times 1 / max rounded up to a power of two, as TE's kernels; a NaN
// element does not enter the amax) and its elements are x times e8m0_multiplier (the
// scale's reciprocal: exact but for results below the binary32 normals), cast saturating.
// scales holds rows * ceil(cols / kMxBlock) codes, row by row.
void quantize_mxfp8(const float* src, std::uint8_t* codes, std::uint8_t* scales, std::int64_t rows, std::int64_t cols,
                    Fp8Format format, Isa isa);
// dst = value(code) * scale of its block, in binary32.
void dequantize_mxfp8(const std::uint8_t* codes, const std::uint8_t* scales, float* dst, std::int64_t rows,
                      std::int64_t cols, Fp8Format format, Isa isa);

}  // namespace ampcheck::kernels::cpu
