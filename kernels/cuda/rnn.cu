// The recurrent family on GPU 0 (kernels/rnn_kernels.h): lstm, gru, rnn_tanh, rnn_relu.
//
// The cells of the composed path are grid-stride kernels over the batch's batch * hidden
// elements, each calling the shared __host__ __device__ formulas of rnn_kernels.h in the
// compute type (f32, f64 for f64 data), reading and rounding every dtype as the CPU does
// (kernels/element.h), so a step computes the CPU's bits.
//
// The whole sequence runs in one cuDNN call per pass through cuDNN's RNN API (v8):
//   descriptors  one layer, one direction, linear input, PyTorch's two biases (or none),
//                the standard algorithm, data in the inputs' dtype with f32 math precision;
//                tensor-op math for f16/bf16 (what mixed precision is for), FMA math for f32,
//                which rules out TF32 (an f32 run is the reference the others are held to;
//                see conv.cu). Dropout is required as a descriptor: one with rate 0 and no
//                states. The sequence is SEQ_MAJOR_UNPACKED with every length = steps, which
//                is x's and y's packed [steps, batch, features] (padded I/O on: that layout
//                needs it; no element is padding). h0, c0: [1, batch, hidden].
//   weights      cuDNN reads them from its own weight space: cudnnGetRNNWeightParams gives,
//                per linLayerID, where a gate's matrix ({1, hidden, cols}, row-major) and bias
//                ({1, hidden, 1}) lie. Its IDs follow PyTorch's gate order: LSTM 0-3 the input
//                side's i, f, g, o and 4-7 the hidden side's; GRU 0-2 the input side's r, z, n
//                and 3-5 the hidden side's; Elman 0 input, 1 hidden. So gate k's block of
//                W_ih [G*hidden, input] (rows k*hidden ...) is ID k's matrix as it is, and
//                W_hh's is ID G + k's; b_ih, b_hh likewise. A kernel of our own copies the
//                four tensors in (any dtype, rounded once to the data's) and the weight
//                gradients out.
//   forward      cudnnRNNForward in training mode: y and the reserve space (the op keeps it
//                as an f32 tensor of reserve_elements(); hy and cy are not wanted: y holds
//                every step's h).
//   backward     cudnnRNNBackwardData_v8 (dy -> dx, dh0, dc0; no gradient flows into hy, cy)
//                then, where a weight gradient is wanted, cudnnRNNBackwardWeights_v8 adding
//                into a zeroed gradient weight space (the data's dtype), copied out.
// Descriptors and their sizes are made once per mode, dtype and shape and cached (refusals
// too); the backward reuses the forward's. Workspace and weight spaces come from the caching
// allocator, everything runs on stream(), and every call notes what ran.
#include <cudnn.h>

#include <array>
#include <climits>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda.h"           // probe: device 0's compute capability
#include "kernels/cuda/cudnn_handle.h"   // check_cudnn, cudnn_handle
#include "kernels/cuda/gpu_libraries.h"  // gpu_library_problem
#include "kernels/cuda/runtime.h"        // check, check_launch, stream, Scratch, blocks_for
#include "kernels/element.h"             // load_element, store_element
#include "kernels/kernel_note.h"
#include "kernels/rnn_kernels.h"

namespace ampcheck::kernels::cuda {
namespace {

using i64 = std::int64_t;

constexpr unsigned int kThreads = 256;

// A View's data and dtype as a kernel takes them; no data: absent (reads as 0, not written).
struct Buf {
  void* p;
  DType d;

