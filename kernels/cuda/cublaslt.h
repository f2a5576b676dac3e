// What every cuBLASLt call of the CUDA kernels shares: its status turned into an error that
// names the op and the call, and the process's one handle.
#pragma once

#include <cublasLt.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace ampcheck::kernels::cuda {

// Throws "<op>: <call> failed: <status name> (<status text>)".
inline void check_lt(cublasStatus_t status, const char* call, std::string_view op) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw std::runtime_error(std::string(op) + ": " + call + " failed: " + cublasLtGetStatusName(status) + " (" +
                           cublasLtGetStatusString(status) + ")");
}

// One handle for the process: it holds no per-call state, and creating it costs.
inline cublasLtHandle_t lt_handle(std::string_view op) {
  static const cublasLtHandle_t h = [op] {
    cublasLtHandle_t created = nullptr;
    check_lt(cublasLtCreate(&created), "cublasLtCreate", op);
    return created;
  }();
  return h;
}

}  // namespace ampcheck::kernels::cuda
