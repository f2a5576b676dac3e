// conv2d on GPU 0 (kernels/conv_pool_kernels.h): the forward and the data and filter
// gradients through cuDNN's convolution API (descriptors, an algorithm from cuDNN's
// heuristics, a workspace from the caching allocator); the bias gradient is a CUB block
// reduction of our own. The pools are in pool.cu.
//
// What the CPU reference computes (kernels/cpu/conv_pool.cpp) and how cuDNN is asked for
// the same:
//   - compute type: f32 for f16/bf16/f32 data (CUDNN_DATA_FLOAT), f64 for f64;
//   - math: tensor-op math for f16/bf16 (what mixed precision is for); FMA math for f32,
//     which rules out TF32. PyTorch lets cuDNN use TF32 for f32 convolutions by default
//     (torch.backends.cudnn.allow_tf32), but here an f32 result is the reference that the
//     low-precision runs and the CPU are compared against, and TF32 keeps 10 mantissa
//     bits of each input: the comparison would measure TF32, not the dtype under test.
//     f64 has no reduced-precision path: default math.
//   - the bias is folded into the convolution's epilogue (y pre-filled with the bias,
//     beta = 1), so an f16/bf16 output is acc + bias rounded once, as on the CPU, rather
//     than a rounded convolution plus a second rounding of a separate bias add.
//   - deterministic algorithms first (cuDNN's backward ALGO_0/ALGO_3 accumulate with
//     atomics), so a run repeats its bits; a nondeterministic one only when cuDNN offers
//     nothing else for the shape, and the kernel note says so.
// The choice for each pass, dtype and geometry is made once and cached; every call notes
// the algorithm and math that ran (kernels/kernel_note.h).
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>  // cub::BlockReduce: the bias gradient's sums
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/conv_pool_kernels.h"
#include "kernels/cuda/cudnn_handle.h"  // check_cudnn, cudnn_handle
#include "kernels/cuda/runtime.h"       // check, stream, allocator, blocks_for
#include "kernels/element.h"            // load_element, store_element
#include "kernels/kernel_note.h"

namespace ampcheck::kernels::cuda {
namespace {

using i64 = std::int64_t;

constexpr const char* kOp = "conv2d";

cudnnDataType_t compute_type(DType d) { return d == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }
cudnnMathType_t requested_math(DType d) {
  if (d == DType::f16 || d == DType::bf16) return CUDNN_TENSOR_OP_MATH;
  return d == DType::f32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default math";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op math";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op math with conversion";
    case CUDNN_FMA_MATH: return "FMA math (no TF32)";
  }
  return "unknown math";
}

// cuDNN's descriptors take int sizes and strides: a tensor must have fewer than 2^31
// elements.
int to_int(i64 v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string(kOp) + ": " + what + " = " + std::to_string(v) +
                                " is beyond the int range of cuDNN's convolution API; use a smaller batch");
  return static_cast<int>(v);
}

// ---------------------------------------------------------------------------------
// Descriptors, owned: created in the constructor, destroyed in the destructor, described
// once constructed (so a failing description still destroys them).

class TensorDesc {
 public:
  TensorDesc() { check_cudnn(cudnnCreateTensorDescriptor(&d_), "cudnnCreateTensorDescriptor", kOp); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  void set(DType dtype, i64 n, i64 c, i64 h, i64 w, const char* what) {
    to_int(n * c * h * w, what);
    check_cudnn(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, cudnn_type(dtype, kOp), to_int(n, what), to_int(c, what),
                                           to_int(h, what), to_int(w, what)),
                std::string("cudnnSetTensor4dDescriptor(") + what + ")", kOp);
  }
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class FilterDesc {
 public:
  FilterDesc() { check_cudnn(cudnnCreateFilterDescriptor(&d_), "cudnnCreateFilterDescriptor", kOp); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d_); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  cudnnFilterDescriptor_t get() const { return d_; }

 private:
  cudnnFilterDescriptor_t d_ = nullptr;
};

class ConvolutionDesc {
 public:
  ConvolutionDesc() { check_cudnn(cudnnCreateConvolutionDescriptor(&d_), "cudnnCreateConvolutionDescriptor", kOp); }
  ~ConvolutionDesc() { cudnnDestroyConvolutionDescriptor(d_); }
  ConvolutionDesc(const ConvolutionDesc&) = delete;
  ConvolutionDesc& operator=(const ConvolutionDesc&) = delete;
  void set_math(cudnnMathType_t math) {
    check_cudnn(cudnnSetConvolutionMathType(d_, math), "cudnnSetConvolutionMathType", kOp);
  }
  cudnnConvolutionDescriptor_t get() const { return d_; }

