// The normalisation and loss family's CUDA table in a build without CUDA: asking for it
// says so.
#include "kernels/no_gpu/no_gpu.h"
#include "kernels/norm_loss_kernels.h"

namespace ampcheck::kernels {

const NormLossKernels& NormLossKernels::cuda() {
  no_gpu::unavailable(
      "The CUDA normalisation and loss kernels (batch_norm, layer_norm, softmax, cross_entropy, mse_loss, embedding, "
      "dropout)");
}

}  // namespace ampcheck::kernels
