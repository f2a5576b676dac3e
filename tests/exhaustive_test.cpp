// Every one of the 2^32 binary32 bit patterns, converted to fp16 and bf16:
//   1. the scalar path (and the binary64 path, fed the same values) equals the
//      independent reference in tests/reference_fp.h;
//   2. every vector path this CPU runs equals the scalar path, bit for bit.
// A sanitizer build checks a random sample of a few million patterns instead (the
// instrumented code is ~10x slower), plus every pattern near the interesting boundaries.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/fp8.h"
#include "kernels/fp_bits.h"
#include "tests/reference_fp.h"

namespace ampcheck {
namespace {

namespace cpu = kernels::cpu;
using test::RefFormat;

constexpr std::uint64_t kChunk = 1u << 20;  // patterns per work item

#if defined(AMPCHECK_SANITIZED)
constexpr bool kSampled = true;
#else
constexpr bool kSampled = false;
#endif

// The non-negative patterns to check, in increasing order (the reference walks them);
// each is checked with both signs.
struct Plan {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;  // [begin, end)
};

Plan make_plan() {
  Plan plan;
  if (!kSampled) {
    for (std::uint64_t b = 0; b < 0x80000000ull; b += kChunk)
      plan.ranges.emplace_back(static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b + kChunk));
    return plan;
  }
  // Sampled: 192 random windows of 64Ki patterns, plus windows around every boundary:
  // zero, f16 subnormal range and its underflow edge, min normals, max and the overflow
  // edge of both formats, Inf and the NaNs.
  std::vector<std::uint32_t> starts = {0x00000000u, 0x33000000u - 0x8000u, 0x337fc000u,
                                       0x38800000u - 0x8000u, 0x477ff000u - 0x8000u,
                                       0x00800000u - 0x8000u, 0x7f7f8000u - 0x8000u,
                                       0x7f800000u - 0x8000u, 0x7fff0000u};
  std::mt19937 rng(20261122);
  for (int i = 0; i < 192; ++i) starts.push_back(rng() & 0x7fff0000u);
  std::sort(starts.begin(), starts.end());
  for (std::uint32_t s : starts)
    plan.ranges.emplace_back(s, static_cast<std::uint32_t>(std::min<std::uint64_t>(s + 0x10000u, 0x80000000ull)));
  return plan;
}

// Runs body(begin, end) over the plan's ranges on every core.
template <typename Body>
void parallel_for_ranges(const Plan& plan, Body body) {
  std::atomic<std::size_t> next{0};
  const unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n_threads; ++t)
    threads.emplace_back([&] {
      for (std::size_t i = next++; i < plan.ranges.size(); i = next++)
        body(plan.ranges[i].first, plan.ranges[i].second);
    });
  for (auto& th : threads) th.join();
}

// Collects mismatches from all threads; reports the first few.
class Mismatches {
 public:
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (++count_ <= 10) first_.push_back(what);
  }
  std::uint64_t count() const { return count_; }
  std::string summary() const {
    std::string s = std::to_string(count_) + " mismatches; first:";
    for (const auto& f : first_) s += "\n  " + f;
    return s;
  }

 private:
  std::mutex mu_;
  std::uint64_t count_ = 0;
  std::vector<std::string> first_;
};

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// The exact binary64 value of a binary32 pattern. NaNs are built by hand so that the
// payload reaches the reference untouched (a hardware widening would quiet it).
double exact_double(std::uint32_t bits) {
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    const std::uint64_t raw = (static_cast<std::uint64_t>(bits >> 31) << 63) |
                              (0x7ffull << 52) |
                              (static_cast<std::uint64_t>(bits & 0x007fffffu) << 29);
    double d;
    std::memcpy(&d, &raw, sizeof d);
    return d;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return static_cast<double>(f);
}

using ScalarFn = std::uint16_t (*)(std::uint32_t);
using F64Fn = std::uint16_t (*)(std::uint64_t);

void check_against_reference(const RefFormat& ref, ScalarFn scalar, F64Fn from_f64,
                             const char* name) {
  Mismatches bad;
  const Plan plan = make_plan();
  std::atomic<std::uint64_t> checked{0};
  parallel_for_ranges(plan, [&](std::uint32_t begin, std::uint32_t end) {
    std::size_t hint = 0;
    for (std::uint32_t p = begin; p != end; ++p) {
      const double x = exact_double(p);
      const std::uint32_t want = ref.encode(x, hint);
      const std::uint32_t want_neg = want | ref.sign_bit();
      const std::uint32_t got = scalar(p), got_neg = scalar(p | 0x80000000u);
      if (got != want) bad.add(std::string(name) + "(" + hex(p) + ") = " + hex(got) + ", reference " + hex(want));
      if (got_neg != want_neg)
        bad.add(std::string(name) + "(" + hex(p | 0x80000000u) + ") = " + hex(got_neg) + ", reference " + hex(want_neg));
      const std::uint32_t got64 = from_f64(kernels::bits_of(x));
      if (got64 != want)
        bad.add(std::string(name) + " from f64 (" + hex(p) + ") = " + hex(got64) + ", reference " + hex(want));
    }
    checked += 2ull * (end - begin);
  });
  if (!kSampled) {
    EXPECT_EQ(checked.load(), 1ull << 32);
  }
  EXPECT_EQ(bad.count(), 0u) << bad.summary();
}

