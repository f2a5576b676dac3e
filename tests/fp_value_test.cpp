// inspect_value: stored values, classes, errors and ulps, with expectations computed
// from powers of two and the rounding rule, not from the code under test.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/dtype/fp_value.h"

namespace ampcheck {
namespace {

const double k2m24 = std::ldexp(1.0, -24);  // smallest f16 subnormal

TEST(FpValue, TheFp16EdgeValues) {
  struct Case { double x; double stored; FpClass cls; const char* bits; double ulp; };
  const Case cases[] = {
      {65504, 65504, FpClass::normal, "0 11110 1111111111", 32},
      {65519, 65504, FpClass::normal, "0 11110 1111111111", 32},   // below 65520: rounds down
      {65520, HUGE_VAL, FpClass::overflow, "0 11111 0000000000", 32},  // the tie goes to Inf
      {6e-8, k2m24, FpClass::subnormal, "0 00000 0000000001", k2m24},
      {3e-8, k2m24, FpClass::subnormal, "0 00000 0000000001", k2m24},  // > 2^-25: up
      {1e-8, 0.0, FpClass::underflow, "0 00000 0000000000", k2m24},
      {-0.0, -0.0, FpClass::zero, "1 00000 0000000000", k2m24},
      {HUGE_VAL, HUGE_VAL, FpClass::infinity, "0 11111 0000000000", NAN},
  };
  for (const Case& c : cases) {
    const FpValue v = inspect_value(c.x, DType::f16);
    EXPECT_EQ(v.stored, c.stored) << c.x;
    EXPECT_EQ(std::signbit(v.stored), std::signbit(c.x)) << c.x;
    EXPECT_EQ(v.cls, c.cls) << c.x << ": " << class_name(v.cls);
    EXPECT_EQ(v.bit_string(), c.bits) << c.x;
    if (std::isnan(c.ulp)) {
      EXPECT_TRUE(std::isnan(v.ulp));
    } else {
      EXPECT_EQ(v.ulp, c.ulp) << c.x;
    }
    if (std::isfinite(c.stored)) {
      EXPECT_EQ(v.abs_error, c.stored - c.x) << c.x;
      if (c.x != 0) {
        EXPECT_DOUBLE_EQ(v.rel_error, std::fabs(c.stored - c.x) / std::fabs(c.x));
      }
    }
  }
  const FpValue nan = inspect_value(std::nan(""), DType::f16);
  EXPECT_EQ(nan.cls, FpClass::nan);
  EXPECT_TRUE(std::isnan(nan.stored));
  EXPECT_EQ(nan.hex(), "0x7e00");
}

TEST(FpValue, Bf16KeepsRangeButNotDigits) {
  const FpValue v = inspect_value(70000, DType::bf16);
  // 70000 = 1.068115234375 * 2^16; 7 fraction bits: spacing 2^9 = 512; 70000/512 = 136.71875
  EXPECT_EQ(v.stored, 137 * 512.0);
  EXPECT_EQ(v.ulp, 512);
  EXPECT_EQ(v.cls, FpClass::normal);
  EXPECT_EQ(v.exponent, 16);
  EXPECT_EQ(v.bit_string(), "0 10001111 0001001");
  EXPECT_EQ(inspect_value(70000, DType::f16).cls, FpClass::overflow);
  EXPECT_EQ(inspect_value(1e-40, DType::bf16).cls, FpClass::subnormal);
  EXPECT_EQ(inspect_value(1e-41, DType::bf16).cls, FpClass::underflow);  // < 2^-134
}

TEST(FpValue, DecimalForms) {
  const FpValue v = inspect_value(0.1, DType::f16);
  // 0x2e66: 2^-4 * (1 + 614/1024) = 1638 / 16384
  EXPECT_EQ(v.stored, 1638.0 / 16384.0);
  EXPECT_EQ(exact_decimal(v.stored), "0.0999755859375");
  EXPECT_EQ(shortest_decimal(v.bits, DType::f16), "0.1");
  EXPECT_EQ(exact_decimal(k2m24), "5.9604644775390625e-08");
  EXPECT_EQ(exact_decimal(65504), "65504");
  EXPECT_EQ(exact_decimal(std::ldexp(1.0, -149)).substr(0, 1), "~");  // 105 digits: rounded
  EXPECT_EQ(shortest_decimal(inspect_value(65519, DType::f16).bits, DType::f16), "6.55e+04");
}

TEST(FpValue, F32AndF64) {
  const FpValue f = inspect_value(0.1, DType::f32);
  EXPECT_EQ(f.stored, static_cast<double>(0.1f));
  EXPECT_EQ(f.hex(), "0x3dcccccd");
  EXPECT_EQ(f.ulp, std::ldexp(1.0, -4 - 23));
  const FpValue d = inspect_value(0.1, DType::f64);
  EXPECT_TRUE(d.exact);
  EXPECT_EQ(d.abs_error, 0);
  EXPECT_EQ(d.hex(), "0x3fb999999999999a");
}

}  // namespace
}  // namespace ampcheck
