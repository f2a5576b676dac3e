// The fused attention family's CUDA table in a build without CUDA: asking for it says so.
#include "kernels/attention_kernels.h"
#include "kernels/no_gpu/no_gpu.h"

namespace ampcheck::kernels {

const AttentionKernels& AttentionKernels::cuda() { no_gpu::unavailable("The CUDA fused attention kernels (cuDNN)"); }

}  // namespace ampcheck::kernels
