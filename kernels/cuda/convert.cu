// GPU conversions: one element per thread through the shared scalar definitions, so a
// device result equals the CPU's bit for bit (NaN payloads included, unlike
// __float2half_rn, which returns one canonical NaN).
#include <cuda_runtime.h>  // cudaMalloc, cudaMemcpy, cudaGetDeviceCount, launches

#include <dlfcn.h>  // dlopen: is an NVIDIA driver installed at all

#include <stdexcept>
#include <string>

#include "ampcheck_build_info.h"  // AMPCHECK_CUDA_ARCHS_TEXT
#include "kernels/cuda/cuda.h"
#include "kernels/fp_bits.h"

namespace ampcheck::kernels::cuda {
namespace {

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                             cudaGetErrorString(status) + ")");
}
#define AMPCHECK_CUDA_CHECK(call) check((call), #call)

struct F64ToF16 {
  __device__ std::uint16_t operator()(double v) const { return f64_to_f16_bits(bits_of(v)); }
};
struct F64ToBf16 {
  __device__ std::uint16_t operator()(double v) const { return f64_to_bf16_bits(bits_of(v)); }
};
struct F32ToF16 {
  __device__ std::uint16_t operator()(float v) const { return kernels::f32_to_f16(v); }
};
struct F32ToBf16 {
  __device__ std::uint16_t operator()(float v) const { return kernels::f32_to_bf16(v); }
};
struct F16ToF32 {
  __device__ float operator()(std::uint16_t v) const { return kernels::f16_to_f32(v); }
};
struct Bf16ToF32 {
  __device__ float operator()(std::uint16_t v) const { return kernels::bf16_to_f32(v); }
};

template <typename Src, typename Dst, typename Op>
__global__ void convert_kernel(const Src* __restrict__ src, Dst* __restrict__ dst,
                               std::size_t n, Op op) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = op(src[i]);
}

// Device buffer that frees itself; the caching allocator arrives with the CUDA backend.
template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(std::size_t n) {
    AMPCHECK_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

template <typename Src, typename Dst, typename Op>
void convert_on_gpu(const Src* src, Dst* dst, std::size_t n, Op op) {
  if (n == 0) return;
  if (probe().device_count == 0)
    throw std::runtime_error("no usable GPU: " + probe().why_none);
  DeviceBuffer<Src> d_src(n);
  DeviceBuffer<Dst> d_dst(n);
  AMPCHECK_CUDA_CHECK(cudaMemcpy(d_src.ptr, src, n * sizeof(Src), cudaMemcpyHostToDevice));
  constexpr int kThreads = 256;
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  convert_kernel<<<static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16), kThreads>>>(
      d_src.ptr, d_dst.ptr, n, op);
  AMPCHECK_CUDA_CHECK(cudaGetLastError());
  AMPCHECK_CUDA_CHECK(cudaMemcpy(dst, d_dst.ptr, n * sizeof(Dst), cudaMemcpyDeviceToHost));
}

}  // namespace

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    r.built_with_cuda = true;
    const cudaError_t status = cudaGetDeviceCount(&r.device_count);
    if (status != cudaSuccess) {
      r.device_count = 0;
      void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
      if (driver == nullptr) driver = dlopen("libcuda.so.1", RTLD_LAZY);
      if (driver == nullptr)
        r.why_none = "no NVIDIA driver installed: libcuda.so.1 not found";
      else
        r.why_none = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
      cudaGetLastError();  // clear the sticky error so later calls start clean
    } else if (r.device_count == 0) {
      r.why_none = "the CUDA runtime reports 0 devices";
    } else {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        r.device_name = prop.name;
        r.compute_capability = prop.major * 10 + prop.minor;
      }
    }
    return r;
  }();
  return p;
}

std::string build_description() {
  return "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
         std::to_string(CUDART_VERSION % 1000 / 10) + ", built for " AMPCHECK_CUDA_ARCHS_TEXT;
}

void f64_to_f16(const double* s, std::uint16_t* d, std::size_t n) { convert_on_gpu(s, d, n, F64ToF16{}); }
void f64_to_bf16(const double* s, std::uint16_t* d, std::size_t n) { convert_on_gpu(s, d, n, F64ToBf16{}); }
void f32_to_f16(const float* s, std::uint16_t* d, std::size_t n) { convert_on_gpu(s, d, n, F32ToF16{}); }
void f32_to_bf16(const float* s, std::uint16_t* d, std::size_t n) { convert_on_gpu(s, d, n, F32ToBf16{}); }
void f16_to_f32(const std::uint16_t* s, float* d, std::size_t n) { convert_on_gpu(s, d, n, F16ToF32{}); }
void bf16_to_f32(const std::uint16_t* s, float* d, std::size_t n) { convert_on_gpu(s, d, n, Bf16ToF32{}); }

}  // namespace ampcheck::kernels::cuda
