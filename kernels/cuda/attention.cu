// scaled_dot_product_attention on GPU 0 (kernels/attention_kernels.h): the forward and the
// backward each one cuDNN execution plan, built through cuDNN's backend graph API
// (cudnnBackend*): no cudnn_frontend, the descriptors set attribute by attribute here.
//
// Which graph: cuDNN 9.19's dedicated SDPA operation (CUDNN_BACKEND_OPERATION_SDPA_FWD/
// BWD_DESCRIPTOR) takes no additive bias and no causal flag (those come as sub-graphs from
// 9.21 on), so both passes are cuDNN's runtime-fusion attention pattern, the graph
// cudnn-frontend's composite sdpa / sdpa_backward nodes lower to, which cuDNN recognises
// and runs as one flash-attention kernel that keeps S and P on chip:
//   forward   S = matmul(Q, K^T) * scale [+ bias] [causal: BINARY_SELECT(S, -inf, row >= col)]
//             M = max_j S; E = exp(S - M); Z = sum_j E; Stats = M + log Z;
//             P = E / Z (rounded to the dtype); O = matmul(P, V)
//   backward  D = sum_d (dO * O); S' as the forward's S, minus Stats, masked; P = exp(S');
//             dV = matmul(P^T, dO); dP = matmul(dO, V^T); dS = (dP - D) * P * scale;
//             dK = matmul(dS^T, Q); dQ = matmul(dS, K) into an f32 accumulator, then copied
// with f32 compute everywhere and every intermediate virtual (f32; P^T and dS^T in the
// dtype, as the matmuls take them). D and the dQ accumulator are f32 tensors of our own
// (scratch), as cudnn-frontend keeps them in its workspace.
//
// fused_problem() decides, for a dtype and shape, whether these plans exist: the static
// limits first (dtype, head dims, compute capability, cuDNN version), then it builds both
// plans, so a graph cuDNN refuses is a reason, said before forward() would throw it. Plans
// (and refusals) are cached per pass, dtype, shape, causality and mask layout; the first
// engine config of cuDNN's heuristics (mode A) that finalizes is the plan, its workspace
// from the caching allocator, run on stream(). Every call notes the engine that ran.
//
// The additive mask is a bias tensor [1 or batch, 1 or heads, q_len, kv_len], packed, of
// its own dtype (the inputs' or f32). A mask in that layout is read in place; any other
// (a broadcast query or key dim, padded rows, a misaligned pointer) is first gathered into
// a packed scratch of that shape by a kernel of our own, bit for bit.
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/attention_kernels.h"
#include "kernels/cuda/cuda.h"           // probe: device 0's compute capability
#include "kernels/cuda/cudnn_handle.h"   // check_cudnn, cudnn_handle
#include "kernels/cuda/gpu_libraries.h"  // gpu_library_problem
#include "kernels/cuda/runtime.h"        // check, check_launch, stream, Scratch, blocks_for
#include "kernels/kernel_note.h"

