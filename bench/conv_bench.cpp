// The CPU convolution's two paths on the grouped and depthwise layers of the ONNX
// benchmark's models (bench/onnx/export.py at 64x64, batch 16): im2col + GEMM against the
// direct kernels (kernels/cpu/conv_direct.h), forward, input gradient and weight gradient,
// interleaved (each round times a block of calls of every path in turn), medians. Both
// give the same bits (tests/ops_conv_direct_test.cpp); this says which is faster where,
// which direct_conv_takes() decides.
//
//   ampcheck_bench_conv [--threads N] [--rounds R] [--dtype float32|float16|bfloat16] [--filter TEXT]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/dispatch.h"  // view_of
#include "engine/dtype/dtype.h"
#include "engine/parallel.h"  // set_num_threads
#include "engine/random.h"    // Generator
#include "engine/tensor.h"
#include "kernels/cpu/conv_direct.h"
#include "kernels/cpu/gemm.h"

namespace {

using namespace ampcheck;
using i64 = std::int64_t;
using Clock = std::chrono::steady_clock;
namespace kc = kernels::cpu;

struct Layer {
  const char* from;
  i64 c_in, hw, c_out, k, stride, groups;
};

// Batch 16, 64x64 inputs; padding k / 2 (every layer below pads so).
const std::vector<Layer> kLayers = {
    {"efficientnet_b0 dw3 32ch 32x32", 32, 32, 32, 3, 1, 32},
    {"efficientnet_b0 dw3 s2 96ch 32x32", 96, 32, 96, 3, 2, 96},
    {"efficientnet_b0 dw3 144ch 16x16", 144, 16, 144, 3, 1, 144},
    {"efficientnet_b0 dw5 s2 144ch 16x16", 144, 16, 144, 5, 2, 144},
    {"efficientnet_b0 dw5 240ch 8x8", 240, 8, 240, 5, 1, 240},
    {"efficientnet_b0 dw3 s2 240ch 8x8", 240, 8, 240, 3, 2, 240},
    {"efficientnet_b0 dw3 480ch 4x4", 480, 4, 480, 3, 1, 480},
    {"efficientnet_b0 dw5 672ch 4x4", 672, 4, 672, 5, 1, 672},
    {"efficientnet_b0 dw5 s2 672ch 4x4", 672, 4, 672, 5, 2, 672},
    {"efficientnet_b0 dw5 1152ch 2x2", 1152, 2, 1152, 5, 1, 1152},
    {"efficientnet_b0 dw3 1152ch 2x2", 1152, 2, 1152, 3, 1, 1152},
    {"mobilenet_v2 dw3 144ch 16x16", 144, 16, 144, 3, 1, 144},
    {"mobilenet_v2 dw3 384ch 4x4", 384, 4, 384, 3, 1, 384},
    {"mobilenet_v2 dw3 960ch 2x2", 960, 2, 960, 3, 1, 960},
    {"shufflenet_v2 dw3 58ch 8x8", 58, 8, 58, 3, 1, 58},
    {"shufflenet_v2 dw3 s2 116ch 8x8", 116, 8, 116, 3, 2, 116},
    {"resnext50 g32 128ch 16x16", 128, 16, 128, 3, 1, 32},
    {"resnext50 g32 s2 256ch 16x16", 256, 16, 256, 3, 2, 32},
    {"resnext50 g32 256ch 8x8", 256, 8, 256, 3, 1, 32},
    {"resnext50 g32 512ch 4x4", 512, 4, 512, 3, 1, 32},
    {"resnext50 g32 1024ch 2x2", 1024, 2, 1024, 3, 1, 32},
};

kernels::ConvGeometry geometry(const Layer& l, i64 n) {
  kernels::ConvGeometry g;
  g.n = n, g.c_in = l.c_in, g.h = l.hw, g.w = l.hw, g.c_out = l.c_out, g.kh = l.k, g.kw = l.k, g.groups = l.groups;
  g.sh = g.sw = l.stride, g.ph = g.pw = l.k / 2;
  g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, rounds = 5;
  std::string filter, dtype_name = "float32";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = std::stoi(argv[i + 1]);
    else if (a == "--rounds") rounds = std::stoi(argv[i + 1]);
    else if (a == "--filter") filter = argv[i + 1];
    else if (a == "--dtype") dtype_name = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: ampcheck_bench_conv [--threads N] [--rounds R] [--dtype D] [--filter TEXT]\n");
      return 2;
    }
  }
  if (threads > 0) set_num_threads(threads);
  const DType dtype = parse_dtype(dtype_name);
  const kc::GemmIsa isa = kc::active_gemm_isa();
  std::printf("threads %d, path %s, %s, batch 16; ms per call (median of %d rounds)\n\n", num_threads(),
              std::string(kc::gemm_isa_name(isa)).c_str(), dtype_name.c_str(), rounds);
  std::printf("| layer | pass | im2col+GEMM ms | direct ms | direct / im2col |\n| --- | --- | ---: | ---: | ---: |\n");
  Generator gen(0);
  double total_old = 0, total_new = 0;
  for (const Layer& l : kLayers) {
    if (!filter.empty() && std::string(l.from).find(filter) == std::string::npos) continue;
    const kernels::ConvGeometry g = geometry(l, 16);
    const Tensor x = Tensor::uniform({g.n, g.c_in, g.h, g.w}, gen, -1, 1, dtype);
    const Tensor w = Tensor::uniform({g.c_out, g.cin_g(), g.kh, g.kw}, gen, -1, 1, dtype);
    const Tensor gy = Tensor::uniform({g.n, g.c_out, g.oh, g.ow}, gen, -1, 1, dtype);
    Tensor y = Tensor::empty(gy.shape(), dtype), gx = Tensor::empty(x.shape(), dtype),
           gw = Tensor::empty(w.shape(), dtype);
    const kernels::View none;
    const std::vector<std::pair<const char*, std::function<void()>>> old_passes = {
        {"forward", [&] { kc::im2col_conv_forward(g, view_of(x), view_of(w), none, view_of(y)); }},
        {"input grad", [&] { kc::im2col_conv_backward_data(g, view_of(gy), view_of(w), view_of(gx)); }},
        {"weight grad", [&] { kc::im2col_conv_backward_filter(g, view_of(x), view_of(gy), view_of(gw)); }}};
    const std::vector<std::pair<const char*, std::function<void()>>> new_passes = {
        {"forward", [&] { kc::direct_conv_forward(g, view_of(x), view_of(w), none, view_of(y), isa); }},
        {"input grad", [&] { kc::direct_conv_backward_data(g, view_of(gy), view_of(w), view_of(gx), isa); }},
        {"weight grad", [&] { kc::direct_conv_backward_filter(g, view_of(x), view_of(gy), view_of(gw), isa); }}};
    for (std::size_t p = 0; p < old_passes.size(); ++p) {
      // Calls per block: about 20 ms of the slower path.
      const auto t0 = Clock::now();
      old_passes[p].second();
      const double once = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      const int block = std::clamp(static_cast<int>(20.0 / std::max(once, 1e-3)), 1, 1000);
      std::vector<double> a, b;
      for (int r = 0; r < rounds; ++r)
        for (int which = 0; which < 2; ++which) {
          const auto& f = (which == r % 2 ? old_passes : new_passes)[p].second;
          const auto s = Clock::now();
          for (int i = 0; i < block; ++i) f();
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - s).count() / block;
          (which == r % 2 ? a : b).push_back(ms);
        }
      const double ma = median(a), mb = median(b);
      total_old += ma, total_new += mb;
      std::printf("| %s | %s | %.3f | %.3f | %.2f |\n", l.from, old_passes[p].first, ma, mb, mb / ma);
      std::fflush(stdout);
    }
  }
  std::printf("| **total** | | %.2f | %.2f | %.2f |\n", total_old, total_new, total_new / total_old);
  return 0;
}
