#include "engine/random.h"

#include <cmath>

namespace ampcheck {

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> c,
                                        std::array<std::uint32_t, 2> k) {
  // Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11), Philox4x32-10.
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

namespace {
std::array<std::uint32_t, 4> draw(std::uint64_t seed, std::uint64_t index) {
  return philox4x32({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u, 0u},
                    {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}
}  // namespace

float uniform01(std::uint64_t seed, std::uint64_t index) {
  return static_cast<float>(draw(seed, index)[0] >> 8) * 0x1p-24f;
}

double normal01(std::uint64_t seed, std::uint64_t index) {
  const auto r = draw(seed, index);
  const double u1 = (static_cast<double>(r[0]) + 1.0) * 0x1p-32;  // (0, 1]: log is finite
  const double u2 = static_cast<double>(r[1]) * 0x1p-32;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace ampcheck
