// The cuDNN status check and per-thread handle of kernels/cuda/cudnn_handle.h.
#include "kernels/cuda/cudnn_handle.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda/runtime.h"  // stream

namespace ampcheck::kernels::cuda {

void check_cudnn(cudnnStatus_t status, std::string_view call, std::string_view op) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(op) + ": " + std::string(call) + " failed: " + cudnnGetErrorString(status));
}

cudnnDataType_t cudnn_type(DType d, std::string_view op) {
  switch (d) {
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::i64: break;
  }
  throw std::logic_error(std::string(op) + ": cuDNN takes float tensors only, got i64");
}

cudnnHandle_t cudnn_handle(std::string_view op) {
  thread_local cudnnHandle_t h = nullptr;
  if (h == nullptr) {
    cudnnHandle_t made = nullptr;
    check_cudnn(cudnnCreate(&made), "cudnnCreate", op);
    const cudnnStatus_t bound = cudnnSetStream(made, stream());
    if (bound != CUDNN_STATUS_SUCCESS) cudnnDestroy(made);
    check_cudnn(bound, "cudnnSetStream", op);
    h = made;
  }
  return h;
}

}  // namespace ampcheck::kernels::cuda
