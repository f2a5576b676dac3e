#include "engine/dtype/fp_value.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <limits>

#include "engine/dtype/convert.h"

namespace ampcheck {
namespace {

std::string format_g(double v, int precision) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*g", precision, v);
  return buf;
}

// What every format shares once `bits`, `stored` and the fields are set: the class, the
// error and the ulp. `has_inf`: a value beyond max is stored as Inf (else NaN: fp8 E4M3).
void classify(FpValue& v, double x, int emin, int emax, bool has_inf) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (std::isnan(x)) {
    v.cls = FpClass::nan;
  } else if (std::isinf(x)) {
    v.cls = has_inf ? FpClass::infinity : FpClass::infinity_nan;
  } else if (!std::isfinite(v.stored)) {
    v.cls = has_inf ? FpClass::overflow : FpClass::overflow_nan;
  } else if (v.stored == 0.0) {
    v.cls = x == 0.0 ? FpClass::zero : FpClass::underflow;
  } else {
    v.cls = v.exponent_field == 0 ? FpClass::subnormal : FpClass::normal;
  }
  v.exact = v.stored == x || (std::isnan(x) && std::isnan(v.stored));
  if (std::isfinite(x)) {
    v.abs_error = v.stored - x;  // inf for an overflow
    v.rel_error = x == 0.0 ? 0.0 : std::fabs(v.abs_error) / std::fabs(x);
    // Spacing at |x|: 2^(e - M) with e the binade of |x|, held within [emin, emax].
    int e = emin;
    if (x != 0.0) e = std::max(e, std::min(emax, std::ilogb(x)));
    v.ulp = std::ldexp(1.0, e - v.mantissa_bits);
  } else {
    v.abs_error = v.rel_error = v.ulp = nan;
  }
}

}  // namespace

std::string_view class_name(FpClass c) {
  switch (c) {
    case FpClass::zero: return "zero";
    case FpClass::subnormal: return "subnormal";
    case FpClass::normal: return "normal";
    case FpClass::infinity: return "inf";
    case FpClass::nan: return "nan";
    case FpClass::overflow: return "overflow -> inf";
    case FpClass::underflow: return "underflow -> 0";
    case FpClass::overflow_nan: return "overflow -> nan";
    case FpClass::infinity_nan: return "inf -> nan";
  }
  return "?";
}

FpValue inspect_value(double x, DType dtype) { return describe_stored(x, encode(x, dtype), dtype); }

FpValue describe_stored(double x, std::uint64_t bits, DType dtype) {
  const DTypeInfo& d = info(dtype);
  FpValue v{};
  v.dtype = dtype;
  v.format = d.name;
  v.total_bits = d.bits;
  v.exponent_bits = d.exponent_bits;
  v.mantissa_bits = d.mantissa_bits;
  v.input = x;
  v.bits = bits;
  v.stored = decode(v.bits, dtype);
  const int m = d.mantissa_bits;
  v.sign = (v.bits >> (d.bits - 1)) & 1u;
  v.exponent_field = (v.bits >> m) & ((1ull << d.exponent_bits) - 1);
  v.mantissa_field = v.bits & ((1ull << m) - 1);
  const auto max_field = (1ull << d.exponent_bits) - 1;
  v.exponent = v.exponent_field == 0           ? d.min_exponent()
               : v.exponent_field == max_field ? d.max_exponent() + 1
                                               : static_cast<int>(v.exponent_field) - d.bias();

  classify(v, x, d.min_exponent(), d.max_exponent(), true);
  return v;
}

std::string FpValue::bit_string() const {
  std::string s;
  for (int i = total_bits - 1; i >= 0; --i) {
    s += ((bits >> i) & 1u) ? '1' : '0';
    if (i == total_bits - 1 || i == mantissa_bits) s += ' ';
  }
  return s;
}

std::string FpValue::hex() const {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llx", total_bits / 4,
                static_cast<unsigned long long>(bits));
  return buf;
}

std::string shortest_decimal(std::uint64_t bits, DType dtype) {
  const double value = decode(bits, dtype);
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  for (int p = 1; p < 17; ++p) {
    const std::string s = format_g(value, p);
    if (encode(std::strtod(s.c_str(), nullptr), dtype) == bits) return s;
  }
  return format_g(value, 17);
}

FpValue inspect_fp8(double x, Fp8Format format) {
  const Fp8Info& f = info(format);
  FpValue v{};
  v.dtype = DType::f32;
  v.format = f.name;
  v.fp8 = true;
  v.total_bits = 8;
  v.exponent_bits = f.exponent_bits;
  v.mantissa_bits = f.mantissa_bits;
  v.input = x;
  v.bits = encode_fp8(x, format, kernels::Fp8Overflow::to_nonfinite);
  v.stored = decode_fp8(static_cast<std::uint8_t>(v.bits), format);
  v.saturated = decode_fp8(encode_fp8(x, format, kernels::Fp8Overflow::saturate), format);
  const int m = f.mantissa_bits;
  v.sign = (v.bits >> 7) & 1u;
  v.exponent_field = (v.bits >> m) & ((1ull << f.exponent_bits) - 1);
  v.mantissa_field = v.bits & ((1ull << m) - 1);
  const int emin = 1 - f.bias;
  const int emax = std::ilogb(f.max());
  v.exponent = v.exponent_field == 0 ? emin
               : std::isfinite(v.stored) ? static_cast<int>(v.exponent_field) - f.bias
                                         : emax + 1;
  classify(v, x, emin, emax, f.has_inf);
  return v;
}

std::string shortest_decimal(const FpValue& v) {
  if (!v.fp8) return shortest_decimal(v.bits, v.dtype);
  const auto format = *try_parse_fp8(v.format);
  if (std::isnan(v.stored)) return "nan";
  if (std::isinf(v.stored)) return v.stored < 0 ? "-inf" : "inf";
  for (int p = 1; p < 17; ++p) {
    const std::string s = format_g(v.stored, p);
    if (encode_fp8(std::strtod(s.c_str(), nullptr), format, kernels::Fp8Overflow::to_nonfinite) == v.bits) return s;
  }
  return format_g(v.stored, 17);
}

std::string exact_decimal(double stored, int max_digits) {
  if (!std::isfinite(stored)) return format_g(stored, 1);
  // glibc prints the exact binary value when asked for enough digits; a binary64 has at
  // most 767 significant decimal digits.
  std::string exact = format_g(stored, 800);
  std::string digits;
  for (char c : exact) {
    if (c == 'e' || c == 'E') break;
    if (c >= '0' && c <= '9') digits += c;
  }
  const auto first = digits.find_first_not_of('0');
  const auto last = digits.find_last_not_of('0');
  const std::size_t significant = first == std::string::npos ? 1 : last - first + 1;
  if (static_cast<int>(significant) <= max_digits)
    return format_g(stored, static_cast<int>(significant));
  return "~" + format_g(stored, max_digits);
}

}  // namespace ampcheck