namespace ampcheck::kernels::cuda {
namespace {

using i64 = std::int64_t;

constexpr const char* kOp = "scaled_dot_product_attention";

enum class Pass { forward, backward };
const char* pass_name(Pass p) { return p == Pass::forward ? "fprop" : "bprop"; }

// ---------------------------------------------------------------------------------
// The shape of a call, as the plans depend on it

// The bias tensor the graph takes: [batch or 1, heads or 1, q_len, kv_len], packed.
struct BiasShape {
  i64 batch = 1, heads = 1;
};

BiasShape bias_shape(const AttentionShape& s) {
  return {s.batch == 1 || s.mask_strides[0] == 0 ? 1 : s.batch, s.heads == 1 || s.mask_strides[1] == 0 ? 1 : s.heads};
}

// Whether the mask's strides are those of the packed bias tensor (a dim of size 1 may
// have any stride).
bool mask_is_packed(const AttentionShape& s) {
  const BiasShape b = bias_shape(s);
  const i64 row = s.kv_len, head = s.q_len * s.kv_len, batch = b.heads * head;
  return (s.kv_len == 1 || s.mask_strides[3] == 1) && (s.q_len == 1 || s.mask_strides[2] == row) &&
         (b.heads == 1 || s.mask_strides[1] == head) && (b.batch == 1 || s.mask_strides[0] == batch);
}

// What a plan is built for: the pass and all the graph depends on (the scale is a
// by-value scalar given at execution).
struct Problem {
  Pass pass;
  DType dtype;
  AttentionShape shape;
  bool has_mask;
  DType mask_dtype;
};

using PlanKey = std::array<i64, 13>;

PlanKey key_of(const Problem& p) {
  const BiasShape b = p.has_mask ? bias_shape(p.shape) : BiasShape{0, 0};
  const AttentionShape& s = p.shape;
  return {static_cast<i64>(p.pass), static_cast<i64>(p.dtype), s.batch, s.heads, s.q_len, s.kv_len, s.head_dim,
          s.value_dim, s.causal ? 1 : 0, p.has_mask ? 1 : 0, p.has_mask ? static_cast<i64>(p.mask_dtype) : -1,
          b.batch, b.heads};
}

// ---------------------------------------------------------------------------------
// Backend descriptors

// One backend descriptor, owned: created in the constructor, destroyed with it.
class Descriptor {
 public:
  Descriptor(cudnnBackendDescriptorType_t type, const char* what) {
    check_cudnn(cudnnBackendCreateDescriptor(type, &d_), std::string("cudnnBackendCreateDescriptor(") + what + ")",
                kOp);
  }
  ~Descriptor() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

void set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
              i64 count, const void* values, const char* what) {
  check_cudnn(cudnnBackendSetAttribute(d, name, type, count, values),
              std::string("cudnnBackendSetAttribute(") + what + ")", kOp);
}
void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value,
              const char* what) {
  set_attr(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
}
void finalize(cudnnBackendDescriptor_t d, const std::string& what) {
  check_cudnn(cudnnBackendFinalize(d), "cudnnBackendFinalize(" + what + ")", kOp);
}

// Tensor ids: the graph's inputs and outputs (the variant pack names them), then the
// virtual tensors numbered from kFirstVirtual.
enum Uid : i64 {
  kQ = 1, kK, kV, kO, kStats, kBias, kScale, kNegInf, kGradO, kGradQ, kGradK, kGradV, kOne, kRowDot, kGradQAccum,
  kFirstVirtual = 100
};

// A tensor's dims and strides: 4-d, a by-value scalar too (a pointwise operation's
// operands have one rank).
struct Layout {
  std::vector<i64> dims, strides;
};
// [a, b, rows, cols], row-major.
Layout packed(i64 a, i64 b, i64 rows, i64 cols) {
  return {{a, b, rows, cols}, {b * rows * cols, rows * cols, cols, 1}};
}
// The packed [a, b, rows, cols] read as its transpose [a, b, cols, rows].
Layout transposed(i64 a, i64 b, i64 rows, i64 cols) {
  return {{a, b, cols, rows}, {b * rows * cols, rows * cols, 1, cols}};
}
const Layout kScalar{{1, 1, 1, 1}, {1, 1, 1, 1}};

// An operation graph under construction: every descriptor it makes is kept until the
// plan built from it is gone (the plan refers to the graph, its operations and tensors).
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // Destroys the descriptors newest first: each before those it refers to.
  ~Graph() {
    while (!owned_.empty()) owned_.pop_back();
  }

  cudnnBackendDescriptor_t tensor(i64 uid, cudnnDataType_t type, const Layout& l, bool is_virtual,
                                  bool by_value = false) {
    const cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    const i64 alignment = 16;
    const auto rank = static_cast<i64>(l.dims.size());
    set_attr(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "CUDNN_ATTR_TENSOR_DATA_TYPE");
    set_attr(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, l.dims.data(), "CUDNN_ATTR_TENSOR_DIMENSIONS");
    set_attr(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, l.strides.data(), "CUDNN_ATTR_TENSOR_STRIDES");
    set_attr(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "CUDNN_ATTR_TENSOR_UNIQUE_ID");
    set_attr(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT");
    if (is_virtual)
      set_attr(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "CUDNN_ATTR_TENSOR_IS_VIRTUAL");
    if (by_value)
      set_attr(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "CUDNN_ATTR_TENSOR_IS_BY_VALUE");
    finalize(t, "tensor " + std::to_string(uid));
    return t;
  }
  // An intermediate: virtual, f32 unless said otherwise.
  cudnnBackendDescriptor_t virt(const Layout& l, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return tensor(next_uid_++, type, l, /*is_virtual=*/true);
  }
  // A host f32 scalar handed by value at execution.
  cudnnBackendDescriptor_t scalar(i64 uid) { return tensor(uid, CUDNN_DATA_FLOAT, kScalar, false, /*by_value=*/true); }

  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    const cudnnBackendDescriptor_t desc = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set_attr(desc, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "CUDNN_ATTR_MATMUL_COMP_TYPE");
    finalize(desc, "matmul");
    const cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "CUDNN_ATTR_OPERATION_MATMUL_ADESC");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "CUDNN_ATTR_OPERATION_MATMUL_BDESC");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "CUDNN_ATTR_OPERATION_MATMUL_CDESC");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, desc, "CUDNN_ATTR_OPERATION_MATMUL_DESC");
    add(op, "matmul operation");
  }

  // y = mode(x[, b[, t]]), computed in `compute` (axis: GEN_INDEX's dim).
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                 cudnnBackendDescriptor_t b = nullptr, cudnnBackendDescriptor_t t = nullptr,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT, i64 axis = -1) {
    const cudnnBackendDescriptor_t desc = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    set_attr(desc, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "CUDNN_ATTR_POINTWISE_MODE");
    set_attr(desc, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute, "CUDNN_ATTR_POINTWISE_MATH_PREC");
    if (axis >= 0) set_attr(desc, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "CUDNN_ATTR_POINTWISE_AXIS");
    finalize(desc, "pointwise");
    const cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc, "CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR");
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "CUDNN_ATTR_OPERATION_POINTWISE_XDESC");
    if (b != nullptr) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "CUDNN_ATTR_OPERATION_POINTWISE_BDESC");
    if (t != nullptr) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, "CUDNN_ATTR_OPERATION_POINTWISE_TDESC");
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "CUDNN_ATTR_OPERATION_POINTWISE_YDESC");
    add(op, "pointwise operation");
  }

  // y = reduce(x) over the dims where y has size 1.
  void reduction(cudnnReduceTensorOp_t reduce, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    const cudnnBackendDescriptor_t desc = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set_attr(desc, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce,
             "CUDNN_ATTR_REDUCTION_OPERATOR");
    set_attr(desc, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "CUDNN_ATTR_REDUCTION_COMP_TYPE");
    finalize(desc, "reduction");
    const cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc, "CUDNN_ATTR_OPERATION_REDUCTION_DESC");
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "CUDNN_ATTR_OPERATION_REDUCTION_XDESC");
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "CUDNN_ATTR_OPERATION_REDUCTION_YDESC");
    add(op, "reduction operation");
  }

  // y = x seen through y's dims and strides (a transpose: no data moves).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    const cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "CUDNN_ATTR_OPERATION_RESHAPE_XDESC");
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "CUDNN_ATTR_OPERATION_RESHAPE_YDESC");
    add(op, "reshape operation");
  }

  // The operation graph of the operations added so far, finalized for `handle`.
  cudnnBackendDescriptor_t operation_graph(cudnnHandle_t handle) {
    const cudnnBackendDescriptor_t g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    set_attr(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<i64>(ops_.size()),
             ops_.data(), "CUDNN_ATTR_OPERATIONGRAPH_OPS");
    set_attr(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "CUDNN_ATTR_OPERATIONGRAPH_HANDLE");
    finalize(g, "operation graph");
    return g;
  }

  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type, const char* what) {
    owned_.push_back(std::make_unique<Descriptor>(type, what));
    return owned_.back()->get();
  }

 private:
  void add(cudnnBackendDescriptor_t op, const char* what) {
    finalize(op, what);
    ops_.push_back(op);
  }

  std::vector<std::unique_ptr<Descriptor>> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  i64 next_uid_ = kFirstVirtual;
};

