// The CUDA device as the caching allocator sees it (kernels/caching_allocator.h):
// cudaMalloc/cudaFree and events on one GPU. A build without CUDA links
// kernels/no_gpu/device_memory.cpp, whose factory says so.
#pragma once

#include <memory>

#include "kernels/caching_allocator.h"

namespace ampcheck::kernels::cuda {

// DeviceMemory for GPU `device` (0-based). Streams are cudaStream_t values (0: the
// legacy default stream). Throws std::runtime_error when the GPU does not exist or this
// build has no CUDA; each call it makes later throws naming the failed CUDA call.
std::unique_ptr<DeviceMemory> cuda_device_memory(int device);

// The statistics of GPU 0's caching allocator (kernels/cuda/runtime.h), when a tensor
// has been allocated there; false otherwise (and always in a build without CUDA).
bool allocator_stats(AllocatorStats& out);

}  // namespace ampcheck::kernels::cuda
