// The numerics family's CUDA table in a build without CUDA: asking for it says so.
#include "kernels/no_gpu/no_gpu.h"
#include "kernels/numerics_kernels.h"

namespace ampcheck::kernels {

const NumericsKernels& NumericsKernels::cuda() { no_gpu::unavailable("The CUDA numerics statistics kernels"); }

}  // namespace ampcheck::kernels