// ---------------------------------------------------------------------------------
// The two graphs

// cuDNN's softmax masks with -inf from 9.10 on; earlier versions want the lowest float.
float masked_score() {
  return cudnnGetVersion() >= 91000 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::lowest();
}

// The scores S = (Q K^T) * scale [+ bias] [causally masked], [b, h, s_q, s_kv] f32 virtual;
// `subtract`, when given (the backward's Stats), is taken off before the causal mask, where
// cudnn-frontend's backward takes it.
cudnnBackendDescriptor_t scores(Graph& g, const Problem& p, cudnnBackendDescriptor_t q, cudnnBackendDescriptor_t kt,
                                cudnnBackendDescriptor_t scale, cudnnBackendDescriptor_t subtract) {
  const AttentionShape& s = p.shape;
  const Layout score = packed(s.batch, s.heads, s.q_len, s.kv_len);
  cudnnBackendDescriptor_t x = g.virt(score);
  g.matmul(q, kt, x);
  cudnnBackendDescriptor_t scaled = g.virt(score);
  g.pointwise(CUDNN_POINTWISE_MUL, x, scaled, scale);
  x = scaled;
  if (p.has_mask) {
    const BiasShape bs = bias_shape(s);
    const cudnnBackendDescriptor_t bias =
        g.tensor(kBias, cudnn_type(p.mask_dtype, kOp), packed(bs.batch, bs.heads, s.q_len, s.kv_len), false);
    cudnnBackendDescriptor_t biased = g.virt(score);
    g.pointwise(CUDNN_POINTWISE_ADD, x, biased, bias);
    x = biased;
  }
  if (subtract != nullptr) {
    cudnnBackendDescriptor_t less = g.virt(score);
    g.pointwise(CUDNN_POINTWISE_SUB, x, less, subtract);
    x = less;
  }
  if (s.causal) {  // keep S_ij where i >= j (top-left aligned), else the masked score
    const cudnnBackendDescriptor_t row = g.virt(score, CUDNN_DATA_INT32), col = g.virt(score, CUDNN_DATA_INT32);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, row, nullptr, nullptr, CUDNN_DATA_INT32, 2);
    g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, col, nullptr, nullptr, CUDNN_DATA_INT32, 3);
    const cudnnBackendDescriptor_t keep = g.virt(score, CUDNN_DATA_BOOLEAN);
    g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, nullptr, CUDNN_DATA_BOOLEAN);
    cudnnBackendDescriptor_t masked = g.virt(score);
    g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, masked, g.scalar(kNegInf), keep);
    x = masked;
  }
  return x;
}

