// The reduction family's CUDA table in a build without CUDA: asking for it says so.
#include "kernels/no_gpu/no_gpu.h"
#include "kernels/reduce_kernels.h"

namespace ampcheck::kernels {

const ReduceKernels& ReduceKernels::cuda() { no_gpu::unavailable("Reduction (sum, mean, max)"); }

}  // namespace ampcheck::kernels