 private:
  cudnnConvolutionDescriptor_t d_ = nullptr;
};

// x, weight, y and the convolution of one geometry and dtype, with the math type asked for.
struct ConvDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvolutionDesc conv;

  ConvDescs(const ConvGeometry& g, DType dtype) {
    x.set(dtype, g.n, g.c_in, g.h, g.w, "x");
    y.set(dtype, g.n, g.c_out, g.oh, g.ow, "y");
    to_int(g.c_out * g.cin_g() * g.kh * g.kw, "weight");
    check_cudnn(cudnnSetFilter4dDescriptor(w.get(), cudnn_type(dtype, kOp), CUDNN_TENSOR_NCHW, to_int(g.c_out, "C_out"),
                                           to_int(g.cin_g(), "C_in/groups"), to_int(g.kh, "kH"), to_int(g.kw, "kW")),
                "cudnnSetFilter4dDescriptor", kOp);
    // PyTorch's conv2d is a cross-correlation (the kernel is not flipped), as the CPU's.
    check_cudnn(cudnnSetConvolution2dDescriptor(conv.get(), to_int(g.ph, "padding"), to_int(g.pw, "padding"),
                                                to_int(g.sh, "stride"), to_int(g.sw, "stride"), to_int(g.dh, "dilation"),
                                                to_int(g.dw, "dilation"), CUDNN_CROSS_CORRELATION, compute_type(dtype)),
                "cudnnSetConvolution2dDescriptor", kOp);
    check_cudnn(cudnnSetConvolutionGroupCount(conv.get(), to_int(g.groups, "groups")), "cudnnSetConvolutionGroupCount",
                kOp);
    conv.set_math(requested_math(dtype));
    // The engine's output size and cuDNN's must agree, or the buffers do not fit.
    int n = 0, c = 0, h = 0, w_out = 0;
    check_cudnn(cudnnGetConvolution2dForwardOutputDim(conv.get(), x.get(), w.get(), &n, &c, &h, &w_out),
                "cudnnGetConvolution2dForwardOutputDim", kOp);
    if (n != g.n || c != g.c_out || h != g.oh || w_out != g.ow)
      throw std::logic_error(std::string(kOp) + ": cuDNN's output [" + std::to_string(n) + ", " + std::to_string(c) +
                             ", " + std::to_string(h) + ", " + std::to_string(w_out) +
                             "] differs from the engine's [" + std::to_string(g.n) + ", " + std::to_string(g.c_out) +
                             ", " + std::to_string(g.oh) + ", " + std::to_string(g.ow) + "]");
  }
};

// cuDNN's alpha and beta: double for double compute, float otherwise.
class Scale {
 public:
  Scale(DType dtype, double v) : f_(static_cast<float>(v)), d_(v), dbl_(dtype == DType::f64) {}
  const void* ptr() const { return dbl_ ? static_cast<const void*>(&d_) : static_cast<const void*>(&f_); }

 private:
  float f_;
  double d_;
  bool dbl_;
};

// ---------------------------------------------------------------------------------
// Algorithm choice

enum class Pass { forward, backward_data, backward_filter };

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::forward: return "fwd";
    case Pass::backward_data: return "bwd data";
    case Pass::backward_filter: return "bwd filter";
  }
  return "?";
}