// Q, K^T and the scale, as both passes take them: K [b, h, s_kv, d] is read as K^T
// [b, h, d, s_kv] (the first matmul's B).
struct Inputs {
  cudnnBackendDescriptor_t q, kt, scale;
};
Inputs inputs(Graph& g, const Problem& p) {
  const AttentionShape& s = p.shape;
  const cudnnDataType_t t = cudnn_type(p.dtype, kOp);
  return {g.tensor(kQ, t, packed(s.batch, s.heads, s.q_len, s.head_dim), false),
          g.tensor(kK, t, transposed(s.batch, s.heads, s.kv_len, s.head_dim), false), g.scalar(kScale)};
}

void forward_graph(Graph& g, const Problem& p) {
  const AttentionShape& s = p.shape;
  const cudnnDataType_t t = cudnn_type(p.dtype, kOp);
  const Layout score = packed(s.batch, s.heads, s.q_len, s.kv_len), row = packed(s.batch, s.heads, s.q_len, 1);
  const Inputs in = inputs(g, p);
  const cudnnBackendDescriptor_t x = scores(g, p, in.q, in.kt, in.scale, nullptr);
  // Softmax with its statistics: Stats = max + log(sum(exp(S - max))), P = exp(S - max) / sum.
  const cudnnBackendDescriptor_t max = g.virt(row), shifted = g.virt(score), e = g.virt(score), sum = g.virt(row),
                                 log_sum = g.virt(row);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, x, max);
  g.pointwise(CUDNN_POINTWISE_SUB, x, shifted, max);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, e);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, max, g.tensor(kStats, CUDNN_DATA_FLOAT, row, false), log_sum);
  const cudnnBackendDescriptor_t probs = g.virt(score, t);  // P in the dtype: the second matmul's A
  g.pointwise(CUDNN_POINTWISE_DIV, e, probs, sum);
  g.matmul(probs, g.tensor(kV, t, packed(s.batch, s.heads, s.kv_len, s.value_dim), false),
           g.tensor(kO, t, packed(s.batch, s.heads, s.q_len, s.value_dim), false));
}