  template <typename T>
  __device__ T at(i64 i) const {
    return p != nullptr ? load_element<T>(p, d, i) : T(0);
  }
  template <typename T>
  __device__ void put(i64 i, T v) const {
    if (p != nullptr) store_element(p, d, i, v);
  }
};
Buf buf(const View& v) { return {v.data, v.dtype}; }

// ---------------------------------------------------------------------------------
// The cells of one step

struct CellArgs {
  RnnMode mode;
  i64 batch, hidden;
  Buf gi, gh, h, c, act, h_new, c_new;
};

struct CellBackwardArgs {
  RnnMode mode;
  i64 batch, hidden;
  Buf act, gh, h, c, c_new, dh, dc, dgi, dgh, dh_direct, dc_prev;
};

// Element e = (b, j) of [batch, hidden]; gate k of it in [batch, G*hidden] at gate(e) + k*hidden.
__device__ i64 gate_index(i64 e, i64 hidden, int gates) { return (e / hidden) * gates * hidden + e % hidden; }

template <typename T>
__global__ void cell_kernel(CellArgs a) {
  const i64 n = a.batch * a.hidden, H = a.hidden;
  const int G = rnn_gates(a.mode);
  for (i64 e = first_index(); e < n; e += grid_stride()) {
    const i64 g = gate_index(e, H, G);
    if (a.mode == RnnMode::lstm) {
      T pre[4], act[4], c_new, h_new;
      for (int k = 0; k < 4; ++k) pre[k] = a.gi.at<T>(g + k * H) + a.gh.at<T>(g + k * H);
      lstm_cell(pre, a.c.at<T>(e), act, c_new, h_new);
      for (int k = 0; k < 4; ++k) a.act.put(g + k * H, act[k]);
      a.c_new.put(e, c_new);
      a.h_new.put(e, h_new);
    } else if (a.mode == RnnMode::gru) {
      T gi[3], gh[3], act[3], h_new;
      for (int k = 0; k < 3; ++k) {
        gi[k] = a.gi.at<T>(g + k * H);
        gh[k] = a.gh.at<T>(g + k * H);
      }
      gru_cell(gi, gh, a.h.at<T>(e), act, h_new);
      for (int k = 0; k < 3; ++k) a.act.put(g + k * H, act[k]);
      a.h_new.put(e, h_new);
    } else {
      // Elman: the activation kept is h' itself, unrounded (its backward reads it).
      const T h_new = rnn_cell(a.mode, a.gi.at<T>(g) + a.gh.at<T>(g));
      a.act.put(g, h_new);
      a.h_new.put(e, h_new);
    }
  }
}

template <typename T>
__global__ void cell_backward_kernel(CellBackwardArgs a) {
  const i64 n = a.batch * a.hidden, H = a.hidden;
  const int G = rnn_gates(a.mode);
  for (i64 e = first_index(); e < n; e += grid_stride()) {
    const i64 g = gate_index(e, H, G);
    if (a.mode == RnnMode::lstm) {
      T act[4], dpre[4], dc_prev;
      for (int k = 0; k < 4; ++k) act[k] = a.act.at<T>(g + k * H);
      lstm_cell_backward(act, a.c.at<T>(e), a.c_new.at<T>(e), a.dh.at<T>(e), a.dc.at<T>(e), dpre, dc_prev);
      for (int k = 0; k < 4; ++k) {
        a.dgi.put(g + k * H, dpre[k]);
        a.dgh.put(g + k * H, dpre[k]);
      }
      a.dc_prev.put(e, dc_prev);
    } else if (a.mode == RnnMode::gru) {
      T act[3], dgi[3], dgh[3], dh_direct;
      for (int k = 0; k < 3; ++k) act[k] = a.act.at<T>(g + k * H);
      gru_cell_backward(act, a.gh.at<T>(g + 2 * H), a.h.at<T>(e), a.dh.at<T>(e), dgi, dgh, dh_direct);
      for (int k = 0; k < 3; ++k) {
        a.dgi.put(g + k * H, dgi[k]);
        a.dgh.put(g + k * H, dgh[k]);
      }
      a.dh_direct.put(e, dh_direct);
    } else {
      const T d = rnn_cell_backward(a.mode, a.act.at<T>(g), a.dh.at<T>(e));
      a.dgi.put(g, d);
      a.dgh.put(g, d);
    }
  }
}

// The compute type is the dtype of act (f32, or f64 for f64 data).
void cell(const RnnStep& s, const View& gi, const View& gh, const View& h, const View& c, const View& act,
          const View& h_new, const View& c_new) {
  const i64 n = s.batch * s.hidden;
  if (n == 0) return;
  const CellArgs args{s.mode, s.batch, s.hidden, buf(gi), buf(gh), buf(h), buf(c), buf(act), buf(h_new), buf(c_new)};
  with_compute_type(act.dtype, [&](auto zero) {
    cell_kernel<decltype(zero)><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(args);
  });
  check_launch("cell_kernel", rnn_op_name(s.mode));
}

void cell_backward(const RnnStep& s, const View& act, const View& gh, const View& h, const View& c,
                   const View& c_new, const View& dh, const View& dc, const View& dgi, const View& dgh,
                   const View& dh_direct, const View& dc_prev) {
  const i64 n = s.batch * s.hidden;
  if (n == 0) return;
  const CellBackwardArgs args{s.mode,     s.batch, s.hidden, buf(act), buf(gh),  buf(h),         buf(c),
                              buf(c_new), buf(dh), buf(dc),   buf(dgi), buf(dgh), buf(dh_direct), buf(dc_prev)};
  with_compute_type(act.dtype, [&](auto zero) {
    cell_backward_kernel<decltype(zero)><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(args);
  });
  check_launch("cell_backward_kernel", rnn_op_name(s.mode));
}

// ---------------------------------------------------------------------------------
// cuDNN's descriptors

cudnnMathType_t math_type(DType d) { return d == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH; }

cudnnRNNMode_t cell_mode(RnnMode m) {
  switch (m) {
    case RnnMode::lstm: return CUDNN_LSTM;
    case RnnMode::gru: return CUDNN_GRU;
    case RnnMode::rnn_tanh: return CUDNN_RNN_TANH;
    case RnnMode::rnn_relu: return CUDNN_RNN_RELU;
  }
  return CUDNN_LSTM;
}

// A cuDNN descriptor, owned: made in the constructor (`create` names the call for the
// error), destroyed with it.
template <typename D, cudnnStatus_t (*Create)(D*), cudnnStatus_t (*Destroy)(D)>
class Owned {
 public:
  Owned(const char* create, const char* op) { check_cudnn(Create(&d_), create, op); }
  ~Owned() {
    if (d_ != nullptr) Destroy(d_);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  D get() const { return d_; }

 private:
  D d_ = nullptr;
};
using DropoutDesc = Owned<cudnnDropoutDescriptor_t, cudnnCreateDropoutDescriptor, cudnnDestroyDropoutDescriptor>;
using RnnDesc = Owned<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using RnnDataDesc = Owned<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor>;
using TensorDesc = Owned<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;

// cuDNN's RNN descriptors take int sizes.
int to_int(i64 v) { return static_cast<int>(v); }
bool fits_int(i64 v) { return v >= 0 && v <= INT_MAX; }

// One layer's descriptors for a mode, dtype and shape, with the sizes cuDNN asks for.
struct Descs {
  Descs(DType dtype, const RnnShape& s, const char* op)
      : dropout("cudnnCreateDropoutDescriptor", op),
        rnn("cudnnCreateRNNDescriptor", op),
        x("cudnnCreateRNNDataDescriptor", op),
        y("cudnnCreateRNNDataDescriptor", op),
        h("cudnnCreateTensorDescriptor", op) {
    const cudnnHandle_t handle = cudnn_handle(op);
    const cudnnDataType_t type = cudnn_type(dtype, op);
    const int steps = to_int(s.steps), batch = to_int(s.batch), input = to_int(s.input), hidden = to_int(s.hidden);
    check_cudnn(cudnnSetDropoutDescriptor(dropout.get(), handle, 0.0f, nullptr, 0, 0), "cudnnSetDropoutDescriptor",
                op);
    // projSize = hiddenSize: no recurrent projection.
    check_cudnn(cudnnSetRNNDescriptor_v8(rnn.get(), CUDNN_RNN_ALGO_STANDARD, cell_mode(s.mode),
                                         s.bias ? CUDNN_RNN_DOUBLE_BIAS : CUDNN_RNN_NO_BIAS, CUDNN_UNIDIRECTIONAL,
                                         CUDNN_LINEAR_INPUT, type, CUDNN_DATA_FLOAT, math_type(dtype), input, hidden,
                                         hidden, 1, dropout.get(), CUDNN_RNN_PADDED_IO_ENABLED),
                "cudnnSetRNNDescriptor_v8", op);
    const std::vector<int> lengths(static_cast<std::size_t>(batch), steps);
    check_cudnn(cudnnSetRNNDataDescriptor(x.get(), type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, steps, batch,
                                          input, lengths.data(), nullptr),
                "cudnnSetRNNDataDescriptor(x)", op);
    check_cudnn(cudnnSetRNNDataDescriptor(y.get(), type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, steps, batch,
                                          hidden, lengths.data(), nullptr),
                "cudnnSetRNNDataDescriptor(y)", op);
    const int dims[3] = {1, batch, hidden}, strides[3] = {batch * hidden, hidden, 1};
    check_cudnn(cudnnSetTensorNdDescriptor(h.get(), type, 3, dims, strides), "cudnnSetTensorNdDescriptor(h)", op);
    check_cudnn(cudnnGetRNNWeightSpaceSize(handle, rnn.get(), &weight_bytes), "cudnnGetRNNWeightSpaceSize", op);
    check_cudnn(cudnnGetRNNTempSpaceSizes(handle, rnn.get(), CUDNN_FWD_MODE_TRAINING, x.get(), &work_bytes,
                                          &reserve_bytes),
                "cudnnGetRNNTempSpaceSizes", op);
  }

