// Counter-based random numbers (Philox4x32-10, as cuRAND and PyTorch's CUDA generator
// use): value i of a draw depends only on (seed, offset + i), never on which thread
// computed it or in what order, so results are the same for any thread count. The
// arithmetic is kernels/random.h, which the CUDA kernels share (a GPU's dropout mask is
// the CPU's, bit for bit).
#pragma once

#include <array>
#include <cstdint>

namespace ampcheck {

// Philox4x32 with 10 rounds: four 32-bit outputs from a 128-bit counter and a 64-bit key.
std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter,
                                        std::array<std::uint32_t, 2> key);

class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : seed_(seed) {}
  std::uint64_t seed() const { return seed_; }
  std::uint64_t offset() const { return offset_; }
  // Reserves n consecutive counters and returns the first: a draw of n values uses
  // counters [first, first + n).
  std::uint64_t advance(std::uint64_t n) {
    const std::uint64_t first = offset_;
    offset_ += n;
    return first;
  }
  void set_state(std::uint64_t seed, std::uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }

 private:
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};

// The i-th value of a stream: uniform in [0, 1) with 24 random bits (exact in f32), and
// a standard normal (Box-Muller over two uniforms of the same counter).
float uniform01(std::uint64_t seed, std::uint64_t index);
double normal01(std::uint64_t seed, std::uint64_t index);

}  // namespace ampcheck