void backward_graph(Graph& g, const Problem& p) {
  const AttentionShape& s = p.shape;
  const i64 b = s.batch, h = s.heads, sq = s.q_len, skv = s.kv_len, d = s.head_dim, dv = s.value_dim;
  const cudnnDataType_t t = cudnn_type(p.dtype, kOp);
  const Layout score = packed(b, h, sq, skv), score_t = transposed(b, h, sq, skv), row = packed(b, h, sq, 1);
  const Inputs in = inputs(g, p);
  const cudnnBackendDescriptor_t o = g.tensor(kO, t, packed(b, h, sq, dv), false),
                                 d_o = g.tensor(kGradO, t, packed(b, h, sq, dv), false),
                                 stats = g.tensor(kStats, CUDNN_DATA_FLOAT, row, false);
  // D = rowsum(dO * O) (times 1: the dropout scale's place), an f32 tensor of our own.
  const cudnnBackendDescriptor_t d_o_o = g.virt(packed(b, h, sq, dv)), dot = g.virt(row),
                                 row_dot = g.tensor(kRowDot, CUDNN_DATA_FLOAT, row, false);
  g.pointwise(CUDNN_POINTWISE_MUL, d_o, d_o_o, o);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_o_o, dot);
  g.pointwise(CUDNN_POINTWISE_MUL, dot, row_dot, g.scalar(kOne));
  // P = exp(S - Stats), recomputed.
  const cudnnBackendDescriptor_t probs = g.virt(score);
  g.pointwise(CUDNN_POINTWISE_EXP, scores(g, p, in.q, in.kt, in.scale, stats), probs);
  // dV = P^T dO.
  const cudnnBackendDescriptor_t probs_t = g.virt(score_t, t);
  g.reshape(probs, probs_t);
  g.matmul(probs_t, d_o, g.tensor(kGradV, t, packed(b, h, skv, dv), false));
  // dS = (dO V^T - D) * P * scale: V [b, h, s_kv, dv] read as V^T.
  const cudnnBackendDescriptor_t vt = g.tensor(kV, t, transposed(b, h, skv, dv), false);
  const cudnnBackendDescriptor_t d_p = g.virt(score), centred = g.virt(score), d_s_unscaled = g.virt(score),
                                 d_s = g.virt(score);
  g.matmul(d_o, vt, d_p);
  g.pointwise(CUDNN_POINTWISE_SUB, d_p, centred, row_dot);
  g.pointwise(CUDNN_POINTWISE_MUL, centred, d_s_unscaled, probs);
  g.pointwise(CUDNN_POINTWISE_MUL, d_s_unscaled, d_s, in.scale);
  // dK = dS^T Q.
  const cudnnBackendDescriptor_t d_s_t = g.virt(score_t, t);
  g.reshape(d_s, d_s_t);
  g.matmul(d_s_t, in.q, g.tensor(kGradK, t, packed(b, h, skv, d), false));
  // dQ = dS K, accumulated in f32 (a tensor of our own), then rounded into dQ.
  const cudnnBackendDescriptor_t k = g.virt(packed(b, h, skv, d), t),
                                 accum = g.tensor(kGradQAccum, CUDNN_DATA_FLOAT, packed(b, h, sq, d), false);
  g.reshape(in.kt, k);
  g.matmul(d_s, k, accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, accum, g.tensor(kGradQ, t, packed(b, h, sq, d), false));
}

// ---------------------------------------------------------------------------------
// Plans

struct Plan {
  Graph graph;  // every descriptor the plan refers to
  cudnnBackendDescriptor_t plan = nullptr;
  std::size_t workspace = 0;
  i64 engine = -1;
  bool nondeterministic = false;
};

// The engine of a finalized engine config: its index and whether it is nondeterministic.
void describe_engine(Plan& p, cudnnBackendDescriptor_t config) {
  cudnnBackendDescriptor_t engine = p.graph.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
  i64 count = 0;
  check_cudnn(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                                       &engine),
              "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINECFG_ENGINE)", kOp);
  check_cudnn(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count, &p.engine),
              "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINE_GLOBAL_INDEX)", kOp);
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  check_cudnn(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                       static_cast<i64>(notes.size()), &count, notes.data()),
              "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINE_NUMERICAL_NOTE)", kOp);
  for (i64 i = 0; i < count && i < static_cast<i64>(notes.size()); ++i)
    if (notes[static_cast<std::size_t>(i)] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) p.nondeterministic = true;
}

// The engine configs cuDNN's heuristics (mode A) rank for the graph, best first.
std::vector<cudnnBackendDescriptor_t> heuristic_configs(Plan& p, cudnnBackendDescriptor_t op_graph) {
  const cudnnBackendDescriptor_t heur = p.graph.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, op_graph, "CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH");
  set_attr(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "CUDNN_ATTR_ENGINEHEUR_MODE");
  finalize(heur, "engine heuristics");
  i64 count = 0;
  check_cudnn(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                       nullptr),
              "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS count)", kOp);
  std::vector<cudnnBackendDescriptor_t> configs;
  for (i64 i = 0; i < count; ++i) configs.push_back(p.graph.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
  if (count == 0) return configs;
  i64 returned = 0;
  check_cudnn(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                       &returned, configs.data()),
              "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)", kOp);
  configs.resize(static_cast<std::size_t>(returned < count ? returned : count));
  return configs;
}

