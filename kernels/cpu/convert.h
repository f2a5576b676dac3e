// Buffer conversions f32 <-> f16 and f32 <-> bf16 on the CPU: a scalar path and vector
// paths (AVX2+F16C, AVX-512, AVX-512-BF16), bit-identical to the scalar definition in
// kernels/fp_bits.h on every input.
#pragma once

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint16_t
#include <optional>
#include <string_view>

#include "kernels/dtype.h"

namespace ampcheck::kernels::cpu {

// The instruction-set paths, slowest first. Each later path needs the CPU features of
// the ones before it (AVX-512-BF16 needs AVX-512F/BW, which imply AVX2/F16C here).
enum class Isa : int { scalar, f16c, avx512, avx512_bf16 };
inline constexpr int kIsaCount = 4;

std::string_view isa_name(Isa isa);
std::optional<Isa> isa_from_name(std::string_view name);
bool isa_supported(Isa isa);  // does this CPU run it
Isa best_isa();               // the fastest supported path

void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n, Isa isa);
void f16_to_f32(const std::uint16_t* src, float* dst, std::size_t n, Isa isa);
void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n, Isa isa);
void bf16_to_f32(const std::uint16_t* src, float* dst, std::size_t n, Isa isa);

// The path the CPU kernels use: the best this CPU runs, or the one named by the
// environment variable AMPCHECK_CPU_ISA (scalar, f16c, avx512, avx512_bf16), which
// throws std::invalid_argument when the name is unknown or this CPU lacks it. Read once.
Isa active_isa();

// n elements from src (of dtype `from`) into dst (of dtype `to`) on the active path.
// Every pair of float dtypes converts; f16 <-> bf16 goes through exact f32, so each
// element is rounded once. i64 on either side throws std::invalid_argument.
void convert(const void* src, DType from, void* dst, DType to, std::size_t n);

}  // namespace ampcheck::kernels::cpu