const char* algo_name(Pass p, int algo) {
  static constexpr const char* kFwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM",     "DIRECT",
                                         "FFT",           "FFT_TILING",            "WINOGRAD", "WINOGRAD_NONFUSED"};
  static constexpr const char* kData[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static constexpr const char* kFilter[] = {"ALGO_0",   "ALGO_1",           "FFT",       "ALGO_3",
                                            "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  const auto named = [algo](const auto& names) {
    return algo >= 0 && algo < static_cast<int>(sizeof(names) / sizeof(names[0])) ? names[algo] : "unknown algorithm";
  };
  switch (p) {
    case Pass::forward: return named(kFwd);
    case Pass::backward_data: return named(kData);
    case Pass::backward_filter: return named(kFilter);
  }
  return "unknown algorithm";
}

struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  std::size_t workspace = 0;
  bool deterministic = true;
};

// The workspace an algorithm needs with the descriptors as they are (math type included);
// false when cuDNN does not support it so.
bool workspace_of(Pass p, int algo, cudnnHandle_t h, const ConvDescs& d, std::size_t& bytes) {
  switch (p) {
    case Pass::forward:
      return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo),
                                                     &bytes) == CUDNN_STATUS_SUCCESS;
    case Pass::backward_data:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                                          &bytes) == CUDNN_STATUS_SUCCESS;
    case Pass::backward_filter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                            &bytes) == CUDNN_STATUS_SUCCESS;
  }
  return false;
}

// Whether the allocator can give `bytes` now (the workspace of a candidate).
bool workspace_fits(std::size_t bytes) {
  try {
    Scratch probe(bytes);
    return true;
  } catch (const OutOfMemoryError&) {
    return false;
  }
}

// The first of cuDNN's ranked candidates that succeeds, uses an accepted math type,
// takes a workspace the allocator can give, and (first round) is deterministic.
template <typename Perf>
bool pick(Pass p, const Perf* perfs, int count, DType dtype, cudnnHandle_t h, ConvDescs& d, bool deterministic_only,
          Choice& out) {
  for (int i = 0; i < count; ++i) {
    const Perf& perf = perfs[i];
    if (perf.status != CUDNN_STATUS_SUCCESS) continue;
    if (deterministic_only && perf.determinism != CUDNN_DETERMINISTIC) continue;
    cudnnMathType_t math = perf.mathType;
    if (dtype == DType::f32) {
      // Only FMA kernels: a heuristic entry may say DEFAULT math, which on Ampere and
      // later would allow TF32; asking it for FMA math either holds or is refused below.
      if (math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
      math = CUDNN_FMA_MATH;
    } else if (math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) {
      continue;  // converts inputs to a narrower type: not the dtype under test
    }
    d.conv.set_math(math);
    std::size_t bytes = 0;
    if (!workspace_of(p, static_cast<int>(perf.algo), h, d, bytes) || !workspace_fits(bytes)) continue;
    out.algo = static_cast<int>(perf.algo);
    out.math = math;
    out.workspace = bytes;
    out.deterministic = perf.determinism == CUDNN_DETERMINISTIC;
    return true;
  }
  return false;
}

template <typename Perf>
Choice choose_from(Pass p, const Perf* perfs, int count, DType dtype, cudnnHandle_t h, ConvDescs& d) {
  Choice c;
  if (pick(p, perfs, count, dtype, h, d, /*deterministic_only=*/true, c) ||
      pick(p, perfs, count, dtype, h, d, /*deterministic_only=*/false, c))
    return c;
  throw std::runtime_error(std::string(kOp) + ": cuDNN offers no " + pass_name(p) + " algorithm for " +
                           dtype_text(dtype) + " with " + math_name(requested_math(dtype)) +
                           " whose workspace fits in GPU memory (" + std::to_string(count) + " candidates)");
}

Choice ask_cudnn(Pass p, DType dtype, cudnnHandle_t h, ConvDescs& d) {
  int returned = 0;
  switch (p) {
    case Pass::forward: {
      cudnnConvolutionFwdAlgoPerf_t perfs[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      check_cudnn(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perfs),
                  "cudnnGetConvolutionForwardAlgorithm_v7", kOp);
      return choose_from(p, perfs, returned, dtype, h, d);
    }
    case Pass::backward_data: {
      cudnnConvolutionBwdDataAlgoPerf_t perfs[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      check_cudnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
                                                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, perfs),
                  "cudnnGetConvolutionBackwardDataAlgorithm_v7", kOp);
      return choose_from(p, perfs, returned, dtype, h, d);
    }
    case Pass::backward_filter: {
      cudnnConvolutionBwdFilterAlgoPerf_t perfs[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
                                                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned,
                                                                perfs),
                  "cudnnGetConvolutionBackwardFilterAlgorithm_v7", kOp);
      return choose_from(p, perfs, returned, dtype, h, d);
    }
  }
  throw std::logic_error("conv2d: unknown cuDNN pass");
}

