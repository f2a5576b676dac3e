// The shared CUDA runtime pieces (kernels/cuda/runtime.h).
#include "kernels/cuda/runtime.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_memory.h"

namespace ampcheck::kernels::cuda {

void check(cudaError_t status, std::string_view call, std::string_view op) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // leave no error behind for the next caller
  throw std::runtime_error(std::string(op) + ": " + std::string(call) + " failed: " + cudaGetErrorName(status) +
                           " (" + cudaGetErrorString(status) + ")");
}

void check_launch(std::string_view kernel, std::string_view op) {
  check(cudaGetLastError(), std::string("launching ") + std::string(kernel), op);
}

cudaStream_t stream() { return nullptr; }

namespace {
std::atomic<CachingAllocator*> g_allocator{nullptr};
}  // namespace

CachingAllocator& allocator() {
  static CachingAllocator* a = [] {
    auto* made = new CachingAllocator(cuda_device_memory(0));  // lives to the end: tensors may outlive statics
    g_allocator = made;
    return made;
  }();
  return *a;
}

bool allocator_stats(AllocatorStats& out) {
  CachingAllocator* a = g_allocator.load();
  if (a == nullptr) return false;
  out = a->stats();
  return true;
}

unsigned int blocks_for(std::int64_t n, unsigned int threads) {
  static const int multiprocessors = [] {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
      cudaGetLastError();
      sms = 80;
    }
    return sms;
  }();
  const std::int64_t wanted = (std::max<std::int64_t>(n, 1) + threads - 1) / threads;
  return static_cast<unsigned int>(std::min<std::int64_t>(wanted, std::int64_t{multiprocessors} * 32));
}

}  // namespace ampcheck::kernels::cuda
