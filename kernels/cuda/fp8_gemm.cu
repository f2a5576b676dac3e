// The fp8 GEMM on GPU 0 (kernels/fp8_gemm_kernels.h) through cuBLASLt.
//
// cuBLASLt's fp8 matmul (sm_89 and later) takes its A transposed and its B not ("TN", in
// its column-major terms) and leading dimensions that are multiples of 16 bytes. Handed
// our row-major B as its A and our A as its B (kernels/cuda/gemm.cu), that is trans_b set
// and trans_a clear: Linear's forward (X W^T) as it is; dgrad (dY W) and wgrad (dY^T X)
// take a transposed copy of the operand that is the other way round, as TransformerEngine
// keeps a transposed fp8 copy of it. The product lands in binary32 with the two inverse
// scales applied by cuBLASLt (its A and B scale pointers); one last kernel adds C's old
// value and the bias and rounds once into C, in the CPU's order.
#include <cublasLt.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kernels/cuda/cublaslt.h"  // check_lt, lt_handle
#include "kernels/cuda/runtime.h"
#include "kernels/fp8_gemm_kernels.h"
#include "kernels/fp8_kernels.h"  // kMxfp8CpuOnly
#include "kernels/kernel_note.h"

namespace ampcheck::kernels::cuda {
namespace {

cudaDataType_t fp8_type(Fp8Format f) { return f == Fp8Format::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }
const char* fp8_text(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

// out[c, r] = in[r, c] for a rows x cols matrix of bytes.
__global__ void transpose_bytes_kernel(const std::uint8_t* in, std::uint8_t* out, std::int64_t rows, std::int64_t cols) {
  const std::int64_t count = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / cols, c = i % cols;
    out[c * rows + r] = in[i];
  }
}

// c[i] = acc[i] (+ c[i]) (+ bias[i % n]) in binary32, rounded once to c's dtype.
__global__ void finish_kernel(const float* acc, bool accumulate, const void* bias, DType bias_dtype, std::int64_t n,
                              void* c, DType c_dtype, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    fp8_gemm_finish(acc[i], accumulate, bias, bias_dtype, n, c, c_dtype, i);
  }
}

// The descriptors of one call, destroyed with it.
struct Descriptors {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

void fp8_gemm(const Fp8GemmDesc& d) {
  check_fp8_gemm(d);
  if (d.a_block_scales != nullptr)
    throw std::invalid_argument(std::string(d.op) + ": " + kMxfp8CpuOnly);
  const std::int64_t count = d.m * d.n;
  if (count == 0) return;
  const std::string_view op = d.op;
  Scratch acc_buffer(static_cast<std::size_t>(count) * sizeof(float));
  auto* acc = static_cast<float*>(acc_buffer.reserve(static_cast<std::size_t>(count) * sizeof(float)));
  std::string note = std::string("cublasLt fp8: A ") + fp8_text(d.a_format) + " B " + fp8_text(d.b_format) +
                     " D f32, compute 32F, fast accumulation " + (d.split_accumulator ? "off" : "on");
  if (d.k == 0) {
    check(cudaMemsetAsync(acc, 0, static_cast<std::size_t>(count) * sizeof(float), stream()), "cudaMemsetAsync", op);
  } else {
    // Our A [m, k] (not transposed) and B [n, k] (transposed): transpose what is not.
    Scratch a_t, b_t;
    const std::uint8_t* a = d.a;
    const std::uint8_t* b = d.b;
    if (d.trans_a) {  // A stored [k, m]
      auto* t = static_cast<std::uint8_t*>(a_t.reserve(static_cast<std::size_t>(d.m * d.k)));
      transpose_bytes_kernel<<<blocks_for(d.m * d.k), 256, 0, stream()>>>(d.a, t, d.k, d.m);
      check_launch("transpose_bytes_kernel", op);
      a = t;
    }
    if (!d.trans_b) {  // B stored [k, n]
      auto* t = static_cast<std::uint8_t*>(b_t.reserve(static_cast<std::size_t>(d.n * d.k)));
      transpose_bytes_kernel<<<blocks_for(d.n * d.k), 256, 0, stream()>>>(d.b, t, d.k, d.n);
      check_launch("transpose_bytes_kernel", op);
      b = t;
    }
    // The inverse scales where cuBLASLt reads them: device memory.
    Scratch scales_buffer(2 * sizeof(float));
    auto* scales = static_cast<float*>(scales_buffer.reserve(2 * sizeof(float)));
    const float host_scales[2] = {d.b_scale_inv, d.a_scale_inv};  // cuBLASLt's A is our B
    check(cudaMemcpyAsync(scales, host_scales, sizeof host_scales, cudaMemcpyHostToDevice, stream()), "cudaMemcpyAsync",
          op);

    Descriptors x;
    check_lt(cublasLtMatmulDescCreate(&x.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", op);
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t),
             "cublasLtMatmulDescSetAttribute(TRANSA)", op);
    check_lt(cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n),
             "cublasLtMatmulDescSetAttribute(TRANSB)", op);
    const float* scale_lt_a = scales;
    const float* scale_lt_b = scales + 1;
    check_lt(cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_lt_a,
                                            sizeof scale_lt_a),
             "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)", op);
    check_lt(cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_lt_b,
                                            sizeof scale_lt_b),
             "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)", op);
    const std::int8_t fast = d.split_accumulator ? 0 : 1;
    check_lt(cublasLtMatmulDescSetAttribute(x.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast),
             "cublasLtMatmulDescSetAttribute(FAST_ACCUM)", op);
    // Column-major: cuBLASLt's A is our B [n, k] row-major = (k, n) col-major, read
    // transposed; its B is our A [m, k] = (k, m); D is our C [m, n] = (n, m).
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    check_lt(cublasLtMatrixLayoutCreate(&x.a, fp8_type(d.b_format), u(d.k), u(d.n), d.k), "cublasLtMatrixLayoutCreate",
             op);
    check_lt(cublasLtMatrixLayoutCreate(&x.b, fp8_type(d.a_format), u(d.k), u(d.m), d.k), "cublasLtMatrixLayoutCreate",
             op);
    check_lt(cublasLtMatrixLayoutCreate(&x.d, CUDA_R_32F, u(d.n), u(d.m), d.n), "cublasLtMatrixLayoutCreate", op);
    check_lt(cublasLtMatmulPreferenceCreate(&x.pref), "cublasLtMatmulPreferenceCreate", op);
    const std::uint64_t max_workspace = std::uint64_t{32} << 20;
    check_lt(cublasLtMatmulPreferenceSetAttribute(x.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                                  sizeof max_workspace),
             "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)", op);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(lt_handle(op), x.desc, x.a, x.b, x.d, x.d, x.pref, 1, &result, &found);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0)
      throw std::runtime_error(std::string(op) + ": cuBLASLt has no fp8 GEMM for A " + fp8_text(d.a_format) + " B " +
                               fp8_text(d.b_format) + ", m " + std::to_string(d.m) + " n " + std::to_string(d.n) +
                               " k " + std::to_string(d.k) + " on this GPU (fp8 needs compute capability 8.9 or "
                               "later, and k and n multiples of 16)");
    Scratch workspace;
    void* ws = workspace.reserve(result.workspaceSize);
    const float one = 1.0f, zero = 0.0f;
    check_lt(cublasLtMatmul(lt_handle(op), x.desc, &one, b, x.a, a, x.b, &zero, acc, x.d, acc, x.d, &result.algo, ws,
                            result.workspaceSize, stream()),
             "cublasLtMatmul", op);
    std::int32_t algo_id = -1;
    std::size_t written = 0;
    check_lt(cublasLtMatmulAlgoConfigGetAttribute(&result.algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof algo_id,
                                                  &written),
             "cublasLtMatmulAlgoConfigGetAttribute(ID)", op);
    note += ", algo id " + std::to_string(algo_id) + ", tensor cores yes";
  }
  finish_kernel<<<blocks_for(count), 256, 0, stream()>>>(acc, d.accumulate, d.bias.data, d.bias.dtype, d.n, d.c.data,
                                                         d.c.dtype, count);
  check_launch("finish_kernel", op);
  note_kernel(note);
}

}  // namespace
}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels {

const Fp8GemmKernels& Fp8GemmKernels::cuda() {
  static const Fp8GemmKernels k{&cuda::fp8_gemm};
  return k;
}

}  // namespace ampcheck::kernels