using ChoiceKey = std::array<i64, 16>;

// The algorithm for this pass, dtype and geometry (asked once, then cached), with the
// descriptors' math type set to it.
Choice choose(Pass p, const ConvGeometry& g, DType dtype, cudnnHandle_t h, ConvDescs& d) {
  static std::mutex mutex;
  static std::map<ChoiceKey, Choice> cache;
  const ChoiceKey key{static_cast<i64>(p), static_cast<i64>(dtype), g.n, g.c_in, g.h, g.w, g.c_out, g.kh, g.kw,
                      g.groups, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw};
  Choice c;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) {
      c = it->second;
    } else {
      c = ask_cudnn(p, dtype, h, d);
      cache.emplace(key, c);
    }
  }
  d.conv.set_math(c.math);
  return c;
}

void note(Pass p, const Choice& c, DType dtype, const char* extra = "") {
  std::string text = std::string("cuDNN ") + pass_name(p) + ": " + algo_name(p, c.algo) + ", " + math_name(c.math) +
                     ", " + dtype_text(dtype) + " data, " + (dtype == DType::f64 ? "f64" : "f32") + " compute";
  if (!c.deterministic) text += ", nondeterministic";
  text += extra;
  note_kernel(text);
}

// ---------------------------------------------------------------------------------
// Kernels of our own

// y[n, c, :, :] = bias[c]: the value the forward's beta = 1 adds the convolution to.
// Same dtype both sides, so the copy through the compute type is exact.
template <typename T>
__global__ void broadcast_bias_kernel(const void* bias, void* y, DType dtype, i64 total, i64 c_out, i64 ohw) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    store_element(y, dtype, i, load_element<T>(bias, dtype, (i / ohw) % c_out));
}

// dst = src converted (one rounding), for an upstream gradient whose dtype differs from
// the convolution's: cuDNN takes one dtype for all its tensors.
__global__ void convert_kernel(const void* src, DType from, void* dst, DType to, i64 n) {
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x)
    store_element(dst, to, i, load_element<double>(src, from, i));
}

constexpr int kThreads = 256;
constexpr i64 kMaxChunks = 64;  // blocks per channel of the bias gradient's first pass

// The bias gradient in two passes, each sum in a fixed order, so it is deterministic:
// block (c, chunk) sums its chunk of channel c's n * ohw elements into partial[c, chunk];
// then one block per channel sums the chunks and rounds once.
template <typename T>
__global__ void bias_grad_partial_kernel(const void* gy, DType dtype, i64 n, i64 c_out, i64 ohw, i64 per_chunk,
                                         T* partial) {
  using Reduce = cub::BlockReduce<T, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const i64 c = blockIdx.x;
  const i64 count = n * ohw;
  const i64 begin = blockIdx.y * per_chunk;
  const i64 end = begin + per_chunk < count ? begin + per_chunk : count;
  T acc = T(0);
  for (i64 j = begin + threadIdx.x; j < end; j += kThreads)
    acc += load_element<T>(gy, dtype, ((j / ohw) * c_out + c) * ohw + j % ohw);
  const T total = Reduce(temp).Sum(acc);
  if (threadIdx.x == 0) partial[c * gridDim.y + blockIdx.y] = total;
}

