// The CUDA device memory of a build without CUDA (kernels/cuda/device_memory.h): the
// factory says so, in the manner of kernels/no_gpu/cuda.cpp.
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_memory.h"

namespace ampcheck::kernels::cuda {

std::unique_ptr<DeviceMemory> cuda_device_memory(int device) {
  throw std::runtime_error("cuda_device_memory(" + std::to_string(device) +
                           ") has no GPU implementation in this build: reconfigure with "
                           "-DAMPCHECK_CUDA=ON on a machine with the CUDA toolkit");
}

bool allocator_stats(AllocatorStats&) { return false; }

}  // namespace ampcheck::kernels::cuda
