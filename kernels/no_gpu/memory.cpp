// The memory family's CUDA table in a build without CUDA: asking for it says so.
#include "kernels/memory_kernels.h"
#include "kernels/no_gpu/no_gpu.h"

namespace ampcheck::kernels {

const MemoryKernels& MemoryKernels::cuda() { no_gpu::unavailable("CUDA device memory"); }

}  // namespace ampcheck::kernels
