// The elementwise family's CUDA table in a build without CUDA: asking for it says so.
#include "kernels/elementwise_kernels.h"
#include "kernels/no_gpu/no_gpu.h"

namespace ampcheck::kernels {

const ElementwiseKernels& ElementwiseKernels::cuda() { no_gpu::unavailable("Elementwise arithmetic"); }

}  // namespace ampcheck::kernels