template <typename T>
__global__ void bias_grad_final_kernel(const T* partial, i64 chunks, void* gb, DType dtype) {
  using Reduce = cub::BlockReduce<T, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const i64 c = blockIdx.x;
  T acc = T(0);
  for (i64 j = threadIdx.x; j < chunks; j += kThreads) acc += partial[c * chunks + j];
  const T total = Reduce(temp).Sum(acc);
  if (threadIdx.x == 0) store_element(gb, dtype, c, total);
}

// ---------------------------------------------------------------------------------
// The table's entries

void conv2d_forward(const ConvGeometry& g, const View& x, const View& weight, const View& bias, const View& y) {
  const i64 total = y.numel();
  if (total == 0) return;  // an empty batch
  const DType dtype = y.dtype;
  ConvDescs d(g, dtype);
  const cudnnHandle_t h = cudnn_handle(kOp);
  const Choice c = choose(Pass::forward, g, dtype, h, d);
  const bool has_bias = bias.data != nullptr;
  if (has_bias) {
    with_compute_type(dtype, [&](auto zero) {
      broadcast_bias_kernel<decltype(zero)><<<blocks_for(total), kThreads, 0, stream()>>>(bias.data, y.data, dtype,
                                                                                           total, g.c_out, g.ohw());
    });
    check_launch("broadcast_bias_kernel", kOp);
  }
  Scratch workspace(c.workspace);
  const Scale one(dtype, 1.0), beta(dtype, has_bias ? 1.0 : 0.0);
  check_cudnn(cudnnConvolutionForward(h, one.ptr(), d.x.get(), x.data, d.w.get(), weight.data, d.conv.get(),
                                      static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), workspace.get(),
                                      workspace.bytes(), beta.ptr(), d.y.get(), y.data),
              "cudnnConvolutionForward", kOp);
  note(Pass::forward, c, dtype, has_bias ? ", bias added in the epilogue (beta = 1)" : "");
}

// The upstream gradient in the convolution's dtype: itself, or a converted copy in
// `scratch` (a gradient handed to the backward directly in another dtype).
const void* grad_in_dtype(const View& grad_y, DType dtype, Scratch& scratch) {
  if (grad_y.dtype == dtype) return grad_y.data;
  const i64 n = grad_y.numel();
  convert_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(grad_y.data, grad_y.dtype, scratch.get(), dtype, n);
  check_launch("convert_kernel", kOp);
  return scratch.get();
}

void conv2d_backward_data(const ConvGeometry& g, const View& grad_y, const View& weight, const View& grad_x) {
  if (grad_x.numel() == 0) return;
  const DType dtype = grad_x.dtype;
  ConvDescs d(g, dtype);
  const cudnnHandle_t h = cudnn_handle(kOp);
  const Choice c = choose(Pass::backward_data, g, dtype, h, d);
  Scratch converted(grad_y.dtype == dtype ? 0 : static_cast<std::size_t>(grad_y.numel()) * element_size(dtype));
  const void* dy = grad_in_dtype(grad_y, dtype, converted);
  Scratch workspace(c.workspace);
  const Scale one(dtype, 1.0), zero(dtype, 0.0);
  check_cudnn(cudnnConvolutionBackwardData(h, one.ptr(), d.w.get(), weight.data, d.y.get(), dy, d.conv.get(),
                                           static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), workspace.get(),
                                           workspace.bytes(), zero.ptr(), d.x.get(), grad_x.data),
              "cudnnConvolutionBackwardData", kOp);
  note(Pass::backward_data, c, dtype);
}

