// The memory family on GPU 0 (kernels/memory_kernels.h): fills and conversions through
// the shared element definitions (kernels/element.h), so a device conversion rounds as
// the CPU's does bit for bit; copies on the engine's stream; storage from the caching
// allocator.
#include <cstdint>
#include <string>

#include "kernels/caching_allocator.h"
#include "kernels/cuda/runtime.h"
#include "kernels/element.h"
#include "kernels/memory_kernels.h"

namespace ampcheck::kernels::cuda {
namespace {

__global__ void fill_kernel(unsigned char* dst, std::int64_t n, std::uint64_t bits, int size) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    switch (size) {
      case 8: reinterpret_cast<std::uint64_t*>(dst)[i] = bits; break;
      case 4: reinterpret_cast<std::uint32_t*>(dst)[i] = static_cast<std::uint32_t>(bits); break;
      default: reinterpret_cast<std::uint16_t*>(dst)[i] = static_cast<std::uint16_t>(bits); break;
    }
  }
}

// Element by element through double, which holds every f32/f16/bf16 value exactly, so
// each element is rounded once; i64 goes through llround as the CPU does.
__global__ void convert_kernel(const void* src, DType from, void* dst, DType to, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (from == DType::f32 && to != DType::f64 && to != DType::i64)
      store_element(dst, to, i, load_element<float>(src, from, i));  // f32 -> f16/bf16: one rounding from f32
    else
      store_element(dst, to, i, load_element<double>(src, from, i));
  }
}

void fill(const View& dst, double value) {
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  std::uint64_t bits = 0;
  switch (dst.dtype) {
    case DType::f64: bits = bits_of(value); break;
    case DType::f32: bits = bits_of(static_cast<float>(value)); break;
    case DType::f16: bits = f64_to_f16_bits(bits_of(value)); break;
    case DType::bf16: bits = f64_to_bf16_bits(bits_of(value)); break;
    case DType::i64: bits = static_cast<std::uint64_t>(static_cast<std::int64_t>(value)); break;
  }
  fill_kernel<<<blocks_for(n), 256, 0, stream()>>>(static_cast<unsigned char*>(dst.data), n, bits,
                                                    static_cast<int>(element_size(dst.dtype)));
  check_launch("fill_kernel", "fill");
}

void convert_view(const View& src, const View& dst) {
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  if (src.dtype == dst.dtype) {
    check(cudaMemcpyAsync(dst.data, src.data, dst.nbytes(), cudaMemcpyDeviceToDevice, stream()), "cudaMemcpyAsync",
          "copy");
    return;
  }
  convert_kernel<<<blocks_for(n), 256, 0, stream()>>>(src.data, src.dtype, dst.data, dst.dtype, n);
  check_launch("convert_kernel", "convert");
}

void to_device(void* dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync(host to device)",
        "copy to cuda");
  // The host buffer may be gone when the call returns: wait for the copy.
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize", "copy to cuda");
}

void to_host(void* host_dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream()), "cudaMemcpyAsync(device to host)",
        "copy to cpu");
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize", "copy to cpu");
}

void* allocate(std::size_t bytes, std::string& why_not) {
  try {
    return allocator().allocate(bytes, Stream{reinterpret_cast<std::uintptr_t>(stream())});
  } catch (const OutOfMemoryError& e) {
    why_not = e.what();
    return nullptr;
  }
}

void release(void* ptr) { allocator().free(ptr); }

void synchronize() { check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize", "synchronize"); }

}  // namespace
}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels {

const MemoryKernels& MemoryKernels::cuda() {
  static const MemoryKernels k{&cuda::fill,     &cuda::convert_view, &cuda::to_device,  &cuda::to_host,
                               &cuda::allocate, &cuda::release,      &cuda::synchronize};
  return k;
}

}  // namespace ampcheck::kernels