  DropoutDesc dropout;  // before rnn: destroyed after the descriptor that refers to it
  RnnDesc rnn;
  RnnDataDesc x, y;
  TensorDesc h;  // h0's, and c0's (the same shape)
  std::size_t weight_bytes = 0, work_bytes = 0, reserve_bytes = 0;
};

// The descriptors, or why cuDNN gave none (the error of their making).
struct Outcome {
  std::shared_ptr<const Descs> descs;
  std::string problem;
};

using DescKey = std::array<i64, 7>;

// Made on the first ask for a mode, dtype and shape, then cached (refusals too).
Outcome outcome(DType dtype, const RnnShape& s) {
  static std::mutex mutex;
  static std::map<DescKey, Outcome> cache;
  const DescKey key{static_cast<i64>(s.mode), static_cast<i64>(dtype), s.steps, s.batch, s.input, s.hidden,
                    s.bias ? 1 : 0};
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Outcome o;
  try {
    o.descs = std::make_shared<const Descs>(dtype, s, rnn_op_name(s.mode));
  } catch (const std::exception& e) {
    o.problem = e.what();
  }
  return cache.emplace(key, o).first->second;
}

std::shared_ptr<const Descs> descs_for(DType dtype, const RnnShape& s) {
  Outcome o = outcome(dtype, s);
  if (o.descs == nullptr) throw std::runtime_error(o.problem);
  return o.descs;
}

// ---------------------------------------------------------------------------------
// The weight space

// Where gate k of each PyTorch tensor lies in cuDNN's weight space, in elements from its
// start: block[p][k] for p = W_ih, W_hh, b_ih, b_hh; row j of the block at + j * cols[p].
struct Layout {
  i64 block[4][4] = {};
  i64 cols[4] = {};
};

// One linLayerID's matrix or bias: its offset, after checking cuDNN's shape ({1, hidden,
// cols}) and dtype against PyTorch's gate block.
i64 offset_of(const TensorDesc& desc, const void* addr, const void* space, cudnnDataType_t type, DType dtype,
              i64 hidden, i64 cols, int id, const char* what, const char* op) {
  cudnnDataType_t got = CUDNN_DATA_FLOAT;
  int nb = 0, dims[8] = {}, strides[8] = {};
  check_cudnn(cudnnGetTensorNdDescriptor(desc.get(), 8, &got, &nb, dims, strides), "cudnnGetTensorNdDescriptor", op);
  const i64 bytes = static_cast<const char*>(addr) - static_cast<const char*>(space);
  const auto width = static_cast<i64>(element_size(dtype));
  if (addr == nullptr || got != type || nb != 3 || dims[0] != 1 || dims[1] != hidden || dims[2] != cols ||
      (cols > 1 && strides[2] != 1) || (hidden > 1 && strides[1] != cols) || bytes % width != 0)
    throw std::logic_error(std::string(op) + ": cuDNN's " + what + " of linLayerID " + std::to_string(id) +
                           " is not a packed [" + std::to_string(hidden) + ", " + std::to_string(cols) +
                           "] block of the data's dtype in its weight space (" + std::to_string(nb) + " dims: " +
                           std::to_string(dims[0]) + ", " + std::to_string(dims[1]) + ", " + std::to_string(dims[2]) +
                           ")");
  return bytes / width;
}

// The layout, asked of cuDNN for the weight space at `space` (its offsets hold for any
// space of the descriptors' size).
Layout weight_layout(const Descs& d, DType dtype, const RnnShape& s, void* space) {
  const char* op = rnn_op_name(s.mode);
  const int gates = rnn_gates(s.mode);
  const cudnnHandle_t handle = cudnn_handle(op);
  TensorDesc matrix("cudnnCreateTensorDescriptor", op), bias("cudnnCreateTensorDescriptor", op);
  Layout l;
  l.cols[0] = s.input;
  l.cols[1] = s.hidden;
  l.cols[2] = l.cols[3] = 1;
  for (int side = 0; side < 2; ++side)
    for (int k = 0; k < gates; ++k) {
      const int id = side * gates + k;
      void* m_addr = nullptr;
      void* b_addr = nullptr;
      check_cudnn(cudnnGetRNNWeightParams(handle, d.rnn.get(), 0, d.weight_bytes, space, id, matrix.get(), &m_addr,
                                          bias.get(), &b_addr),
                  "cudnnGetRNNWeightParams(linLayerID " + std::to_string(id) + ")", op);
      l.block[side][k] =
          offset_of(matrix, m_addr, space, cudnn_type(dtype, op), dtype, s.hidden, l.cols[side], id, "matrix", op);
      if (s.bias)
        l.block[2 + side][k] = offset_of(bias, b_addr, space, cudnn_type(dtype, op), dtype, s.hidden, 1, id, "bias", op);
    }
  return l;
}

// The four PyTorch tensors (W_ih, W_hh, b_ih, b_hh; absent ones skipped) against the weight
// space: copied into it, or out of it (the gradients).
struct Packing {
  Buf part[4];
  i64 end[4];  // where each part's elements end in the launch's one index range
  Layout layout;
  i64 hidden;
  Buf space;
  bool into_space;
};

__global__ void pack_kernel(Packing p) {
  for (i64 e = first_index(); e < p.end[3]; e += grid_stride()) {
    const int t = e < p.end[0] ? 0 : e < p.end[1] ? 1 : e < p.end[2] ? 2 : 3;
    const Buf& part = p.part[t];
    if (part.p == nullptr) continue;
    const i64 i = t == 0 ? e : e - p.end[t - 1];
    const i64 cols = p.layout.cols[t], row = i / cols, col = i % cols;
    const i64 at = p.layout.block[t][row / p.hidden] + (row % p.hidden) * cols + col;
    // Through double: exact for every float dtype, one rounding to the destination's.
    if (p.into_space)
      store_element(p.space.p, p.space.d, at, load_element<double>(part.p, part.d, i));
    else
      store_element(part.p, part.d, i, load_element<double>(p.space.p, p.space.d, at));
  }
}

void run_packing(const View& w_ih, const View& w_hh, const View& b_ih, const View& b_hh, const Layout& layout,
                 const RnnShape& s, void* space, DType dtype, bool into_space) {
  const i64 rows = rnn_gates(s.mode) * s.hidden, biases = s.bias ? rows : 0;
  Packing p{{buf(w_ih), buf(w_hh), buf(b_ih), buf(b_hh)}, {}, layout, s.hidden, {space, dtype}, into_space};
  p.end[0] = rows * s.input;
  p.end[1] = p.end[0] + rows * s.hidden;
  p.end[2] = p.end[1] + biases;
  p.end[3] = p.end[2] + biases;
  pack_kernel<<<blocks_for(p.end[3], kThreads), kThreads, 0, stream()>>>(p);
  check_launch("pack_kernel", rnn_op_name(s.mode));
}

// ---------------------------------------------------------------------------------
// Kernels of our own around the calls

// cuDNN's devSeqLengths: every sequence `steps` long, in device memory.
__global__ void fill_kernel(int* p, i64 n, int v) {
  for (i64 i = first_index(); i < n; i += grid_stride()) p[i] = v;
}

const int* device_lengths(const RnnShape& s, Scratch& scratch) {
  scratch.reserve(static_cast<std::size_t>(s.batch) * sizeof(int));
  fill_kernel<<<blocks_for(s.batch, kThreads), kThreads, 0, stream()>>>(scratch.as<int>(), s.batch, to_int(s.steps));
  check_launch("fill_kernel", rnn_op_name(s.mode));
  return scratch.as<int>();
}

// dst = src converted (one rounding): cuDNN takes one dtype for all its tensors.
__global__ void convert_kernel(const void* src, DType from, void* dst, DType to, i64 n) {
  for (i64 i = first_index(); i < n; i += grid_stride())
    store_element(dst, to, i, load_element<double>(src, from, i));
}

// An input in the data's dtype: itself (or null where absent), or a converted copy in `scratch`.
const void* in_dtype(const View& v, DType dtype, Scratch& scratch, const char* op) {
  if (v.data == nullptr || v.dtype == dtype) return v.data;
  const i64 n = v.numel();
  scratch.reserve(static_cast<std::size_t>(n) * element_size(dtype));
  convert_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(v.data, v.dtype, scratch.get(), dtype, n);
  check_launch("convert_kernel", op);
  return scratch.get();
}

// An output cuDNN writes: of the data's dtype (null where not wanted).
void* out_in_dtype(const View& v, DType dtype, const char* what, const char* op) {
  if (v.data != nullptr && v.dtype != dtype)
    throw std::logic_error(std::string(op) + ": " + what + " is " + dtype_text(v.dtype) + ", cuDNN's RNN writes " +
                           dtype_text(dtype));
  return v.data;
}

void check_reserve(const View& reserve, const Descs& d, const char* op) {
  if (reserve.data == nullptr || reserve.nbytes() < d.reserve_bytes)
    throw std::logic_error(std::string(op) + ": the reserve holds " + std::to_string(reserve.nbytes()) +
                           " bytes, cuDNN's RNN needs " + std::to_string(d.reserve_bytes));
}

void note(const RnnShape& s, DType dtype, const char* pass) {
  if (!noting()) return;
  note_kernel(std::string("cudnn rnn ") + rnn_op_name(s.mode) + " " + pass + ": " + dtype_text(dtype) +
              " data, f32 math precision, " + (dtype == DType::f32 ? "FMA math (no TF32)" : "tensor-op math") +
              (s.bias ? "" : ", no bias"));
}

// ---------------------------------------------------------------------------------
// The table's fused entries

std::string static_problem(DType dtype, const RnnShape& s) {
  if (dtype != DType::f16 && dtype != DType::bf16 && dtype != DType::f32)
    return std::string("cuDNN's RNN here takes fp16, bf16 and fp32, not ") + dtype_text(dtype);
  if (s.steps == 0 || s.batch == 0 || s.input == 0 || s.hidden == 0)
    return "an empty sequence, batch, input or hidden size (a dim of size 0)";
  for (const i64 dim : {s.steps, s.batch, s.input, s.hidden * rnn_gates(s.mode), s.batch * s.hidden})
    if (!fits_int(dim)) return "a size beyond the int range of cuDNN's RNN API";
  const Probe& gpu = probe();
  if (gpu.device_count == 0) return "no GPU: " + gpu.why_none;
  if (dtype == DType::bf16 && gpu.compute_capability < 80) return "bf16 on a GPU older than Ampere (sm_80)";
  return gpu_library_problem(GpuLibrary::cudnn);
}

std::string fused_problem(DType dtype, const RnnShape& shape) {
  try {
    if (std::string why = static_problem(dtype, shape); !why.empty()) return why;
    const Outcome o = outcome(dtype, shape);
    if (o.descs == nullptr) return "cuDNN refused the RNN: " + o.problem;
    return "";
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an unknown error while asking cuDNN";
  }
}

std::int64_t reserve_elements(DType dtype, const RnnShape& shape) {
  const std::size_t bytes = descs_for(dtype, shape)->reserve_bytes;
  return static_cast<i64>((bytes + sizeof(float) - 1) / sizeof(float));
}

void forward(const View& x, const View& w_ih, const View& w_hh, const View& b_ih, const View& b_hh, const View& h0,
             const View& c0, const RnnShape& shape, const View& y, const View& reserve) {
  const char* op = rnn_op_name(shape.mode);
  const DType dtype = x.dtype;
  const std::shared_ptr<const Descs> d = descs_for(dtype, shape);
  check_reserve(reserve, *d, op);
  void* y_data = out_in_dtype(y, dtype, "y", op);
  const cudnnHandle_t handle = cudnn_handle(op);
  Scratch weights(d->weight_bytes), lengths, h_copy, c_copy, work(d->work_bytes);
  run_packing(w_ih, w_hh, b_ih, b_hh, weight_layout(*d, dtype, shape, weights.get()), shape, weights.get(), dtype,
              /*into_space=*/true);
  const int* seq_lengths = device_lengths(shape, lengths);
  const void* hx = in_dtype(h0, dtype, h_copy, op);
  const void* cx = shape.mode == RnnMode::lstm ? in_dtype(c0, dtype, c_copy, op) : nullptr;
  check_cudnn(cudnnRNNForward(handle, d->rnn.get(), CUDNN_FWD_MODE_TRAINING, seq_lengths, d->x.get(), x.data,
                              d->y.get(), y_data, d->h.get(), hx, nullptr, d->h.get(), cx, nullptr, d->weight_bytes,
                              weights.get(), d->work_bytes, work.get(), d->reserve_bytes, reserve.data),
              "cudnnRNNForward", op);
  note(shape, dtype, "fwd");
}

void backward(const View& dy, const View& x, const View& w_ih, const View& w_hh, const View& b_ih, const View& b_hh,
              const View& h0, const View& c0, const View& y, const View& reserve, const RnnShape& shape,
              const View& dx, const View& dw_ih, const View& dw_hh, const View& db_ih, const View& db_hh,
              const View& dh0, const View& dc0) {
  const char* op = rnn_op_name(shape.mode);
  const DType dtype = x.dtype;
  const bool lstm = shape.mode == RnnMode::lstm;
  const std::shared_ptr<const Descs> d = descs_for(dtype, shape);
  check_reserve(reserve, *d, op);
  void* dh0_data = out_in_dtype(dh0, dtype, "dh0", op);
  void* dc0_data = lstm ? out_in_dtype(dc0, dtype, "dc0", op) : nullptr;
  const cudnnHandle_t handle = cudnn_handle(op);
  Scratch weights(d->weight_bytes), lengths, h_copy, c_copy, dy_copy, dx_unwanted, work(d->work_bytes);
  const Layout layout = weight_layout(*d, dtype, shape, weights.get());
  run_packing(w_ih, w_hh, b_ih, b_hh, layout, shape, weights.get(), dtype, /*into_space=*/true);
  const int* seq_lengths = device_lengths(shape, lengths);
  const void* hx = in_dtype(h0, dtype, h_copy, op);
  const void* cx = lstm ? in_dtype(c0, dtype, c_copy, op) : nullptr;
  const void* dy_data = in_dtype(dy, dtype, dy_copy, op);
  // cuDNN always writes dx: somewhere of our own when it is not wanted.
  void* dx_data = dx.data != nullptr ? out_in_dtype(dx, dtype, "dx", op)
                                     : dx_unwanted.reserve(static_cast<std::size_t>(x.numel()) * element_size(dtype));
  check_cudnn(cudnnRNNBackwardData_v8(handle, d->rnn.get(), seq_lengths, d->y.get(), y.data, dy_data, d->x.get(),
                                      dx_data, d->h.get(), hx, nullptr, dh0_data, d->h.get(), cx, nullptr, dc0_data,
                                      d->weight_bytes, weights.get(), d->work_bytes, work.get(), d->reserve_bytes,
                                      reserve.data),
              "cudnnRNNBackwardData_v8", op);
  const bool bias_grads = shape.bias && (db_ih.data != nullptr || db_hh.data != nullptr);
  const bool weight_grads = dw_ih.data != nullptr || dw_hh.data != nullptr || bias_grads;
  if (!weight_grads) {
    note(shape, dtype, "bwd data");
    return;
  }
  Scratch grads(d->weight_bytes);
  check(cudaMemsetAsync(grads.get(), 0, d->weight_bytes, stream()), "cudaMemsetAsync", op);
  check_cudnn(cudnnRNNBackwardWeights_v8(handle, d->rnn.get(), CUDNN_WGRAD_MODE_ADD, seq_lengths, d->x.get(), x.data,
                                         d->h.get(), hx, d->y.get(), y.data, d->weight_bytes, grads.get(),
                                         d->work_bytes, work.get(), d->reserve_bytes, reserve.data),
              "cudnnRNNBackwardWeights_v8", op);
  run_packing(dw_ih, dw_hh, db_ih, db_hh, layout, shape, grads.get(), dtype, /*into_space=*/false);
  note(shape, dtype, "bwd data + weights");
}

}  // namespace
}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels {

const RnnKernels& RnnKernels::cuda() {
  static const RnnKernels k{&cuda::cell,    &cuda::cell_backward, &cuda::fused_problem, &cuda::reserve_elements,
                            &cuda::forward, &cuda::backward};
  return k;
}

}  // namespace ampcheck::kernels
