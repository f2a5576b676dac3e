// The fp8 casts of an fp8 Linear on the CPU (kernels/fp8_kernels.h): chunks of kChunk
// elements over the thread pool, each widened exactly to binary32 where x is f16 or bf16;
// the amax and the counts of the chunks merged in chunk order (a max and integer sums:
// any order gives the same result, the fixed one keeps it obvious).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"  // active_isa
#include "kernels/cpu/fp8.h"      // quantize_fp8
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_io.h"  // source, kChunk
#include "kernels/fp8_kernels.h"

namespace ampcheck::kernels {
namespace cpu {
namespace {

void check_source(const View& x, const char* op) {
  if (x.dtype != DType::f32 && x.dtype != DType::f16 && x.dtype != DType::bf16)
    throw std::invalid_argument(std::string(op) + ": an fp8 cast reads f32, f16 or bf16 values (cast the tensor first)");
}

float quantize(const Fp8QuantizeDesc& d) {
  check_source(d.x, d.op);
  const std::int64_t n = d.x.numel();
  std::vector<float> amax(static_cast<std::size_t>((n + kChunk - 1) / kChunk), 0.0f);
  const Isa isa = active_isa();
  parallel_for(n, kChunk, [&](std::int64_t b, std::int64_t e) {
    float buf[kChunk];
    const float* x = source(d.x, b, e - b, buf);
    amax[static_cast<std::size_t>(b / kChunk)] = quantize_fp8(x, d.codes + b, static_cast<std::size_t>(e - b), d.scale,
                                                              d.format, Fp8Overflow::saturate, isa);
  });
  float r = 0.0f;
  for (const float a : amax) r = std::max(r, a);  // no NaN enters an amax
  return r;
}

Fp8CastStats cast_stats(const View& x_view, float scale, Fp8Format format) {
  check_source(x_view, "fp8 cast statistics");
  const std::int64_t n = x_view.numel();
  std::vector<Fp8CastStats> parts(static_cast<std::size_t>((n + kChunk - 1) / kChunk));
  parallel_for(n, kChunk, [&](std::int64_t b, std::int64_t e) {
    float buf[kChunk];
    const float* x = source(x_view, b, e - b, buf);
    Fp8CastStats& s = parts[static_cast<std::size_t>(b / kChunk)];
    s.count = e - b;
    for (std::int64_t i = 0; i < e - b; ++i) {
      int bin = -1;
      fp8_cast_count(x[i], scale, format, s.nan, s.inf, s.zero, s.saturated, s.flushed, bin);
      if (bin >= 0) ++s.binade[static_cast<std::size_t>(bin)];
      const float a = std::fabs(x[i]);
      if (a > s.amax) s.amax = a;  // false for NaN
    }
  });
  Fp8CastStats r;
  for (const Fp8CastStats& p : parts) r.merge(p);
  return r;
}

}  // namespace
}  // namespace cpu

const Fp8Kernels& Fp8Kernels::cpu() {
  static const Fp8Kernels k{&cpu::quantize, &cpu::cast_stats};
  return k;
}

}  // namespace ampcheck::kernels