TEST(ExhaustiveF32, ToF16MatchesIeeeReferenceOnEveryPattern) {
  check_against_reference(
      test::ref_f16(), [](std::uint32_t p) { return kernels::f32_to_f16_bits(p); },
      [](std::uint64_t p) { return kernels::f64_to_f16_bits(p); }, "f32_to_f16");
}

TEST(ExhaustiveF32, ToBf16MatchesIeeeReferenceOnEveryPattern) {
  check_against_reference(
      test::ref_bf16(), [](std::uint32_t p) { return kernels::f32_to_bf16_bits(p); },
      [](std::uint64_t p) { return kernels::f64_to_bf16_bits(p); }, "f32_to_bf16");
}

using BufferFn = void (*)(const float*, std::uint16_t*, std::size_t, cpu::Isa);

// The vector paths this CPU runs (every path but scalar).
std::vector<cpu::Isa> vector_paths() {
  std::vector<cpu::Isa> paths;
  for (int i = 1; i < cpu::kIsaCount; ++i)
    if (cpu::isa_supported(static_cast<cpu::Isa>(i))) paths.push_back(static_cast<cpu::Isa>(i));
  return paths;
}

// The patterns [begin, end), then the same with the sign bit set.
std::vector<std::uint32_t> both_signs(std::uint32_t begin, std::uint32_t end) {
  const std::size_t n = end - begin;
  std::vector<std::uint32_t> in(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    in[i] = begin + static_cast<std::uint32_t>(i);
    in[n + i] = in[i] | 0x80000000u;
  }
  return in;
}

void check_vector_paths(BufferFn convert, const char* name) {
  const std::vector<cpu::Isa> paths = vector_paths();
  if (paths.empty()) GTEST_SKIP() << "this CPU runs no vector path (no AVX2+F16C): only the scalar path exists";

  Mismatches bad;
  const Plan plan = make_plan();
  parallel_for_ranges(plan, [&](std::uint32_t begin, std::uint32_t end) {
    const std::vector<std::uint32_t> in = both_signs(begin, end);
    const std::size_t n = end - begin;
    const auto* src = reinterpret_cast<const float*>(in.data());
    std::vector<std::uint16_t> want(2 * n), got(2 * n);
    convert(src, want.data(), want.size(), cpu::Isa::scalar);
    for (cpu::Isa isa : paths) {
      convert(src, got.data(), got.size(), isa);
      for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i])
          bad.add(std::string(name) + "[" + std::string(cpu::isa_name(isa)) + "](" + hex(in[i]) +
                  ") = " + hex(got[i]) + ", scalar " + hex(want[i]));
    }
  });
  EXPECT_EQ(bad.count(), 0u) << bad.summary();
}

TEST(ExhaustiveF32, VectorPathsEqualScalarToF16OnEveryPattern) {
  check_vector_paths(cpu::f32_to_f16, "f32_to_f16");
}

TEST(ExhaustiveF32, VectorPathsEqualScalarToBf16OnEveryPattern) {
  check_vector_paths(cpu::f32_to_bf16, "f32_to_bf16");
}

// The fp8 casts (kernels/cpu/fp8.h): every vector path equals the scalar definition of
// kernels/fp_bits.h on every pattern, both formats, both overflow rules (the scalar
// definition is held to ml_dtypes and an enumerating reference in fp8_test.cpp).
TEST(ExhaustiveF32, VectorPathsEqualScalarToFp8OnEveryPattern) {
  const std::vector<cpu::Isa> paths = vector_paths();
  if (paths.empty()) GTEST_SKIP() << "this CPU runs no vector path (no AVX2): only the scalar path exists";
  using kernels::Fp8Format;
  using kernels::Fp8Overflow;
  Mismatches bad;
  const Plan plan = make_plan();
  parallel_for_ranges(plan, [&](std::uint32_t begin, std::uint32_t end) {
    const std::vector<std::uint32_t> in = both_signs(begin, end);
    const std::size_t n = end - begin;
    const auto* src = reinterpret_cast<const float*>(in.data());
    std::vector<std::uint8_t> want(2 * n), got(2 * n);
    for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
      for (Fp8Overflow o : {Fp8Overflow::to_nonfinite, Fp8Overflow::saturate}) {
        cpu::f32_to_fp8(src, want.data(), want.size(), f, o, cpu::Isa::scalar);
        for (cpu::Isa isa : paths) {
          cpu::f32_to_fp8(src, got.data(), got.size(), f, o, isa);
          for (std::size_t i = 0; i < got.size(); ++i)
            if (got[i] != want[i])
              bad.add(std::string(f == Fp8Format::e4m3 ? "e4m3" : "e5m2") +
                      (o == Fp8Overflow::saturate ? " saturating" : "") + "[" + std::string(cpu::isa_name(isa)) +
                      "](" + hex(in[i]) + ") = " + hex(got[i]) + ", scalar " + hex(want[i]));
        }
      }
  });
  EXPECT_EQ(bad.count(), 0u) << bad.summary();
}

}  // namespace
}  // namespace ampcheck
