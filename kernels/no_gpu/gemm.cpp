// The GEMM family's CUDA table in a build without CUDA: asking for it says so.
#include "kernels/gemm_kernels.h"
#include "kernels/no_gpu/no_gpu.h"

namespace ampcheck::kernels {

const GemmKernels& GemmKernels::cuda() { no_gpu::unavailable("GEMM (matmul, bmm, linear)"); }

}  // namespace ampcheck::kernels
