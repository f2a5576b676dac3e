// Counter-based random numbers (Philox4x32-10, as cuRAND and PyTorch's CUDA generator
// use), written once for the host and (under nvcc) the device: value i of a draw depends
// only on (seed, index), never on which thread or which device computed it, so a CUDA
// kernel draws the CPU's dropout mask bit for bit. engine/random.h is the engine's face
// of it (Generator, and the same functions over std::array).
#pragma once

#include <cmath>  // std::sqrt, std::log, std::cos (normal01 on the host)
#include <cstdint>

#include "kernels/fp_bits.h"  // AMPCHECK_HD

namespace ampcheck::kernels {

// Four 32-bit words: a Philox counter, or its output.
struct Philox4 {
  std::uint32_t v[4];
};

// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11): four 32-bit outputs from a 128-bit counter and a 64-bit key. Integer
// arithmetic only, so host and device agree exactly.
AMPCHECK_HD Philox4 philox4x32_10(Philox4 c, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c.v[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// The words of value `index` of the stream `seed`: the index is the counter's low 64
// bits, the seed the key.
AMPCHECK_HD Philox4 random_draw(std::uint64_t seed, std::uint64_t index) {
  return philox4x32_10(Philox4{{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u, 0u}},
                       static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// Uniform in [0, 1) with 24 random bits: exact in f32 on both devices.
AMPCHECK_HD float uniform01(std::uint64_t seed, std::uint64_t index) {
  return static_cast<float>(random_draw(seed, index).v[0] >> 8) * 0x1p-24f;
}

// A standard normal (Box-Muller over two uniforms of the same counter). The uniforms are
// the same bits everywhere; the transcendental functions are the host's std:: ones on the
// host and CUDA's on the device, which may differ in the last bit (the engine draws its
// normals on the host: Tensor::randn).
AMPCHECK_HD double normal01(std::uint64_t seed, std::uint64_t index) {
  const Philox4 r = random_draw(seed, index);
  const double u1 = (static_cast<double>(r.v[0]) + 1.0) * 0x1p-32;  // (0, 1]: log is finite
  const double u2 = static_cast<double>(r.v[1]) * 0x1p-32;
#if defined(__CUDA_ARCH__)
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2);
#else
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
#endif
}

}  // namespace ampcheck::kernels
