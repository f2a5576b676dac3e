// The GEMM family on GPU 0 (kernels/gemm_kernels.h) through cuBLASLt.
//
// cuBLASLt multiplies A and B of one dtype: f32, f16 or bf16 with CUBLAS_COMPUTE_32F (no
// TF32, as PyTorch's matmul by default; f16/bf16 run on tensor cores), f64 with
// CUBLAS_COMPUTE_64F. Operands of other dtypes are first converted, exactly (widened), to
// f32 (or f64). C is written in place when cuBLASLt can write its dtype in one rounding
// and nothing needs adding after the product; otherwise the products land in a scratch of
// the compute type and one last kernel adds the bias and rounds once into C, as the CPU
// does.
//
// A batch is cut into runs of batches over which every operand steps by a fixed number of
// matrices (one strided-batched call each; a whole matmul is usually one run). A run
// whose batches all sum into one C matrix (the gradient of a shared operand) is one GEMM
// with the batch folded into k where the layout allows, else per-batch products summed in
// batch order by a small kernel. Plans (descriptors and the heuristic's algorithm) are
// cached per shape, dtypes and alignment; every call notes the algorithm that ran.
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <numeric>  // std::gcd
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "kernels/cuda/cublaslt.h"  // check_lt, lt_handle
#include "kernels/cuda/runtime.h"
#include "kernels/element.h"
#include "kernels/gemm_kernels.h"
#include "kernels/kernel_note.h"
#include "kernels/memory_kernels.h"  // conversions and fills on the device

namespace ampcheck::kernels::cuda {
namespace {


cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// ---- kernels ----------------------------------------------------------------------

// target[e] += parts[0][e] + parts[1][e] + ... in that order (the sum over a run's
// batches that share one C matrix; parts are [count, size]).
template <typename T>
__global__ void sum_parts_kernel(T* target, const T* parts, std::int64_t count, std::int64_t size) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < size;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    T s = target[e];
    for (std::int64_t j = 0; j < count; ++j) s += parts[j * size + e];
    target[e] = s;
  }
}

// c[i] = acc[i] (+ bias[i % n]) in the compute type T, rounded once to c's dtype.
template <typename T>
__global__ void finish_kernel(const void* acc, DType acc_dtype, const void* bias, DType bias_dtype, std::int64_t n,
                              void* c, DType c_dtype, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    T v = load_element<T>(acc, acc_dtype, i);
    if (bias != nullptr) v += load_element<T>(bias, bias_dtype, i % n);
    store_element(c, c_dtype, i, v);
  }
}

// ---- cuBLASLt calls ---------------------------------------------------------------

// One cuBLASLt matmul in the family's row-major terms: `batch` products, operand i at
// a + i * stride_a (elements), and so on.
struct Call {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  DType ab = DType::f32, c_dtype = DType::f32;
  bool beta_one = false;  // C += op(A) op(B), else C = op(A) op(B)
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B and C (see make_plan)
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;
  std::string note;
};

// The largest power of two (at most 256) that divides the address of every matrix of a
// strided batch: what the algorithm may assume of it.
std::uint32_t alignment(const void* p, std::int64_t stride, DType d, std::int64_t batch) {
  std::uintptr_t bits = reinterpret_cast<std::uintptr_t>(p) | 256;
  if (batch > 1) bits |= static_cast<std::uintptr_t>(stride) * element_size(d);
  return static_cast<std::uint32_t>(bits & (~bits + 1));
}

void set_layout(cublasLtMatrixLayout_t& layout, DType d, std::int64_t rows, std::int64_t cols, std::int64_t batch,
                std::int64_t stride, std::string_view op) {
  check_lt(cublasLtMatrixLayoutCreate(&layout, cuda_type(d), static_cast<std::uint64_t>(rows),
                                      static_cast<std::uint64_t>(cols), rows),
           "cublasLtMatrixLayoutCreate", op);
  if (batch > 1) {
    const auto count = static_cast<std::int32_t>(batch);
    check_lt(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
             "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)", op);
    check_lt(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
        "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)", op);
  }
}

