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

// The rows of an MXFP8 operand: x as [numel / cols, cols].
std::int64_t mx_rows(const View& x, std::int64_t cols, const char* op) {
  check_source(x, op);
  if (cols == 0 && x.numel() == 0) return 0;  // an empty operand (a batch of no rows, columnwise)
  if (cols <= 0 || x.numel() % cols != 0)
    throw std::invalid_argument(std::string(op) + ": rows of " + std::to_string(cols) + " values do not tile " +
                                std::to_string(x.numel()) + " elements");
  return x.numel() / cols;
}

// Rows a task takes: about kChunk elements.
std::int64_t rows_per_task(std::int64_t cols) { return cols > 0 ? std::max<std::int64_t>(1, kChunk / cols) : 1; }

float quantize_mx(const Fp8MxQuantizeDesc& d) {
  const std::int64_t x_rows = mx_rows(d.x, d.cols, d.op);
  // The operand cast, [rows, cols] with blocks along its rows: x, or x's transpose.
  const std::int64_t rows = d.columnwise ? d.cols : x_rows, cols = d.columnwise ? x_rows : d.cols;
  std::vector<float> transposed;
  if (d.columnwise) {  // x widened exactly, then transposed
    const std::vector<float> all = values<float>(d.x);
    transposed.resize(all.size());
    for (std::int64_t r = 0; r < x_rows; ++r)
      for (std::int64_t c = 0; c < d.cols; ++c)
        transposed[static_cast<std::size_t>(c * x_rows + r)] = all[static_cast<std::size_t>(r * d.cols + c)];
  }
  const std::int64_t blocks = (cols + kMxBlock - 1) / kMxBlock, grain = rows_per_task(cols);
  std::vector<float> amax(static_cast<std::size_t>((rows + grain - 1) / grain), 0.0f);
  const Isa isa = active_isa();
  parallel_for(rows, grain, [&](std::int64_t b, std::int64_t e) {
    std::vector<float> buf;
    const float* x = nullptr;
    if (d.columnwise) {
      x = transposed.data() + b * cols;
    } else {
      buf.resize(static_cast<std::size_t>((e - b) * cols));
      x = source(d.x, b * cols, (e - b) * cols, buf.data());
    }
    quantize_mxfp8(x, d.codes + b * cols, d.scales + b * blocks, e - b, cols, d.format, isa);
    float& a = amax[static_cast<std::size_t>(b / grain)];
    for (std::int64_t i = 0; i < (e - b) * cols; ++i) a = std::max(a, std::fabs(x[i]));  // NaN: max keeps a
  });
  float r = 0.0f;
  for (const float a : amax) r = std::max(r, a);
  return r;
}

Fp8CastStats cast_stats_mx(const View& x_view, std::int64_t cols, Fp8Format format) {
  const std::int64_t rows = mx_rows(x_view, cols, "fp8 cast statistics"), grain = rows_per_task(cols);
  std::vector<Fp8CastStats> parts(static_cast<std::size_t>((rows + grain - 1) / grain));
  parallel_for(rows, grain, [&](std::int64_t b, std::int64_t e) {
    std::vector<float> buf(static_cast<std::size_t>(cols));
    Fp8CastStats& s = parts[static_cast<std::size_t>(b / grain)];
    for (std::int64_t r = b; r < e; ++r) {
      const float* x = source(x_view, r * cols, cols, buf.data());
      for (std::int64_t first = 0; first < cols; first += kMxBlock) {
        const std::int64_t n = std::min(kMxBlock, cols - first);
        const float multiplier = e8m0_multiplier(mx_block_code(x + first, static_cast<std::size_t>(n), format));
        for (std::int64_t i = first; i < first + n; ++i) {
          int bin = -1;
          fp8_cast_count(x[i], multiplier, format, s.nan, s.inf, s.zero, s.saturated, s.flushed, bin);
          if (bin >= 0) ++s.binade[static_cast<std::size_t>(bin)];
          const float a = std::fabs(x[i]);
          if (a > s.amax) s.amax = a;  // false for NaN
        }
      }
      s.count += cols;
    }
  });
  Fp8CastStats r;
  for (const Fp8CastStats& p : parts) r.merge(p);
  return r;
}

}  // namespace
}  // namespace cpu

const Fp8Kernels& Fp8Kernels::cpu() {
  static const Fp8Kernels k{&cpu::quantize, &cpu::cast_stats, &cpu::quantize_mx, &cpu::cast_stats_mx};
  return k;
}

}  // namespace ampcheck::kernels
