// The fp8 casts of an fp8 Linear (kernels/fp8_kernels.h) against references written here:
//   - each format's values enumerated from the OCP definition ((-1)^s 2^(e-bias) (1 + m/2^M),
//     subnormals 2^(1-bias) m/2^M) and the cast as "the nearest of them, a tie to the even
//     code", with the code after max standing in for "out of range";
//   - the amax as a loop in double over the elements, NaN left out.
// Counts, binades, codes and amax on f32, f16 and bf16 inputs, on 1 and 3 threads; the
// CUDA table against the CPU where a GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <limits>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/fp8_kernels.h"
#include "kernels/fp_bits.h"

namespace ampcheck {
namespace {

using kernels::Fp8CastStats;
using kernels::Fp8Format;
using kernels::Fp8Kernels;
using kernels::View;

struct Format {
  int exp_bits, man_bits, bias;
  bool e4m3;
};
Format layout(Fp8Format f) { return f == Fp8Format::e4m3 ? Format{4, 3, 7, true} : Format{5, 2, 15, false}; }

// Magnitude of code c (0..127) of the format, or NaN/Inf for the codes that are not finite.
double code_value(Fp8Format f, int c) {
  const Format l = layout(f);
  const int e = c >> l.man_bits, m = c & ((1 << l.man_bits) - 1);
  const int top = (1 << l.exp_bits) - 1;
  if (l.e4m3 && c == 127) return std::numeric_limits<double>::quiet_NaN();
  if (!l.e4m3 && e == top) return m == 0 ? INFINITY : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return std::ldexp(m, 1 - l.bias - l.man_bits);
  return std::ldexp(1.0 + std::ldexp(m, -l.man_bits), e - l.bias);
}

// The code (0..127, magnitude) that round-to-nearest-even gives |y|, where the code after
// the largest finite one stands for every value beyond the range (its value: max plus one
// step of the top binade).
struct Cast {
  int code;
  bool beyond;
};
// The format's finite magnitudes by code, then the stand-in for "beyond".
const std::vector<double>& magnitudes(Fp8Format f) {
  static const auto make = [](Fp8Format fmt) {
    std::vector<double> v;
    for (int c = 0; c < 128 && std::isfinite(code_value(fmt, c)); ++c) v.push_back(code_value(fmt, c));
    v.push_back(v.back() + (v.back() - v[v.size() - 2]));  // max plus the top binade's step
    return v;
  };
  static const std::vector<double> e4m3 = make(Fp8Format::e4m3), e5m2 = make(Fp8Format::e5m2);
  return f == Fp8Format::e4m3 ? e4m3 : e5m2;
}
Cast reference_cast(Fp8Format f, double a) {
  const std::vector<double>& v = magnitudes(f);
  const int beyond = static_cast<int>(v.size()) - 1;
  if (a > v.back()) return {beyond, true};
  int best = 0;
  for (int c = 1; c <= beyond; ++c) {
    const double d = std::fabs(a - v[static_cast<std::size_t>(c)]), db = std::fabs(a - v[static_cast<std::size_t>(best)]);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return {best, best == beyond};
}

// The statistics of x cast with `scale`, from the reference cast of each element.
Fp8CastStats reference_stats(const std::vector<float>& x, float scale, Fp8Format f) {
  Fp8CastStats s;
  double amax = 0;
  for (const float v : x) {
    ++s.count;
    if (std::isnan(v)) {
      ++s.nan;
      continue;
    }
    amax = std::max(amax, std::fabs(static_cast<double>(v)));
    if (std::isinf(v)) {
      ++s.inf;
      continue;
    }
    if (v == 0) {
      ++s.zero;
      continue;
    }
    const float y = v * scale;  // the cast's input: one binary32 rounding
    if (!std::isfinite(y)) {
      ++s.saturated;
      continue;
    }
    const Cast c = reference_cast(f, std::fabs(static_cast<double>(y)));
    if (c.beyond) {
      ++s.saturated;
    } else if (c.code == 0) {
      ++s.flushed;
    } else {
      int e = 0;
      std::frexp(code_value(f, c.code), &e);  // value in [2^(e-1), 2^e)
      ++s.binade[static_cast<std::size_t>(e - 1 - kernels::fp8_min_exponent(f))];
    }
  }
  s.amax = static_cast<float>(amax);
  return s;
}

void expect_same(const Fp8CastStats& got, const Fp8CastStats& want, const char* what) {
  EXPECT_EQ(got.count, want.count) << what;
  EXPECT_EQ(got.nan, want.nan) << what;
  EXPECT_EQ(got.inf, want.inf) << what;
  EXPECT_EQ(got.zero, want.zero) << what;
  EXPECT_EQ(got.saturated, want.saturated) << what;
  EXPECT_EQ(got.flushed, want.flushed) << what;
  EXPECT_EQ(got.binade, want.binade) << what;
  EXPECT_EQ(std::memcmp(&got.amax, &want.amax, sizeof(float)), 0) << what << ": amax " << got.amax << " vs " << want.amax;
}

// Every bf16 value (all 65536 patterns, as binary32) and values either side of each
// format's ends, under scales that put the data everywhere in the format's range.
std::vector<float> sweep() {
  std::vector<float> x;
  for (std::uint32_t b = 0; b < 65536; ++b) x.push_back(kernels::float_of(b << 16));
  for (const double end : {448.0, 464.0, 480.0, 57344.0, 61440.0, 65536.0, std::ldexp(1.0, -10), std::ldexp(1.0, -17)})
    for (int k = -40; k <= 40; ++k) {
      float w = static_cast<float>(end);
      for (int j = 0; j < std::abs(k); ++j) w = std::nextafter(w, k < 0 ? 0.0f : INFINITY);
      x.push_back(w);
      x.push_back(-w);
    }
  return x;
}

struct Threads {
  explicit Threads(int n) : before(kernels::cpu::num_threads()) { kernels::cpu::set_num_threads(n); }
  ~Threads() { kernels::cpu::set_num_threads(before); }
  int before;
};

TEST(Fp8Kernels, CastStatisticsAreTheNearestEvenCastOfEveryValueOnAnyThreadCount) {
  const std::vector<float> x = sweep();
  const View view{const_cast<float*>(x.data()), DType::f32, {static_cast<std::int64_t>(x.size())}};
  for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
    for (const float scale : {1.0f, 0.5f, 3.0f, 1.0f / 448.0f, 1024.0f, 1e-30f, 1e30f, INFINITY}) {
      const Fp8CastStats want = reference_stats(x, scale, f);
      for (const int threads : {1, 3}) {
        Threads t(threads);
        const Fp8CastStats got = Fp8Kernels::cpu().cast_stats(view, scale, f);
        expect_same(got, want, f == Fp8Format::e4m3 ? "e4m3" : "e5m2");
        EXPECT_EQ(got.representable(), got.count - got.nan - got.inf - got.zero - got.saturated - got.flushed);
      }
      EXPECT_GT(want.saturated + want.flushed, 0) << "scale " << scale << ": the sweep reaches an end of the range";
    }
}

// Hand-worked: E4M3's 464 is the tie between 448 and the missing 480 and stays (448);
// 465 saturates; 2^-10 is the tie between 0 and the smallest subnormal 2^-9 and flushes;
// E5M2's 61440 is the tie between 57344 (odd mantissa) and 65536 and leaves the range.
TEST(Fp8Kernels, TheEndsOfEachRangeAreWhereTheDefinitionPutsThem) {
  const std::vector<float> e4m3 = {464.0f, 465.0f, 0x1p-10f, 0x1.000002p-10f, 448.0f, 1.0f};
  const View v4{const_cast<float*>(e4m3.data()), DType::f32, {6}};
  const Fp8CastStats s4 = Fp8Kernels::cpu().cast_stats(v4, 1.0f, Fp8Format::e4m3);
  EXPECT_EQ(s4.saturated, 1);
  EXPECT_EQ(s4.flushed, 1);
  EXPECT_EQ(s4.binade[static_cast<std::size_t>(8 + 9)], 2);   // 448 and 464 -> 448: 2^8
  EXPECT_EQ(s4.binade[static_cast<std::size_t>(-9 + 9)], 1);  // just above 2^-10 -> 2^-9
  EXPECT_EQ(s4.binade[static_cast<std::size_t>(0 + 9)], 1);
  const std::vector<float> e5m2 = {61440.0f, 61439.0f, 0x1p-17f, 0x1.000002p-17f};
  const View v5{const_cast<float*>(e5m2.data()), DType::f32, {4}};
  const Fp8CastStats s5 = Fp8Kernels::cpu().cast_stats(v5, 1.0f, Fp8Format::e5m2);
  EXPECT_EQ(s5.saturated, 1);
  EXPECT_EQ(s5.flushed, 1);
  EXPECT_EQ(s5.binade[static_cast<std::size_t>(15 + 16)], 1);
  EXPECT_EQ(s5.binade[0], 1);
}

// The codes are the saturating cast of x * scale (rounded once in binary32), in every
// input dtype; the amax is max |x| without NaN.
TEST(Fp8Kernels, QuantizeGivesTheSaturatingCodeOfEachScaledValueAndTheAmax) {
  const std::vector<float> x = sweep();
  const auto n = static_cast<std::int64_t>(x.size());
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    // The input in its dtype, and the binary32 values it holds.
    std::vector<std::uint16_t> narrow(x.size());
    std::vector<float> held(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (dtype == DType::f32) {
        held[i] = x[i];
      } else {
        narrow[i] = dtype == DType::f16 ? kernels::f32_to_f16(x[i]) : kernels::f32_to_bf16(x[i]);
        held[i] = dtype == DType::f16 ? kernels::f16_to_f32(narrow[i]) : kernels::bf16_to_f32(narrow[i]);
      }
    }
    void* data = dtype == DType::f32 ? static_cast<void*>(held.data()) : static_cast<void*>(narrow.data());
    for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
      for (const float scale : {1.0f, 0.25f, 1.0f / 448.0f, 3.0f}) {
        double amax = 0;
        for (const float h : held)
          if (!std::isnan(h)) amax = std::max(amax, std::fabs(static_cast<double>(h)));
        std::vector<std::uint8_t> want(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
          const float y = held[i] * scale;
          const int sign = std::signbit(y) ? 0x80 : 0;
          if (std::isnan(y)) {
            want[i] = static_cast<std::uint8_t>(sign | (f == Fp8Format::e4m3 ? 0x7f : 0x7e));
          } else {
            const Cast c = reference_cast(f, std::fabs(static_cast<double>(y)));
            want[i] = static_cast<std::uint8_t>(sign | (c.beyond ? (f == Fp8Format::e4m3 ? 0x7e : 0x7b) : c.code));
          }
        }
        for (const int threads : {1, 3}) {
          Threads t(threads);
          std::vector<std::uint8_t> codes(x.size(), 0xaa);
          kernels::Fp8QuantizeDesc d;
          d.x = View{data, dtype, {n}};
          d.codes = codes.data();
          d.format = f;
          d.scale = scale;
          const float got_amax = Fp8Kernels::cpu().quantize(d);
          EXPECT_EQ(static_cast<double>(got_amax), amax);
          std::int64_t wrong = 0;
          for (std::size_t i = 0; i < x.size(); ++i) wrong += codes[i] != want[i];
          EXPECT_EQ(wrong, 0) << "dtype " << static_cast<int>(dtype) << " scale " << scale;
        }
      }
  }
}

// MXFP8: each block of 32 values of a row (70 values a row: two blocks and a short one), or
// of a column for the columnwise copy (whose codes are the transpose), takes the E8M0 scale at or above amax / max (the quotient in binary32, rounded up to a
// power of two, found here with frexp), its codes are the reference cast of x times the
// scale's reciprocal, and the statistics are those of each block under its own scale,
// added. Values over 48 binades, so that blocks flush their small values; every dtype, 1
// and 3 threads.
TEST(Fp8Kernels, BlockScaledCastsGiveEachBlockOf32TheScaleOfItsOwnAmax) {
  const std::int64_t rows = 41, cols = 70;  // columns of 41: a block of 32 and a short one
  std::vector<float> x;
  std::uint32_t state = 12345;
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    state = state * 1664525u + 1013904223u;
    const double magnitude = std::ldexp(1.0 + (state >> 8 & 0xff) / 256.0, static_cast<int>((state >> 16) % 48) - 24);
    x.push_back(static_cast<float>((state >> 30 & 1) ? -magnitude : magnitude));
  }
  x[3] = 0.0f;
  x[100] = std::numeric_limits<float>::quiet_NaN();
  for (const DType dtype : {DType::f32, DType::bf16}) {
    std::vector<std::uint16_t> narrow(x.size());
    std::vector<float> held(x);
    if (dtype == DType::bf16)
      for (std::size_t i = 0; i < x.size(); ++i) held[i] = kernels::bf16_to_f32(narrow[i] = kernels::f32_to_bf16(x[i]));
    void* data = dtype == DType::f32 ? static_cast<void*>(held.data()) : static_cast<void*>(narrow.data());
    const View view{data, dtype, {rows, cols}};
    for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
      for (const bool columnwise : {false, true}) {
        // The operand cast: x, or its transpose [cols, rows] with blocks down x's columns.
        const std::int64_t op_rows = columnwise ? cols : rows, op_cols = columnwise ? rows : cols;
        const std::int64_t op_blocks = (op_cols + 31) / 32;
        std::vector<float> operand(held.size());
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t c = 0; c < cols; ++c)
            operand[static_cast<std::size_t>(columnwise ? c * rows + r : r * cols + c)] = held[static_cast<std::size_t>(r * cols + c)];
        const float max = f == Fp8Format::e4m3 ? 448.0f : 57344.0f;
        std::vector<std::uint8_t> want_scales, want_codes(x.size());
        Fp8CastStats want;
        double amax_all = 0;
        for (std::int64_t r = 0; r < op_rows; ++r)
          for (std::int64_t b = 0; b < op_blocks; ++b) {
            const std::int64_t first = r * op_cols + b * 32, end = std::min(first + 32, (r + 1) * op_cols);
            double amax = 0;
            for (std::int64_t i = first; i < end; ++i)
              if (!std::isnan(operand[static_cast<std::size_t>(i)]))
                amax = std::max(amax, std::fabs(static_cast<double>(operand[static_cast<std::size_t>(i)])));
            amax_all = std::max(amax_all, amax);
            const float q = static_cast<float>(amax) / max;
            int e = 0;
            const double m = std::frexp(static_cast<double>(q), &e);  // q = m 2^e, m in [0.5, 1)
            const int power = m == 0.5 ? e - 1 : e;                   // the power of two at or above q
            want_scales.push_back(static_cast<std::uint8_t>(power + 127));
            const float reciprocal = static_cast<float>(std::ldexp(1.0, -power));
            std::vector<float> block(operand.begin() + first, operand.begin() + end);
            want.merge(reference_stats(block, reciprocal, f));
            for (std::int64_t i = first; i < end; ++i) {
              const float y = operand[static_cast<std::size_t>(i)] * reciprocal;
              const int sign = std::signbit(y) ? 0x80 : 0;
              const Cast c = std::isnan(y) ? Cast{f == Fp8Format::e4m3 ? 0x7f : 0x7e, false}
                                           : reference_cast(f, std::fabs(static_cast<double>(y)));
              EXPECT_FALSE(c.beyond) << "no element of a block saturates";
              want_codes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(sign | c.code);
            }
          }
        EXPECT_GT(want.flushed, 0) << "the data reaches below a block's range";
        for (const int threads : {1, 3}) {
          Threads t(threads);
          std::vector<std::uint8_t> codes(x.size(), 0xaa), scales(static_cast<std::size_t>(op_rows * op_blocks), 0xaa);
          kernels::Fp8MxQuantizeDesc d;
          d.x = view;
          d.cols = cols;
          d.columnwise = columnwise;
          d.codes = codes.data();
          d.scales = scales.data();
          d.format = f;
          EXPECT_EQ(static_cast<double>(Fp8Kernels::cpu().quantize_mx(d)), amax_all);
          EXPECT_EQ(scales, want_scales) << "columnwise " << columnwise;
          EXPECT_EQ(codes, want_codes) << "columnwise " << columnwise;
          if (!columnwise)
            expect_same(Fp8Kernels::cpu().cast_stats_mx(view, cols, f), want, f == Fp8Format::e4m3 ? "mx e4m3" : "mx e5m2");
        }
      }
  }
}

TEST(Fp8Kernels, AnInputThatIsNotFloatingPointIsRefusedNamingTheOp) {
  std::vector<std::int64_t> ints(4, 1);
  std::vector<std::uint8_t> codes(4);
  kernels::Fp8QuantizeDesc d;
  d.op = "fp8_linear";
  d.x = View{ints.data(), DType::i64, {4}};
  d.codes = codes.data();
  try {
    Fp8Kernels::cpu().quantize(d);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fp8_linear: an fp8 cast reads f32, f16 or bf16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ampcheck
