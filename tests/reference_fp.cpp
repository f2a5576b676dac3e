#include "tests/reference_fp.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace ampcheck::test {

RefFormat::RefFormat(int exponent_bits, int mantissa_bits)
    : exponent_bits_(exponent_bits),
      mantissa_bits_(mantissa_bits),
      inf_bits_(((1u << exponent_bits) - 1u) << mantissa_bits) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int emin = 1 - bias;
  const double scale = std::ldexp(1.0, mantissa_bits);
  values_.reserve(inf_bits_ + 1);
  for (std::uint32_t p = 0; p < inf_bits_; ++p) {
    const int e = static_cast<int>(p >> mantissa_bits);
    const double f = static_cast<double>(p & ((1u << mantissa_bits) - 1u));
    values_.push_back(e == 0 ? std::ldexp(f / scale, emin)
                             : std::ldexp(1.0 + f / scale, e - bias));
  }
  // The value the next pattern would have with an unbounded exponent: 2^(emax+1). Its
  // pattern, inf_bits_, is even, so a tie between max and it goes to Inf, as IEEE says.
  values_.push_back(std::ldexp(1.0, bias + 1));
  for (std::size_t i = 1; i < values_.size(); ++i)
    if (!(values_[i - 1] < values_[i]))
      throw std::logic_error("reference: format values are not increasing");
}

double RefFormat::decode(std::uint32_t bits) const {
  const double sign = (bits & sign_bit()) ? -1.0 : 1.0;
  const std::uint32_t mag = bits & (sign_bit() - 1u);
  if (mag == inf_bits_) return sign * HUGE_VAL;
  if (mag > inf_bits_) return std::nan("");
  return sign * values_[mag];
}

std::uint32_t RefFormat::round_magnitude(double ax, std::size_t& hint) const {
  const std::size_t n = inf_bits_;  // values_[n] is 2^(emax+1)
  if (ax >= values_[n]) return inf_bits_;
  // Find i with values_[i] <= ax < values_[i+1].
  std::size_t i = hint;
  if (i >= n || values_[i] > ax || values_[i + 1] <= ax) {
    if (i + 1 < n && values_[i + 1] <= ax && values_[i + 2] > ax) {
      i = i + 1;
    } else {
      i = static_cast<std::size_t>(std::upper_bound(values_.begin(), values_.end(), ax) -
                                   values_.begin()) - 1;
    }
  }
  hint = i;
  if (values_[i] == ax) return static_cast<std::uint32_t>(i);
  // Exact midpoint comparison: 2*ax and the sum of two neighbours are exact doubles.
  const double twice = 2.0 * ax;
  const double mid2 = values_[i] + values_[i + 1];
  std::size_t r;
  if (twice < mid2) r = i;
  else if (twice > mid2) r = i + 1;
  else r = (i % 2 == 0) ? i : i + 1;
  return static_cast<std::uint32_t>(r);  // r == n is Inf
}

std::uint32_t RefFormat::encode(double x, std::size_t& hint) const {
  const std::uint32_t sign = std::signbit(x) ? sign_bit() : 0u;
  if (std::isnan(x)) {
    // Policy (IEEE 754 6.2.3 recommends it): keep the sign and the leading payload bits,
    // set the quiet bit.
    std::uint64_t raw;
    static_assert(sizeof raw == sizeof x);
    __builtin_memcpy(&raw, &x, sizeof raw);
    const auto payload =
        static_cast<std::uint32_t>((raw >> (52 - mantissa_bits_)) & ((1u << mantissa_bits_) - 1u));
    return sign | inf_bits_ | quiet_bit() | payload;
  }
  if (std::isinf(x)) return sign | inf_bits_;
  return sign | round_magnitude(std::fabs(x), hint);
}

const RefFormat& ref_f16() {
  static const RefFormat f(5, 10);
  return f;
}
const RefFormat& ref_bf16() {
  static const RefFormat f(8, 7);
  return f;
}

}  // namespace ampcheck::test