// The graph of the problem with the first engine config that finalizes into a plan.
std::unique_ptr<Plan> build_plan(const Problem& problem) {
  auto p = std::make_unique<Plan>();
  if (problem.pass == Pass::forward)
    forward_graph(p->graph, problem);
  else
    backward_graph(p->graph, problem);
  const cudnnHandle_t handle = cudnn_handle(kOp);
  const cudnnBackendDescriptor_t op_graph = p->graph.operation_graph(handle);
  const std::vector<cudnnBackendDescriptor_t> configs = heuristic_configs(*p, op_graph);
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  for (const cudnnBackendDescriptor_t config : configs) {
    const cudnnBackendDescriptor_t plan = p->graph.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
    set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "CUDNN_ATTR_EXECUTION_PLAN_HANDLE");
    set_desc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config, "CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG");
    last = cudnnBackendFinalize(plan);
    if (last != CUDNN_STATUS_SUCCESS) continue;
    i64 count = 0, bytes = 0;
    check_cudnn(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
                                         &bytes),
                "cudnnBackendGetAttribute(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)", kOp);
    p->plan = plan;
    p->workspace = static_cast<std::size_t>(bytes);
    describe_engine(*p, config);
    return p;
  }
  if (configs.empty())
    throw std::runtime_error(std::string(kOp) + ": cuDNN's heuristics (mode A) offer no engine config for the " +
                             pass_name(problem.pass) + " graph");
  throw std::runtime_error(std::string(kOp) + ": none of the " + std::to_string(configs.size()) +
                           " engine configs of cuDNN's heuristics (mode A) finalizes for the " +
                           pass_name(problem.pass) + " graph (cudnnBackendFinalize(execution plan): " +
                           cudnnGetErrorString(last) + ")");
}

// A plan, or why cuDNN gave none (the error of its building).
struct Outcome {
  std::shared_ptr<const Plan> plan;
  std::string problem;
};

// The problem's outcome: built on the first ask, then cached (refusals too).
Outcome outcome(const Problem& problem) {
  static std::mutex mutex;
  static std::map<PlanKey, Outcome> cache;
  const PlanKey key = key_of(problem);
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Outcome o;
  try {
    o.plan = build_plan(problem);
  } catch (const std::exception& e) {
    o.problem = e.what();
  }
  return cache.emplace(key, o).first->second;
}

std::shared_ptr<const Plan> plan_for(const Problem& problem) {
  Outcome o = outcome(problem);
  if (o.plan == nullptr) throw std::runtime_error(o.problem);
  return o.plan;
}

// ---------------------------------------------------------------------------------
// The mask, gathered

// dst[b, h, i, j] (packed [bb, hh, s_q, s_kv]) = the mask's (b, h, i, j) through its
// strides; bits copied (Bits: the element's width).
template <typename Bits>
__global__ void gather_bias_kernel(const Bits* src, Bits* dst, i64 total, i64 heads, i64 q_len, i64 kv_len, i64 s0,
                                   i64 s1, i64 s2, i64 s3) {
  for (i64 e = first_index(); e < total; e += grid_stride()) {
    const i64 j = e % kv_len, i = (e / kv_len) % q_len, h = (e / (kv_len * q_len)) % heads,
              b = e / (kv_len * q_len * heads);
    dst[e] = src[b * s0 + h * s1 + i * s2 + j * s3];
  }
}

// The bias pointer the plan reads: the mask itself where it is packed and aligned as the
// plan's bias tensor says, else a packed copy in `scratch`.
const void* bias_data(const View& mask, const AttentionShape& s, Scratch& scratch, bool& gathered) {
  gathered = !mask_is_packed(s) || reinterpret_cast<std::uintptr_t>(mask.data) % 16 != 0;
  if (!gathered) return mask.data;
  const BiasShape bs = bias_shape(s);
  const i64 total = bs.batch * bs.heads * s.q_len * s.kv_len;
  const std::size_t width = element_size(mask.dtype);
  scratch.reserve(static_cast<std::size_t>(total) * width);
  const i64* st = s.mask_strides;
  if (width == 2)
    gather_bias_kernel<<<blocks_for(total), 256, 0, stream()>>>(static_cast<const std::uint16_t*>(mask.data),
                                                                scratch.as<std::uint16_t>(), total, bs.heads, s.q_len,
                                                                s.kv_len, st[0], st[1], st[2], st[3]);
  else
    gather_bias_kernel<<<blocks_for(total), 256, 0, stream()>>>(static_cast<const std::uint32_t*>(mask.data),
                                                                scratch.as<std::uint32_t>(), total, bs.heads, s.q_len,
                                                                s.kv_len, st[0], st[1], st[2], st[3]);
  check_launch("gather_bias_kernel", kOp);
  return scratch.get();
}