// Row-major C[m,n] = op(A) op(B) is, read column-major, C^T[n,m] = op(B)^T op(A)^T; a
// row-major matrix is its transpose column-major, so cuBLASLt is handed our B as its A
// and our A as its B, with the same transpose flags, and computes C^T in place.
Plan make_plan(const Call& c, std::uint32_t align_a, std::uint32_t align_b, std::uint32_t align_c, std::string_view op) {
  const bool f64 = c.ab == DType::f64;
  Plan p;
  check_lt(cublasLtMatmulDescCreate(&p.desc, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, f64 ? CUDA_R_64F : CUDA_R_32F),
           "cublasLtMatmulDescCreate", op);
  const cublasOperation_t op_lt_a = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_lt_b = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_lt_a, sizeof op_lt_a),
           "cublasLtMatmulDescSetAttribute(TRANSA)", op);
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_lt_b, sizeof op_lt_b),
           "cublasLtMatmulDescSetAttribute(TRANSB)", op);
  // Column-major (rows, cols) as stored: B [k, n] is (n, k), B [n, k] is (k, n); A [m, k]
  // is (k, m), A [k, m] is (m, k); C [m, n] is (n, m). Packed: ld = rows.
  set_layout(p.a, c.ab, c.trans_b ? c.k : c.n, c.trans_b ? c.n : c.k, c.batch, c.stride_b, op);
  set_layout(p.b, c.ab, c.trans_a ? c.m : c.k, c.trans_a ? c.k : c.m, c.batch, c.stride_a, op);
  set_layout(p.c, c.c_dtype, c.n, c.m, c.batch, c.stride_c, op);

  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", op);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  try {
    const std::uint64_t max_workspace = std::uint64_t{32} << 20;
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                                  sizeof max_workspace),
             "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)", op);
    // cuBLASLt's A is our B (and its B our A).
    const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}};
    for (const auto& [attr, value] : aligns)
      check_lt(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value),
               "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)", op);
    check_lt(cublasLtMatmulAlgoGetHeuristic(lt_handle(op), p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found),
             "cublasLtMatmulAlgoGetHeuristic", op);
  } catch (...) {
    cublasLtMatmulPreferenceDestroy(pref);  // the first failure is the one to report
    throw;
  }
  check_lt(cublasLtMatmulPreferenceDestroy(pref), "cublasLtMatmulPreferenceDestroy", op);
  if (found == 0)
    throw std::runtime_error(std::string(op) + ": cublasLtMatmulAlgoGetHeuristic found no algorithm for A " +
                             dtype_text(c.ab) + " B " + dtype_text(c.ab) + " C " + dtype_text(c.c_dtype) + ", m " +
                             std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) +
                             ", batch " + std::to_string(c.batch));
  p.algo = result.algo;
  p.workspace = result.workspaceSize;

  std::int32_t algo_id = -1;
  std::uint32_t tile = 0;
  std::uint64_t impl = 0;
  std::size_t written = 0;
  check_lt(cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof algo_id, &written),
           "cublasLtMatmulAlgoConfigGetAttribute(ID)", op);
  check_lt(cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &written),
           "cublasLtMatmulAlgoConfigGetAttribute(TILE_ID)", op);
  check_lt(cublasLtMatmulAlgoCapGetAttribute(&p.algo, CUBLASLT_ALGO_CAP_NUMERICAL_IMPL_FLAGS, &impl, sizeof impl,
                                             &written),
           "cublasLtMatmulAlgoCapGetAttribute(NUMERICAL_IMPL_FLAGS)", op);
  const bool tensor_cores = (impl & CUBLASLT_NUMERICAL_IMPL_FLAGS_TENSOR_OP_MASK) != 0;
  p.note = std::string("cublasLt: A ") + dtype_text(c.ab) + " B " + dtype_text(c.ab) + " C " + dtype_text(c.c_dtype) +
           ", compute " + (f64 ? "64F" : "32F") + ", algo id " + std::to_string(algo_id) + ", tile id " +
           std::to_string(tile) + ", tensor cores " + (tensor_cores ? "yes" : "no");
  return p;
}

// The cached plan of a call's shape, dtypes and alignment (made on first use; plans live
// as long as the process).
const Plan& plan_for(const Call& c, std::string_view op) {
  const std::uint32_t align_a = alignment(c.a, c.stride_a, c.ab, c.batch);
  const std::uint32_t align_b = alignment(c.b, c.stride_b, c.ab, c.batch);
  const std::uint32_t align_c = alignment(c.c, c.stride_c, c.c_dtype, c.batch);
  using Key = std::array<std::int64_t, 14>;
  const Key key{c.trans_a,  c.trans_b,  c.m,        c.n,     c.k,     c.batch, c.stride_a, c.stride_b, c.stride_c,
                static_cast<std::int64_t>(c.ab), static_cast<std::int64_t>(c.c_dtype), align_a, align_b, align_c};
  static std::mutex mu;
  static auto* plans = new std::map<Key, Plan>();  // lives to the end: a GEMM may run during exit
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans->find(key);
  if (it == plans->end()) it = plans->emplace(key, make_plan(c, align_a, align_b, align_c, op)).first;
  return it->second;
}

