// The training family's CUDA table in a build without CUDA: asking for it says so.
#include "kernels/no_gpu/no_gpu.h"
#include "kernels/training_kernels.h"

namespace ampcheck::kernels {

const TrainingKernels& TrainingKernels::cuda() { no_gpu::unavailable("The CUDA optimizer and loss-scaler kernels"); }

}  // namespace ampcheck::kernels
