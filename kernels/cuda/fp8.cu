// The fp8 casts of an fp8 Linear on GPU 0 (kernels/fp8_kernels.h), grid-stride loops
// with the element rules shared with the CPU (kernels/fp_bits.h, fp8_cast_count). The
// amax is a max of non-negative binary32 values, taken as a max of their bit patterns
// (which order the same way) with one atomicMax per block; the counts are integers, one
// shared then one global atomicAdd per counter and block: the same result on every run.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/runtime.h"  // check, check_launch, stream, Scratch, blocks_for
#include "kernels/element.h"       // load_element
#include "kernels/fp8_kernels.h"

namespace ampcheck::kernels::cuda {
namespace {

constexpr unsigned int kThreads = 256;

void check_source(const View& x, const char* op) {
  if (x.dtype != DType::f32 && x.dtype != DType::f16 && x.dtype != DType::bf16)
    throw std::invalid_argument(std::string(op) + ": an fp8 cast reads f32, f16 or bf16 values (cast the tensor first)");
}

void fetch(void* host, const void* device, std::size_t bytes, const char* op) {
  check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync(fp8 result)", op);
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize", op);
}

// |x| as bits, 0 for NaN (which no amax takes).
__device__ unsigned int amax_bits(float x) {
  const unsigned int a = bits_of(x) & 0x7fffffffu;
  return a > 0x7f800000u ? 0u : a;
}

__device__ void block_max(unsigned int mine, unsigned int* result) {
  __shared__ unsigned int shared;
  if (threadIdx.x == 0) shared = 0;
  __syncthreads();
  if (mine != 0) atomicMax(&shared, mine);
  __syncthreads();
  if (threadIdx.x == 0 && shared != 0) atomicMax(result, shared);
}

__global__ void scale_cast_kernel(const void* x, DType dtype, std::int64_t n, float scale, Fp8Format format,
                                std::uint8_t* codes, unsigned int* amax) {
  unsigned int mine = 0;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load_element<float>(x, dtype, i);
    const std::uint32_t y = bits_of(v * scale);
    codes[i] = format == Fp8Format::e4m3 ? f32_to_e4m3_bits(y, Fp8Overflow::saturate)
                                         : f32_to_e5m2_bits(y, Fp8Overflow::saturate);
    const unsigned int a = amax_bits(v);
    mine = a > mine ? a : mine;
  }
  block_max(mine, amax);
}

float quantize(const Fp8QuantizeDesc& d) {
  check_source(d.x, d.op);
  const std::int64_t n = d.x.numel();
  if (n == 0) return 0.0f;
  Scratch result(sizeof(unsigned int));
  check(cudaMemsetAsync(result.get(), 0, sizeof(unsigned int), stream()), "cudaMemsetAsync", d.op);
  scale_cast_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(d.x.data, d.x.dtype, n, d.scale, d.format,
                                                                       d.codes, result.as<unsigned int>());
  check_launch("scale_cast_kernel", d.op);
  unsigned int bits = 0;
  fetch(&bits, result.get(), sizeof bits, d.op);
  return float_of(bits);
}

// Counters: nan, inf, zero, saturated, flushed, then the binades.
constexpr int kFixed = 5;
constexpr int kCounters = kFixed + kFp8Binades;

struct StatsResult {
  unsigned long long counters[kCounters];
  unsigned int amax;
};

__global__ void cast_stats_kernel(const void* x, DType dtype, std::int64_t n, float scale, Fp8Format format,
                                  StatsResult* result) {
  __shared__ unsigned long long shared[kCounters];
  for (int k = threadIdx.x; k < kCounters; k += blockDim.x) shared[k] = 0;
  __syncthreads();
  std::int64_t nan = 0, inf = 0, zero = 0, saturated = 0, flushed = 0;
  unsigned int mine = 0;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load_element<float>(x, dtype, i);
    int bin = -1;
    fp8_cast_count(v, scale, format, nan, inf, zero, saturated, flushed, bin);
    if (bin >= 0) atomicAdd(&shared[kFixed + bin], 1ull);
    const unsigned int a = amax_bits(v);
    mine = a > mine ? a : mine;
  }
  const std::int64_t fixed[kFixed] = {nan, inf, zero, saturated, flushed};
  for (int k = 0; k < kFixed; ++k)
    if (fixed[k] != 0) atomicAdd(&shared[k], static_cast<unsigned long long>(fixed[k]));
  __syncthreads();
  for (int k = threadIdx.x; k < kCounters; k += blockDim.x)
    if (shared[k] != 0) atomicAdd(&result->counters[k], shared[k]);
  block_max(mine, &result->amax);
}

Fp8CastStats cast_stats(const View& x, float scale, Fp8Format format) {
  const char* op = "fp8 cast statistics";
  check_source(x, op);
  Fp8CastStats s;
  s.count = x.numel();
  if (s.count == 0) return s;
  Scratch result(sizeof(StatsResult));
  check(cudaMemsetAsync(result.get(), 0, sizeof(StatsResult), stream()), "cudaMemsetAsync", op);
  cast_stats_kernel<<<blocks_for(s.count, kThreads), kThreads, 0, stream()>>>(x.data, x.dtype, s.count, scale, format,
                                                                               result.as<StatsResult>());
  check_launch("cast_stats_kernel", op);
  StatsResult r{};
  fetch(&r, result.get(), sizeof r, op);
  s.nan = static_cast<std::int64_t>(r.counters[0]);
  s.inf = static_cast<std::int64_t>(r.counters[1]);
  s.zero = static_cast<std::int64_t>(r.counters[2]);
  s.saturated = static_cast<std::int64_t>(r.counters[3]);
  s.flushed = static_cast<std::int64_t>(r.counters[4]);
  for (int k = 0; k < kFp8Binades; ++k) s.binade[static_cast<std::size_t>(k)] = static_cast<std::int64_t>(r.counters[kFixed + k]);
  s.amax = float_of(r.amax);
  return s;
}

[[noreturn]] void refuse_mx(const char* op) {
  throw std::invalid_argument(std::string(op) + ": " + kMxfp8CpuOnly);
}
float quantize_mx(const Fp8MxQuantizeDesc& d) { refuse_mx(d.op); }
Fp8CastStats cast_stats_mx(const View&, std::int64_t, Fp8Format) { refuse_mx("fp8 cast statistics"); }

}  // namespace
}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels {

const Fp8Kernels& Fp8Kernels::cuda() {
  static const Fp8Kernels k{&cuda::quantize, &cuda::cast_stats, &cuda::quantize_mx, &cuda::cast_stats_mx};
  return k;
}

}  // namespace ampcheck::kernels