// Runs one call, in pieces of at most kMaxBatch batches (the layout's batch count is a
// 32-bit number), and notes the algorithm when it differs from the last noted one.
void run(const Call& call, std::string_view op, std::string& last_note) {
  constexpr std::int64_t kMaxBatch = 65535;
  for (std::int64_t first = 0; first < call.batch; first += kMaxBatch) {
    Call piece = call;
    piece.batch = std::min(kMaxBatch, call.batch - first);
    piece.a = static_cast<const char*>(call.a) + first * call.stride_a * static_cast<std::int64_t>(element_size(call.ab));
    piece.b = static_cast<const char*>(call.b) + first * call.stride_b * static_cast<std::int64_t>(element_size(call.ab));
    piece.c = static_cast<char*>(call.c) + first * call.stride_c * static_cast<std::int64_t>(element_size(call.c_dtype));
    const Plan& plan = plan_for(piece, op);
    Scratch workspace;
    void* ws = workspace.reserve(plan.workspace);
    const double one64 = 1.0, beta64 = piece.beta_one ? 1.0 : 0.0;
    const float one32 = 1.0f, beta32 = piece.beta_one ? 1.0f : 0.0f;
    const bool f64 = piece.ab == DType::f64;
    const void* alpha = f64 ? static_cast<const void*>(&one64) : static_cast<const void*>(&one32);
    const void* beta = f64 ? static_cast<const void*>(&beta64) : static_cast<const void*>(&beta32);
    check_lt(cublasLtMatmul(lt_handle(op), plan.desc, alpha, piece.b, plan.a, piece.a, plan.b, beta, piece.c, plan.c,
                            piece.c, plan.c, &plan.algo, ws, plan.workspace, stream()),
             "cublasLtMatmul", op);
    if (plan.note != last_note) {
      note_kernel(plan.note);
      last_note = plan.note;
    }
  }
}

// How far a map's innermost batch dims run with a fixed step: the number of consecutive
// batches (from any multiple of it) whose matrices are step apart.
struct Run {
  std::int64_t length = 1, step = 0;
};
Run run_of(const Broadcast& map, std::int64_t batch) {
  Run r;
  bool stepped = false;
  for (int d = map.rank - 1; d >= 0; --d) {
    if (map.dims[d] == 1) continue;
    if (!stepped) {
      r.step = map.strides[d];
      stepped = true;
    } else if (map.strides[d] != r.step * r.length) {
      return r;
    }
    r.length *= map.dims[d];
  }
  r.length = batch;  // every dim runs: the whole batch, whatever its count
  return r;
}

// A device operand in the dtype cuBLASLt is given: itself, or converted into `scratch`.
const void* operand(const View& v, DType as, Scratch& scratch) {
  if (v.dtype == as) return v.data;
  void* p = scratch.reserve(static_cast<std::size_t>(v.numel()) * element_size(as));
  MemoryKernels::cuda().convert(v, View{p, as, v.shape});
  return p;
}

