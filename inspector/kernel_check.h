// "Is AMP really on?", answered by the kernels: each op instance the AMP policy runs in
// fp16/bf16 against the GPU kernels its calls launched, and each op it keeps in fp32
// likewise. A library GEMM, convolution or attention whose multiplies took another
// precision, or that ran on CUDA cores where tensor cores were expected, is a finding with
// the kernel's name and the likely reason, read from the op's shapes and, where a profile
// recorded them, its inputs' types.
//
// One analysis, two sources: the check reads CheckedInstance, a neutral op instance with
// its kernels. `ampcheck run` builds them from the op trace and CUPTI's records
// (checked_instances below), `ampcheck kernels` from a user's profile
// (inspector/profile_check.h); nothing here knows which. Pure, so the tests build
// instances by hand.
#pragma once

#include <cstdint>
#include <optional>
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

// One GPU kernel (by name) of one op instance: how its name reads, how often it ran and
// for how long, whoever measured it.
struct CheckedKernel {
  std::string name;
  KernelClass cls;
  std::int64_t launches = 0;
  std::uint64_t total_ns = 0;
};

// One op instance as the check reads it.
struct CheckedInstance {
  std::string name;  // "fc1/linear#0"; a profile's "Linear_0/aten::addmm#0"
  std::string type;  // as its framework names it: "linear", "linear_grad", "aten::addmm"
  Op op = Op::cast;  // the op whose policy applies and whose convention `shapes` follow
  Phase phase = Phase::forward;
  std::string module;
  // The dtype its policy runs it in; nothing when there is no one answer (calls in
  // several dtypes, an op the policy does not list): not judged.
  std::optional<DType> expected;
  amp::Reason reason = amp::Reason::off;
  // Whether `expected` is what the user's policy says of a run recorded elsewhere (a
  // profile), rather than what this engine dispatched: the finding's words differ.
  bool intended = false;
  std::vector<Shape> shapes;  // the inputs', in `op`'s convention (matrix_shape)
  // The floating dtype its inputs were recorded in (a profile's "Input type"), and the
  // types as recorded; nothing where not recorded (the engine's own calls: their dtype
  // is `expected`).
  std::optional<DType> recorded_inputs;
  std::string recorded_types;  // "float, float"
  std::vector<CheckedKernel> kernels;
};

// The engine's op instances (with CUPTI's kernels) as the check reads them.
std::vector<CheckedInstance> checked_instances(const std::vector<InstanceStats>& instances);

struct KernelFinding {
  Severity severity = Severity::warning;
  KernelProblem problem = KernelProblem::wider_kernel;
  std::string instance;  // CheckedInstance::name: "fc1/linear#0", "fc1/linear_grad#0"
  std::string type;      // CheckedInstance::type
  Op op = Op::cast;
  Phase phase = Phase::forward;
  std::string module;
  DType expected = DType::f16;  // what the policy ran the op in
  std::string kernel;           // the kernel's name
  KernelClass cls;
  std::int64_t launches = 0;
  std::uint64_t total_ns = 0;  // the kernel's GPU time in this instance
  bool intended = false;       // CheckedInstance::intended
  std::string reason;  // the likely reason, in words, with the fix where there is one
  // A profile's op whose input types were not recorded: what its kernel took is said, but
  // no fallback is claimed (that needs the tensors' dtype), and the finding is a note.
  bool inputs_unseen = false;
  std::string text() const;  // one line: what ran, where the policy said otherwise, and why
};

struct KernelCheck {
  std::vector<KernelFinding> findings;  // warnings first, then notes; each in op instance order
  std::int64_t instances_checked = 0;   // op instances with library multiply kernels to check
  std::int64_t kernels_unread = 0;      // multiply kernels whose precision the name does not say
  std::int64_t warnings() const;
};

KernelCheck check_kernels(const std::vector<CheckedInstance>& instances);
// The engine's: check_kernels(checked_instances(...)).
KernelCheck check_kernels(const OpTrace& trace);
KernelCheck check_kernels(const std::vector<InstanceStats>& instances);

// What the shapes of an op's inputs say about its matrix products: "M=60 N=3 K=64" and
// the dimensions a tensor-core kernel wants in multiples of 8 that are not; for conv2d the
// channels ("C_in=3 C_out=8") and whether it is depthwise. Empty for other ops.
struct MatrixShape {
  std::string dims;                  // "M=60 N=3 K=64"
  std::vector<std::string> unaligned;  // "N=3", "C_in=3"
  bool depthwise = false;
  bool vector = false;               // M = 1 or N = 1: a matrix-vector product, memory-bound
  double work = 0;                   // multiply-adds of one call (M N K; N C_out C_in/g kh kw OH OW ...)
};
// A convolution's output height and width, where known (`out_spatial`, {OH, OW}): the
// work is counted over them; without, over the input's (a stride-1 "same" convolution,
// the engine's).
MatrixShape matrix_shape(Op op, const std::vector<Shape>& shapes, const Shape& out_spatial = {});

}  // namespace ampcheck::inspector
