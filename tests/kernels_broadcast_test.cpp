// Reading a tensor broadcast to a larger shape (kernels/cpu/tensor_io.h load_broadcast,
// with its run fast paths) against numpy's rule written out per element: the output
// multi-index, each input dim taking index 0 where it is 1 and missing dims dropped.
// Every shape pair below of ranks 1-4, dims 1-9, every chunk window, f32 and f16 sources.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/tensor_io.h"

namespace ampcheck {
namespace {

namespace kc = kernels::cpu;
using kernels::Dims;
using i64 = std::int64_t;

i64 numel(const Dims& d) {
  i64 n = 1;
  for (i64 x : d) n *= x;
  return n;
}

// numpy's broadcasting, element by element.
i64 reference_offset(const Dims& in, const Dims& out, i64 at) {
  std::vector<i64> index(out.size());
  for (std::size_t i = out.size(); i-- > 0;) {
    index[i] = at % out[i];
    at /= out[i];
  }
  const std::size_t lead = out.size() - in.size();
  i64 off = 0;
  for (std::size_t i = 0; i < in.size(); ++i) off = off * in[i] + (in[i] == 1 ? 0 : index[lead + i]);
  return off;
}

std::string text(const Dims& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

TEST(Broadcast, LoadBroadcastIsNumpysRuleForEveryShapePair) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> rank(1, 4), dim(1, 9), coin(0, 2);
  int pairs = 0, fast = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Dims out(static_cast<std::size_t>(rank(gen)));
    for (i64& d : out) d = dim(gen);
    // The input: a suffix of out's dims, each kept or set to 1.
    const std::size_t drop = std::uniform_int_distribution<std::size_t>(0, out.size() - 1)(gen);
    Dims in(out.begin() + static_cast<std::ptrdiff_t>(drop), out.end());
    for (i64& d : in)
      if (coin(gen) == 0) d = 1;
    if (in == out || numel(in) == 1) continue;
    ++pairs;
    if (kc::broadcast_runs(in, out).run >= 8) ++fast;
    std::vector<float> src(static_cast<std::size_t>(numel(in)));
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
    std::vector<std::uint16_t> src16(src.size());
    kc::convert(src.data(), DType::f32, src16.data(), DType::f16, src.size());  // exact: small integers + 0.5
    const i64 n = numel(out);
    for (const bool half : {false, true}) {
      kernels::View v{half ? static_cast<void*>(src16.data()) : static_cast<void*>(src.data()),
                      half ? DType::f16 : DType::f32, in};
      // Windows that start and end anywhere, as chunks of a map do.
      const i64 b = std::uniform_int_distribution<i64>(0, n - 1)(gen);
      const i64 e = std::uniform_int_distribution<i64>(b + 1, n)(gen);
      std::vector<float> got(static_cast<std::size_t>(e - b), -1.0f);
      kc::load_broadcast(v, out, b, e, got.data());
      for (i64 p = b; p < e; ++p) {
        const float want = src[static_cast<std::size_t>(reference_offset(in, out, p))];
        ASSERT_EQ(got[static_cast<std::size_t>(p - b)], want)
            << text(in) << " -> " << text(out) << ", element " << p << (half ? " (f16)" : " (f32)");
        ASSERT_EQ(kc::broadcast_offset(in, out, p), reference_offset(in, out, p));
      }
    }
  }
  EXPECT_GT(pairs, 1000);
  EXPECT_GT(fast, 100) << "the run fast paths were exercised";
}

}  // namespace
}  // namespace ampcheck
