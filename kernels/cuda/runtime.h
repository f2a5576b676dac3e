// What every CUDA source of the backend shares (CUDA builds only): status checks whose
// messages name the call and the op, the stream the engine's work runs on, GPU 0's
// caching allocator, and launch sizes for grid-stride loops.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kernels/caching_allocator.h"

namespace ampcheck::kernels::cuda {

// Throws std::runtime_error "<op>: <call> failed: <error name> (<error text>)", clearing
// the runtime's last error first. Success returns.
void check(cudaError_t status, std::string_view call, std::string_view op);
// The launch just made (a kernel's name) for an op: throws as check() when it failed.
void check_launch(std::string_view kernel, std::string_view op);

// The stream every kernel, copy and library call of the engine runs on: GPU 0's legacy
// default stream, so the work of one step is ordered without events and a synchronous
// copy to the host waits for it.
cudaStream_t stream();

// GPU 0's caching allocator, made on first use (kernels/caching_allocator.h).
CachingAllocator& allocator();

// Blocks of `threads` for a grid-stride loop over n items (at least 1, at most enough to
// fill the GPU several times over).
unsigned int blocks_for(std::int64_t n, unsigned int threads = 256);

// Device memory from the caching allocator for the length of one call. Handing it back
// right after queueing the work that uses it is safe: every kernel, copy and library call
// runs on stream(), in order, and the allocator reuses a block in stream order. Either
// sized at construction, or empty until reserve() (a buffer only some paths need).
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(std::size_t bytes) { reserve(bytes); }
  ~Scratch() {
    if (ptr_ != nullptr) allocator().free(ptr_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // The block, taken on the first call with bytes > 0 (later calls return it as it is).
  void* reserve(std::size_t bytes) {
    if (ptr_ == nullptr && bytes > 0) {
      ptr_ = allocator().allocate(bytes, Stream{reinterpret_cast<std::uintptr_t>(stream())});
      bytes_ = bytes;
    }
    return ptr_;
  }
  void* get() const { return ptr_; }  // nullptr while empty
  std::size_t bytes() const { return bytes_; }
  template <typename T>
  T* as(std::size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<unsigned char*>(ptr_) + byte_offset);
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

#if defined(__CUDACC__)
// A grid-stride loop's first item and step, in int64 (a tensor may hold 2^31 elements).
__device__ inline std::int64_t first_index() {
  return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
}
__device__ inline std::int64_t grid_stride() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }
#endif

}  // namespace ampcheck::kernels::cuda