void gemm(const GemmDesc& d) {
  const std::int64_t count = d.c.numel();
  if (d.m == 0 || d.n == 0 || count == 0) return;
  const bool f64 = d.compute == DType::f64;
  const DType acc = f64 ? DType::f64 : DType::f32;
  const auto cublas_input = [](DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; };
  const DType ab = f64 ? DType::f64 : (d.a.dtype == d.b.dtype && cublas_input(d.a.dtype)) ? d.a.dtype : DType::f32;
  const bool shared_c = !distinct_batches(d.c_batch);
  // cuBLASLt writes C itself when C has the compute type, or the operands' 16-bit dtype
  // with nothing left to add: the product then is rounded once, in its epilogue.
  const bool direct = d.c.dtype == acc || (d.c.dtype == ab && !shared_c && d.bias.data == nullptr);

  Scratch a_copy, b_copy, acc_copy, parts;
  const void* a = operand(d.a, ab, a_copy);
  const void* b = operand(d.b, ab, b_copy);
  void* target = d.c.data;
  const DType target_dtype = direct ? d.c.dtype : acc;
  if (!direct) {
    target = acc_copy.reserve(static_cast<std::size_t>(count) * element_size(acc));
    if (d.accumulate) MemoryKernels::cuda().convert(d.c, View{target, acc, d.c.shape});
  }
  const bool empty = d.batch == 0 || d.k == 0;
  bool beta_one = d.accumulate;
  if (!d.accumulate && (shared_c || empty)) {
    // Sums over several batches (or over nothing) start from zeros.
    MemoryKernels::cuda().fill(View{target, target_dtype, d.c.shape}, 0.0);
    beta_one = true;
  }

  std::string last_note;
  if (!empty) {
    const std::int64_t a_size = d.m * d.k, b_size = d.k * d.n, c_size = d.m * d.n;
    const Run ra = run_of(d.a_batch, d.batch), rb = run_of(d.b_batch, d.batch), rc = run_of(d.c_batch, d.batch);
    const std::int64_t inner = std::gcd(std::gcd(ra.length, rb.length), rc.length);
    const auto es_ab = static_cast<std::int64_t>(element_size(ab)), es_t = static_cast<std::int64_t>(element_size(target_dtype));
    for (std::int64_t first = 0; first < d.batch; first += inner) {
      Call c;
      c.trans_a = d.trans_a;
      c.trans_b = d.trans_b;
      c.m = d.m;
      c.n = d.n;
      c.k = d.k;
      c.batch = inner;
      c.a = static_cast<const char*>(a) + d.a_batch.offset(first) * a_size * es_ab;
      c.b = static_cast<const char*>(b) + d.b_batch.offset(first) * b_size * es_ab;
      c.c = static_cast<char*>(target) + d.c_batch.offset(first) * c_size * es_t;
      c.stride_a = ra.step * a_size;
      c.stride_b = rb.step * b_size;
      c.stride_c = rc.step * c_size;
      c.ab = ab;
      c.c_dtype = target_dtype;
      c.beta_one = beta_one;
      if (inner > 1 && rc.step == 0) {
        if (d.trans_a && !d.trans_b && ra.step == 1 && rb.step == 1) {
          // A run of A^T B into one C: consecutive A's [k, m] and B's [k, n] are one
          // [inner k, m] and [inner k, n], so the sum over the run is one GEMM's over k.
          c.k = inner * d.k;
          c.batch = 1;
          run(c, d.op, last_note);
        } else {
          // Each product into its own part, then the parts summed into C in batch order.
          c.c = parts.reserve(static_cast<std::size_t>(inner * c_size) * element_size(acc));
          c.c_dtype = acc;
          c.stride_c = c_size;
          c.beta_one = false;
          run(c, d.op, last_note);
          void* into = static_cast<char*>(target) + d.c_batch.offset(first) * c_size * es_t;
          if (f64)
            sum_parts_kernel<double><<<blocks_for(c_size), 256, 0, stream()>>>(
                static_cast<double*>(into), static_cast<const double*>(c.c), inner, c_size);
          else
            sum_parts_kernel<float><<<blocks_for(c_size), 256, 0, stream()>>>(
                static_cast<float*>(into), static_cast<const float*>(c.c), inner, c_size);
          check_launch("sum_parts_kernel", d.op);
        }
      } else if (inner > 1 && !d.trans_a && ra.step == 1 && rb.step == 0 && rc.step == 1) {
        // A run of [m, k] matrices times one shared B: one [inner m, k] x B.
        c.m = inner * d.m;
        c.batch = 1;
        run(c, d.op, last_note);
      } else {
        run(c, d.op, last_note);
      }
    }
  }

  if (!direct || d.bias.data != nullptr) {
    const std::int64_t n = d.n;
    if (f64)
      finish_kernel<double><<<blocks_for(count), 256, 0, stream()>>>(target, target_dtype, d.bias.data, d.bias.dtype, n,
                                                                     d.c.data, d.c.dtype, count);
    else
      finish_kernel<float><<<blocks_for(count), 256, 0, stream()>>>(target, target_dtype, d.bias.data, d.bias.dtype, n,
                                                                    d.c.data, d.c.dtype, count);
    check_launch("finish_kernel", d.op);
  }
}

// The column sums as a GEMM: ones[1, rows] x g[rows, cols], so they accumulate in the
// compute type and round once, as every GEMM here does.
void column_sum(const View& g, const View& out, DType compute, const char* op) {
  const std::int64_t cols = out.numel();
  if (cols == 0) return;
  const std::int64_t rows = g.numel() / cols;
  const DType ones_dtype =
      compute == DType::f64 ? DType::f64
      : g.dtype == DType::f32 || g.dtype == DType::f16 || g.dtype == DType::bf16 ? g.dtype
                                                                                 : DType::f32;
  Scratch ones;
  const View ones_view{ones.reserve(static_cast<std::size_t>(rows) * element_size(ones_dtype)), ones_dtype, {1, rows}};
  MemoryKernels::cuda().fill(ones_view, 1.0);
  GemmDesc d;
  d.op = op;
  d.m = 1;
  d.n = cols;
  d.k = rows;
  d.a = ones_view;
  d.b = g;
  d.c = out;
  d.compute = compute;
  gemm(d);
}

}  // namespace
}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels {

const GemmKernels& GemmKernels::cuda() {
  static const GemmKernels k{&cuda::gemm, &cuda::column_sum};
  return k;
}

}  // namespace ampcheck::kernels
