// The fp8 casts' CUDA table in a build without CUDA: asking for it says so.
#include "kernels/fp8_kernels.h"
#include "kernels/no_gpu/no_gpu.h"

namespace ampcheck::kernels {

const Fp8Kernels& Fp8Kernels::cuda() { no_gpu::unavailable("the fp8 casts"); }

}  // namespace ampcheck::kernels
