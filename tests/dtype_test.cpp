// Names and limits of the dtypes, against std::numeric_limits (f32, f64) and the values
// published for binary16 (IEEE 754-2019 table 3.5) and bfloat16 (the Brain float format:
// binary32's exponent, 7 fraction bits).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/dtype/dtype.h"

namespace ampcheck {
namespace {

TEST(DType, EveryUserSpellingParses) {
  for (const char* s : {"f16", "fp16", "float16", "half", "FP16", "torch.float16", "paddle.float16"})
    EXPECT_EQ(parse_dtype(s), DType::f16) << s;
  for (const char* s : {"bf16", "bfloat16", "BF16", "torch.bfloat16"})
    EXPECT_EQ(parse_dtype(s), DType::bf16) << s;
  for (const char* s : {"f32", "fp32", "float32", "float", "np.float32"})
    EXPECT_EQ(parse_dtype(s), DType::f32) << s;
  for (const char* s : {"f64", "fp64", "float64", "double"})
    EXPECT_EQ(parse_dtype(s), DType::f64) << s;
}

TEST(DType, UnknownNameSuggestsTheClosest) {
  try {
    parse_dtype("flaot16");
    FAIL() << "expected DTypeError";
  } catch (const DTypeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown dtype \"flaot16\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("did you mean \"float16\"?"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bfloat16"), std::string::npos) << "lists the accepted names: " << msg;
  }
  EXPECT_FALSE(try_parse_dtype("int8"));
  EXPECT_FALSE(try_parse_dtype(""));
}

template <typename T>
void expect_matches_numeric_limits(DType d) {
  const DTypeInfo& i = info(d);
  using L = std::numeric_limits<T>;
  EXPECT_EQ(i.bits, static_cast<int>(8 * sizeof(T)));
  EXPECT_EQ(i.digits(), L::digits);
  EXPECT_EQ(i.digits10(), L::digits10);
  EXPECT_EQ(i.max_digits10(), L::max_digits10);
  EXPECT_EQ(i.max(), static_cast<double>(L::max()));
  EXPECT_EQ(i.min_normal(), static_cast<double>(L::min()));
  EXPECT_EQ(i.min_subnormal(), static_cast<double>(L::denorm_min()));
  EXPECT_EQ(i.epsilon(), static_cast<double>(L::epsilon()));
  EXPECT_EQ(i.max_exponent(), L::max_exponent - 1);  // C counts 1 <= m < 2 differently
  EXPECT_EQ(i.min_exponent(), L::min_exponent - 1);
}

TEST(DType, F32AndF64LimitsMatchTheCompiler) {
  expect_matches_numeric_limits<float>(DType::f32);
  expect_matches_numeric_limits<double>(DType::f64);
}

TEST(DType, F16LimitsAreIeeeBinary16) {
  const DTypeInfo& i = info(DType::f16);
  EXPECT_EQ(i.exponent_bits, 5);
  EXPECT_EQ(i.mantissa_bits, 10);
  EXPECT_EQ(i.digits(), 11);
  EXPECT_EQ(i.max_exponent(), 15);
  EXPECT_EQ(i.min_exponent(), -14);
  EXPECT_EQ(i.max(), 65504.0);
  EXPECT_EQ(i.min_normal(), 6.103515625e-05);
  EXPECT_EQ(i.min_subnormal(), 5.9604644775390625e-08);
  EXPECT_EQ(i.epsilon(), 0.0009765625);
  EXPECT_EQ(i.digits10(), 3);
  EXPECT_EQ(i.max_digits10(), 5);
}

TEST(DType, Bf16LimitsAreBrainFloat) {
  const DTypeInfo& i = info(DType::bf16);
  EXPECT_EQ(i.exponent_bits, 8);
  EXPECT_EQ(i.mantissa_bits, 7);
  EXPECT_EQ(i.max_exponent(), 127);
  EXPECT_EQ(i.min_exponent(), -126);
  EXPECT_EQ(i.max(), 3.38953138925153547590470800371487866880e+38);
  EXPECT_EQ(i.min_normal(), static_cast<double>(std::numeric_limits<float>::min()));
  EXPECT_EQ(i.min_subnormal(), 9.18354961579912115600575419704879435795832466228193376178712270530013483949005603790283203125e-41);
  EXPECT_EQ(i.epsilon(), 0.0078125);
  EXPECT_EQ(i.digits10(), 2);
}

}  // namespace
}  // namespace ampcheck