// ---------------------------------------------------------------------------------
// Execution

// The variant pack: each non-virtual tensor's id and where its data is (a by-value
// scalar's: host memory).
class Pack {
 public:
  // A device tensor (`name` for the error): 16-byte aligned, as the plan's tensors say.
  void add(i64 uid, const void* data, const char* name) {
    if (reinterpret_cast<std::uintptr_t>(data) % 16 != 0)
      throw std::logic_error(std::string(kOp) + ": " + name + " is not 16-byte aligned, as cuDNN's plan requires");
    add_value(uid, data);
  }
  // A by-value scalar's host memory.
  void add_value(i64 uid, const void* data) {
    uids_.push_back(uid);
    ptrs_.push_back(const_cast<void*>(data));
  }
  // Runs the plan with these tensors and a workspace of the plan's size.
  void execute(const Plan& plan) {
    Scratch workspace(plan.workspace);
    Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    void* ws = workspace.get();
    set_attr(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<i64>(uids_.size()),
             uids_.data(), "CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS");
    set_attr(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<i64>(ptrs_.size()),
             ptrs_.data(), "CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS");
    set_attr(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws,
             "CUDNN_ATTR_VARIANT_PACK_WORKSPACE");
    finalize(pack.get(), "variant pack");
    check_cudnn(cudnnBackendExecute(cudnn_handle(kOp), plan.plan, pack.get()), "cudnnBackendExecute", kOp);
  }

 private:
  std::vector<i64> uids_;
  std::vector<void*> ptrs_;
};

void note(const Plan& plan, const Problem& p, bool gathered) {
  if (!noting()) return;
  std::string text = std::string("cudnn sdpa ") + pass_name(p.pass) + ": engine " + std::to_string(plan.engine) + ", " +
                     dtype_text(p.dtype) + " data, f32 compute";
  if (p.shape.causal) text += ", causal";
  if (p.has_mask) {
    const BiasShape bs = bias_shape(p.shape);
    text += std::string(", additive mask [") + (bs.batch == 1 ? "1" : "B") + ", " + (bs.heads == 1 ? "1" : "H") +
            ", Sq, Skv] " + dtype_text(p.mask_dtype) + (gathered ? " (gathered into a packed copy)" : "");
  }
  if (plan.nondeterministic) text += ", nondeterministic";
  note_kernel(text);
}

Problem problem_of(Pass pass, const View& q, const View& mask, const AttentionShape& shape) {
  return {pass, q.dtype, shape, mask.data != nullptr, mask.data != nullptr ? mask.dtype : q.dtype};
}

// Adds the mask (gathered where needed) and the causal mask's score to the pack.
void add_masks(Pack& pack, const Problem& p, const View& mask, Scratch& bias_copy, const float& neg_inf,
               bool& gathered) {
  gathered = false;
  if (p.has_mask) pack.add(kBias, bias_data(mask, p.shape, bias_copy, gathered), "the mask");
  if (p.shape.causal) pack.add_value(kNegInf, &neg_inf);
}

// ---------------------------------------------------------------------------------
// The table's entries

std::string static_problem(DType dtype, const AttentionShape& s, bool has_mask, DType mask_dtype) {
  if (dtype != DType::f16 && dtype != DType::bf16)
    return std::string("cuDNN's fused attention takes fp16 and bf16 only, not ") + dtype_text(dtype);
  if (s.batch * s.heads * s.q_len * s.kv_len == 0) return "an empty attention (a dim of size 0)";
  if (has_mask && mask_dtype != dtype && mask_dtype != DType::f32)
    return std::string("cuDNN's fused attention takes a mask of the inputs' dtype or f32, not ") +
           dtype_text(mask_dtype);
  const Probe& gpu = probe();
  if (gpu.device_count == 0) return "no GPU: " + gpu.why_none;
  if (gpu.compute_capability < 80) return "the GPU is older than Ampere (sm_80)";
  // cuDNN 9 documents d <= 256 on Hopper, d <= 128 for the backward elsewhere.
  const i64 max_dim = gpu.compute_capability / 10 == 9 ? 256 : 128;
  for (const i64 dim : {s.head_dim, s.value_dim})
    if (dim % 8 != 0 || dim <= 0 || dim > max_dim)
      return "head_dim " + std::to_string(dim) + " is not a multiple of 8 up to " + std::to_string(max_dim);
  if (std::string missing = gpu_library_problem(GpuLibrary::cudnn); !missing.empty()) return missing;
  const std::size_t version = cudnnGetVersion();
  if (version < 90000) return "cuDNN older than 9.x";
  if (version == 91000 || version == 91001) return "cuDNN 9.10.0 and 9.10.1 have known fused-attention bugs";
  return "";
}

