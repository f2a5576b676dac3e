// An independent reference for rounding into binary16 and bfloat16, written from the
// IEEE 754 definition and sharing no code with kernels/fp_bits.h:
//   - every finite non-negative bit pattern's value is built from the formula
//     2^(e - bias) * (1 + f / 2^M) (normals) or 2^emin * f / 2^M (subnormals);
//   - a real x rounds to the nearer of the two representable values around it, a tie to
//     the one with an even significand (an even bit pattern), and anything at or past the
//     midpoint between max and 2^(emax+1) overflows to Inf (IEEE 754-2019, 4.3.1 and 7.4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ampcheck::test {

class RefFormat {
 public:
  RefFormat(int exponent_bits, int mantissa_bits);

  // Exact value of a bit pattern (NaN patterns give a NaN double).
  double decode(std::uint32_t bits) const;
  // The bit pattern x rounds to. `hint` speeds up a walk over increasing |x|: pass the
  // same variable on every call of a monotone sweep.
  std::uint32_t encode(double x, std::size_t& hint) const;
  std::uint32_t encode(double x) const {
    std::size_t hint = 0;
    return encode(x, hint);
  }

  int exponent_bits() const { return exponent_bits_; }
  int mantissa_bits() const { return mantissa_bits_; }
  std::uint32_t sign_bit() const { return 1u << (exponent_bits_ + mantissa_bits_); }
  std::uint32_t inf_bits() const { return inf_bits_; }
  std::uint32_t quiet_bit() const { return 1u << (mantissa_bits_ - 1); }

 private:
  std::uint32_t round_magnitude(double ax, std::size_t& hint) const;

  int exponent_bits_;
  int mantissa_bits_;
  std::uint32_t inf_bits_;     // also the count of finite non-negative patterns
  std::vector<double> values_; // values_[p] for every finite p >= 0, plus 2^(emax+1)
};

const RefFormat& ref_f16();
const RefFormat& ref_bf16();

}  // namespace ampcheck::test
