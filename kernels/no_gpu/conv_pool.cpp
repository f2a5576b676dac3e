// The convolution and pooling family's CUDA table in a build without CUDA: asking for it
// says so.
#include "kernels/conv_pool_kernels.h"
#include "kernels/no_gpu/no_gpu.h"

namespace ampcheck::kernels {

const ConvPoolKernels& ConvPoolKernels::cuda() { no_gpu::unavailable("conv2d and the pools (cuDNN and CUDA kernels)"); }

}  // namespace ampcheck::kernels