std::string fused_problem(DType dtype, const AttentionShape& shape, bool has_mask, DType mask_dtype) {
  try {
    if (std::string why = static_problem(dtype, shape, has_mask, mask_dtype); !why.empty()) return why;
    for (const Pass pass : {Pass::forward, Pass::backward}) {
      const Outcome o = outcome({pass, dtype, shape, has_mask, has_mask ? mask_dtype : dtype});
      if (o.plan == nullptr) return "cuDNN refused the graph: " + o.problem;
    }
    return "";
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown error while asking cuDNN";
  }
}

void forward(const View& q, const View& k, const View& v, const View& mask, const AttentionShape& shape,
             const View& out, const View& stats) {
  const Problem p = problem_of(Pass::forward, q, mask, shape);
  const std::shared_ptr<const Plan> plan = plan_for(p);
  const float scale = static_cast<float>(shape.scale), neg_inf = masked_score();
  Pack pack;
  pack.add(kQ, q.data, "q");
  pack.add(kK, k.data, "k");
  pack.add(kV, v.data, "v");
  pack.add(kO, out.data, "the output");
  pack.add(kStats, stats.data, "the stats");
  pack.add_value(kScale, &scale);
  Scratch bias_copy;
  bool gathered = false;
  add_masks(pack, p, mask, bias_copy, neg_inf, gathered);
  pack.execute(*plan);
  note(*plan, p, gathered);
}

void backward(const View& grad_out, const View& q, const View& k, const View& v, const View& mask, const View& out,
              const View& stats, const AttentionShape& shape, const View& dq, const View& dk, const View& dv) {
  const Problem p = problem_of(Pass::backward, q, mask, shape);
  const std::shared_ptr<const Plan> plan = plan_for(p);
  const float scale = static_cast<float>(shape.scale), neg_inf = masked_score(), one = 1.0f;
  const AttentionShape& s = shape;
  if (grad_out.dtype != q.dtype)
    throw std::logic_error(std::string(kOp) + ": the output's gradient is " + dtype_text(grad_out.dtype) +
                           ", the graph's dO " + dtype_text(q.dtype));
  // D and the dQ accumulator: f32 of our own; the accumulator starts at zero (cuDNN from
  // 9.6 on clears it itself, earlier versions leave that to the caller).
  Scratch row_dot(static_cast<std::size_t>(s.batch * s.heads * s.q_len) * sizeof(float));
  const std::size_t accum_bytes = static_cast<std::size_t>(s.batch * s.heads * s.q_len * s.head_dim) * sizeof(float);
  Scratch accum(accum_bytes);
  check(cudaMemsetAsync(accum.get(), 0, accum_bytes, stream()), "cudaMemsetAsync", kOp);
  Pack pack;
  pack.add(kQ, q.data, "q");
  pack.add(kK, k.data, "k");
  pack.add(kV, v.data, "v");
  pack.add(kO, out.data, "the output");
  pack.add(kGradO, grad_out.data, "the output's gradient");
  pack.add(kStats, stats.data, "the stats");
  pack.add(kGradQ, dq.data, "dq");
  pack.add(kGradK, dk.data, "dk");
  pack.add(kGradV, dv.data, "dv");
  pack.add_value(kScale, &scale);
  pack.add_value(kOne, &one);
  pack.add(kRowDot, row_dot.get(), "the row dot product scratch");
  pack.add(kGradQAccum, accum.get(), "the dq accumulator");
  Scratch bias_copy;
  bool gathered = false;
  add_masks(pack, p, mask, bias_copy, neg_inf, gathered);
  pack.execute(*plan);
  note(*plan, p, gathered);
}

}  // namespace
}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels {

const AttentionKernels& AttentionKernels::cuda() {
  static const AttentionKernels k{&cuda::fused_problem, &cuda::forward, &cuda::backward};
  return k;
}

}  // namespace ampcheck::kernels
