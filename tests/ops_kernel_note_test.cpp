// kernels/kernel_note.h and the op event's `kernel` (engine/ops/registry.h kernel_id):
// notes are kept only while the engine has noting on, taken once, and attached to the id.
#include <gtest/gtest.h>

#include "engine/ops/registry.h"
#include "engine/tensor.h"
#include "kernels/kernel_note.h"

namespace ampcheck {
namespace {

TEST(KernelNote, KeptOnlyWhileNotingAndTakenOnce) {
  kernels::set_noting(false);
  kernels::take_kernel_notes();
  kernels::note_kernel("dropped: nobody listens");
  EXPECT_EQ(kernels::take_kernel_notes(), "");
  kernels::set_noting(true);
  kernels::note_kernel("cublasLt: A f16 B f16 C f16, compute 32F");
  kernels::note_kernel("bias: CUDA kernel");
  EXPECT_EQ(kernels::take_kernel_notes(), "cublasLt: A f16 B f16 C f16, compute 32F; bias: CUDA kernel");
  EXPECT_EQ(kernels::take_kernel_notes(), "");
  kernels::set_noting(false);
}

TEST(KernelNote, TheKernelIdNamesDeviceOpComputeAndNotes) {
  const Tensor half = Tensor::zeros({2}, DType::f16);
  const Tensor dbl = Tensor::zeros({2}, DType::f64);
  EXPECT_EQ(kernel_id("matmul", half), "cpu:matmul:f32");  // f16 storage computes in f32
  EXPECT_EQ(kernel_id("relu_backward", dbl), "cpu:relu_backward:f64");
  EXPECT_EQ(kernel_id("matmul", half, "cublasLt: algo 7"), "cpu:matmul:f32 (cublasLt: algo 7)");
}

}  // namespace
}  // namespace ampcheck
