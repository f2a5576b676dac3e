// The two fp8 formats, by name (kernels/fp_bits.h defines their casts; E4M3 is the "fn"
// variant: finite, no Inf). Its own header so that naming a format does not touch the
// header every kernel includes.
#pragma once

#include <cstdint>

namespace ampcheck::kernels {

enum class Fp8Format : std::uint8_t { e4m3, e5m2 };

// One MXFP8 block (OCP MX, TransformerEngine's MXFP8BlockScaling): kMxBlock consecutive
// values of a row share an E8M0 scale (the row's last block may be shorter).
inline constexpr std::int64_t kMxBlock = 32;

}  // namespace ampcheck::kernels
