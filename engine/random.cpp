// The engine's face of the counter-based generator: the arithmetic is kernels/random.h,
// shared with the CUDA kernels so both devices draw the same values.
#include "engine/random.h"

#include "kernels/random.h"

namespace ampcheck {

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter,
                                        std::array<std::uint32_t, 2> key) {
  const kernels::Philox4 r =
      kernels::philox4x32_10(kernels::Philox4{{counter[0], counter[1], counter[2], counter[3]}}, key[0], key[1]);
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}

float uniform01(std::uint64_t seed, std::uint64_t index) { return kernels::uniform01(seed, index); }

double normal01(std::uint64_t seed, std::uint64_t index) { return kernels::normal01(seed, index); }

}  // namespace ampcheck