void conv2d_backward_filter(const ConvGeometry& g, const View& x, const View& grad_y, const View& grad_weight) {
  if (grad_weight.numel() == 0) return;
  if (g.n == 0) {  // no sample contributes: every bit pattern 0 is +0 in the float dtypes
    check(cudaMemsetAsync(grad_weight.data, 0, grad_weight.nbytes(), stream()), "cudaMemsetAsync", kOp);
    return;
  }
  const DType dtype = grad_weight.dtype;
  ConvDescs d(g, dtype);
  const cudnnHandle_t h = cudnn_handle(kOp);
  const Choice c = choose(Pass::backward_filter, g, dtype, h, d);
  Scratch converted(grad_y.dtype == dtype ? 0 : static_cast<std::size_t>(grad_y.numel()) * element_size(dtype));
  const void* dy = grad_in_dtype(grad_y, dtype, converted);
  Scratch workspace(c.workspace);
  const Scale one(dtype, 1.0), zero(dtype, 0.0);
  check_cudnn(cudnnConvolutionBackwardFilter(h, one.ptr(), d.x.get(), x.data, d.y.get(), dy, d.conv.get(),
                                             static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), workspace.get(),
                                             workspace.bytes(), zero.ptr(), d.w.get(), grad_weight.data),
              "cudnnConvolutionBackwardFilter", kOp);
  note(Pass::backward_filter, c, dtype);
}

void conv2d_backward_bias(const ConvGeometry& g, const View& grad_y, const View& grad_bias) {
  if (grad_bias.numel() == 0) return;
  const i64 count = g.n * g.ohw();
  if (count == 0) {
    check(cudaMemsetAsync(grad_bias.data, 0, grad_bias.nbytes(), stream()), "cudaMemsetAsync", kOp);
    return;
  }
  // Chunks depend on the shape only: the same bits on every run.
  const i64 chunks = std::min<i64>(kMaxChunks, (count + kThreads * 16 - 1) / (kThreads * 16));
  const i64 per_chunk = (count + chunks - 1) / chunks;
  with_compute_type(grad_bias.dtype, [&](auto zero) {
    using T = decltype(zero);
    Scratch partial(static_cast<std::size_t>(g.c_out * chunks) * sizeof(T));
    T* sums = static_cast<T*>(partial.get());
    bias_grad_partial_kernel<T><<<dim3(static_cast<unsigned>(g.c_out), static_cast<unsigned>(chunks)), kThreads, 0,
                                  stream()>>>(grad_y.data, grad_y.dtype, g.n, g.c_out, g.ohw(), per_chunk, sums);
    check_launch("bias_grad_partial_kernel", kOp);
    bias_grad_final_kernel<T><<<static_cast<unsigned>(g.c_out), kThreads, 0, stream()>>>(sums, chunks, grad_bias.data,
                                                                                          grad_bias.dtype);
    check_launch("bias_grad_final_kernel", kOp);
  });
  if (noting()) note_kernel(std::string("conv2d bias gradient: CUB block reduce, ") +
              (grad_bias.dtype == DType::f64 ? "f64" : "f32") + " compute, " + std::to_string(chunks) +
              " chunks per channel");
}

}  // namespace

// The pools' entries (pool.cu).
namespace pool {
void max_pool2d_forward(const PoolGeometry& g, const View& x, const View& y, const View& indices);
void max_pool2d_indices(const PoolGeometry& g, const View& x, const View& indices);
void max_pool2d_backward(const PoolGeometry& g, const View& grad_y, const View& indices, const View& grad_x);
void avg_pool2d_forward(const PoolGeometry& g, const View& x, const View& y);
void avg_pool2d_backward(const PoolGeometry& g, const View& grad_y, const View& grad_x);
void adaptive_avg_pool2d_forward(const PoolGeometry& g, const View& x, const View& y);
void adaptive_avg_pool2d_backward(const PoolGeometry& g, const View& grad_y, const View& grad_x);
}  // namespace pool

}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels {

const ConvPoolKernels& ConvPoolKernels::cuda() {
  static const ConvPoolKernels k{&cuda::conv2d_forward,
                                 &cuda::conv2d_backward_data,
                                 &cuda::conv2d_backward_filter,
                                 &cuda::conv2d_backward_bias,
                                 &cuda::pool::max_pool2d_forward,
                                 &cuda::pool::max_pool2d_indices,
                                 &cuda::pool::max_pool2d_backward,
                                 &cuda::pool::avg_pool2d_forward,
                                 &cuda::pool::avg_pool2d_backward,
                                 &cuda::pool::adaptive_avg_pool2d_forward,
                                 &cuda::pool::adaptive_avg_pool2d_backward};
  return k;
}

}  // namespace ampcheck::kernels
