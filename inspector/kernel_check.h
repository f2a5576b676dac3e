// "Is AMP really on?", answered by the kernels: each op instance the AMP policy ran in
// fp16/bf16 against the GPU kernels its calls launched (CUPTI, inspector/kernel_watch.h),
// and each op it kept in fp32 likewise. A library GEMM or convolution whose multiplies
// took another precision, or that ran on CUDA cores where tensor cores were expected, is
// a finding with the kernel's name and the likely reason, read from the op's shapes.
// Pure: it reads the op trace, so the tests build traces by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "inspector/kernel_class.h"
#include "inspector/trace.h"

namespace ampcheck::inspector {

enum class KernelProblem : std::uint8_t {
  wider_kernel,         // the policy said fp16/bf16; the multiplies took f32 (or f64)
  tf32_kernel,          // the policy said fp16/bf16; the multiplies took TF32 (f32 data, 10-bit mantissa)
  other_low_precision,  // the policy said fp16; the kernel took bf16, or the other way
  cuda_cores,           // the policy's fp16/bf16, on CUDA cores where tensor cores were expected
  narrower_kernel,      // the policy said fp32; the multiplies took fp16, bf16 or TF32
};
// "wider_kernel", "tf32_kernel", "other_low_precision", "cuda_cores", "narrower_kernel".
const char* kernel_problem_name(KernelProblem p);

// warning: AMP is not doing what the policy says; note: expected of this op (a depthwise
// convolution computes in f32 on CUDA cores in every framework), listed for the record.
enum class Severity : std::uint8_t { warning, note };
const char* severity_name(Severity s);

struct KernelFinding {
  Severity severity = Severity::warning;
  KernelProblem problem = KernelProblem::wider_kernel;
  std::string instance;  // InstanceStats::name(): "fc1/linear#0", "fc1/linear_grad#0"
  Op op = Op::cast;
  Phase phase = Phase::forward;
  std::string module;
  DType expected = DType::f16;  // what the policy ran the op in
  std::string kernel;           // the kernel's name
  KernelClass cls;
  std::int64_t launches = 0;
  std::string reason;  // the likely reason, in words, with the fix where there is one
  std::string text() const;  // one line: what ran, where the policy said otherwise, and why
};

struct KernelCheck {
  std::vector<KernelFinding> findings;  // warnings first, then notes; each in op instance order
  std::int64_t instances_checked = 0;   // op instances with library multiply kernels to check
  std::int64_t kernels_unread = 0;      // multiply kernels whose precision the name does not say
  std::int64_t warnings() const;
};

KernelCheck check_kernels(const OpTrace& trace);
KernelCheck check_kernels(const std::vector<InstanceStats>& instances);

// What the shapes of an op's inputs say about its matrix products: "M=60 N=3 K=64" and
// the dimensions a tensor-core kernel wants in multiples of 8 that are not; for conv2d the
// channels ("C_in=3 C_out=8") and whether it is depthwise. Empty for other ops.
struct MatrixShape {
  std::string dims;                  // "M=60 N=3 K=64"
  std::vector<std::string> unaligned;  // "N=3", "C_in=3"
  bool depthwise = false;
  double work = 0;                   // multiply-adds of one call (M N K; N C_out C_in/g kh kw OH OW ...)
};
MatrixShape matrix_shape(Op op, const std::vector<Shape>& shapes);

}  // namespace ampcheck::inspector
