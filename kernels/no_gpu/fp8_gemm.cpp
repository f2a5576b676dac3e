// The fp8 GEMM's CUDA table in a build without CUDA: asking for it says so.
#include "kernels/fp8_gemm_kernels.h"
#include "kernels/no_gpu/no_gpu.h"

namespace ampcheck::kernels {

const Fp8GemmKernels& Fp8GemmKernels::cuda() { no_gpu::unavailable("the fp8 GEMM (cuBLASLt)"); }

}  // namespace ampcheck::kernels
