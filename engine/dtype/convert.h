// Conversions between the float dtypes: one value at a time (exact decode, one
// round-to-nearest-even encode) and whole buffers (vectorised where the CPU allows).
#pragma once

#include <cstddef>
#include <cstdint>

#include <vector>

#include "engine/device.h"
#include "engine/dtype/dtype.h"
#include "kernels/cpu/convert.h"

namespace ampcheck {

// The bit pattern of x rounded to `to` (a single rounding straight from binary64).
std::uint64_t encode(double x, DType to);
// The exact value of a bit pattern of `from` (every f32/f16/bf16 value is a double).
double decode(std::uint64_t bits, DType from);
inline double round_to(double x, DType to) { return decode(encode(x, to), to); }

// encode() of every value, computed on `device` (the GPU runs the same definitions).
std::vector<std::uint64_t> encode_all(const std::vector<double>& values, DType to, Device device);

// n elements from src (of dtype `from`) into dst (of dtype `to`). Every pair is
// supported; f16 <-> bf16 goes through exact f32, so each element is rounded once.
using kernels::cpu::convert;

// The CPU path buffer conversions use: the best this CPU runs, or the one named by the
// environment variable AMPCHECK_CPU_ISA (scalar, f16c, avx512, avx512_bf16), which
// throws std::invalid_argument when the name is unknown or this CPU lacks it.
inline kernels::cpu::Isa conversion_isa() { return kernels::cpu::active_isa(); }
std::string_view conversion_isa_name();

}  // namespace ampcheck
