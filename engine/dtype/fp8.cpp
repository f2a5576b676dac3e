#include "engine/dtype/fp8.h"

#include <array>
#include <cctype>
#include <cmath>
#include <string>

namespace ampcheck {
namespace {

constexpr std::array<Fp8Info, 2> kFp8 = {{
    {Fp8Format::e4m3, "e4m3", "float8_e4m3fn", 4, 3, 7, false},
    {Fp8Format::e5m2, "e5m2", "float8_e5m2", 5, 2, 15, true},
}};

}  // namespace

double Fp8Info::max() const { return decode_fp8(format == Fp8Format::e4m3 ? 0x7e : 0x7b, format); }
double Fp8Info::min_normal() const { return std::ldexp(1.0, 1 - bias); }
double Fp8Info::min_subnormal() const { return std::ldexp(1.0, 1 - bias - mantissa_bits); }

const Fp8Info& info(Fp8Format format) { return kFp8[static_cast<std::size_t>(format)]; }

std::optional<Fp8Format> try_parse_fp8(std::string_view text) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const std::string_view prefix : {"torch.", "paddle.", "ml_dtypes.", "np."})
    if (t.rfind(prefix, 0) == 0) t = t.substr(prefix.size());
  for (const std::string_view prefix : {"float8_", "fp8_", "fp8"})
    if (t.rfind(prefix, 0) == 0) {
      t = t.substr(prefix.size());
      break;
    }
  if (t == "e4m3" || t == "e4m3fn") return Fp8Format::e4m3;
  if (t == "e5m2") return Fp8Format::e5m2;
  return std::nullopt;
}

std::uint8_t encode_fp8(double x, Fp8Format format, kernels::Fp8Overflow overflow) {
  const std::uint64_t b = kernels::bits_of(x);
  return format == Fp8Format::e4m3 ? kernels::f64_to_fp8_bits<4>(b, overflow) : kernels::f64_to_fp8_bits<5>(b, overflow);
}

double decode_fp8(std::uint8_t bits, Fp8Format format) {
  const std::uint32_t f = format == Fp8Format::e4m3 ? kernels::e4m3_bits_to_f32_bits(bits)
                                                    : kernels::e5m2_bits_to_f32_bits(bits);
  return static_cast<double>(kernels::float_of(f));
}

}  // namespace ampcheck
