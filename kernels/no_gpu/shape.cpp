// The shape family's CUDA table in a build without CUDA: asking for it says so.
#include "kernels/no_gpu/no_gpu.h"
#include "kernels/shape_kernels.h"

namespace ampcheck::kernels {

const ShapeKernels& ShapeKernels::cuda() { no_gpu::unavailable("permute, concat and slice"); }

}  // namespace ampcheck::kernels
