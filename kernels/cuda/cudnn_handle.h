// What every cuDNN call of the CUDA kernels shares (conv.cu, attention.cu, rnn.cu): a status
// turned into an error that names the op and the call, the calling thread's handle, and
// the data type of a dtype.
#pragma once

#include <cudnn.h>

#include <string_view>

#include "kernels/dtype.h"

namespace ampcheck::kernels::cuda {

// cuDNN's data type of a float dtype; i64 throws std::logic_error naming `op`.
cudnnDataType_t cudnn_type(DType d, std::string_view op);

// Throws std::runtime_error "<op>: <call> failed: <cuDNN's status text>". Success returns.
void check_cudnn(cudnnStatus_t status, std::string_view call, std::string_view op);

// The calling thread's cuDNN handle (a handle must not be used by two threads at once),
// bound to the engine's stream (kernels/cuda/runtime.h), made on the thread's first call;
// `op` names the op in the error when making it fails. Never destroyed: a thread may call
// cuDNN until the process ends, and destroying a handle after the CUDA runtime has shut
// down fails.
cudnnHandle_t cudnn_handle(std::string_view op);

}  // namespace ampcheck::kernels::cuda
