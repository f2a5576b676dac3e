// The recurrent family's CUDA table in a build without CUDA: asking for it says so.
#include "kernels/no_gpu/no_gpu.h"
#include "kernels/rnn_kernels.h"

namespace ampcheck::kernels {

const RnnKernels& RnnKernels::cuda() { no_gpu::unavailable("The CUDA recurrent kernels (cells, cuDNN's RNN)"); }

}  // namespace ampcheck::kernels
