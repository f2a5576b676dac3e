// The training family on GPU 0 (kernels/training_kernels.h): the optimizer updates
// through the shared element formulas (so a CUDA step computes the CPU's bits), one launch
// per parameter or one for all of them (each parameter's master weights written back into
// it in the same pass); the loss scaler's unscale and Inf/NaN check over every gradient in one
// launch (a device table of the gradients and of fixed-size chunks of them, one block
// per chunk, in the manner of PyTorch's multi_tensor_apply); the clipping norm as block
// sums (CUB) reduced by a second one-block pass in a fixed order, so it does not change
// from run to run.
#include <cub/cub.cuh>  // cub::BlockReduce

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/runtime.h"  // check, check_launch, stream, allocator, blocks_for
#include "kernels/element.h"       // load_element, store_element
#include "kernels/training_kernels.h"

namespace ampcheck::kernels::cuda {
namespace {

constexpr unsigned int kThreads = 256;

// ---- optimizer updates ---------------------------------------------------------------

template <typename T>
__global__ void sgd_kernel(void* p, DType pd, const void* g, DType gd, void* b, DType bd, std::int64_t n,
                           SgdStep s) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    T pv = load_element<T>(p, pd, i);
    const T gv = load_element<T>(g, gd, i);
    if (b != nullptr) {
      T bv = load_element<T>(b, bd, i);
      sgd_momentum_element(pv, gv, bv, s);
      store_element(b, bd, i, bv);
    } else {
      sgd_element(pv, gv, s);
    }
    store_element(p, pd, i, pv);
  }
}

template <typename T>
__global__ void adam_kernel(void* p, DType pd, const void* g, DType gd, void* m, DType md, void* v, DType vd,
                            std::int64_t n, AdamStep s) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    T pv = load_element<T>(p, pd, i);
    T mv = load_element<T>(m, md, i);
    T vv = load_element<T>(v, vd, i);
    adam_element(pv, load_element<T>(g, gd, i), mv, vv, s);
    store_element(p, pd, i, pv);
    store_element(m, md, i, mv);
    store_element(v, vd, i, vv);
  }
}

void sgd(const View& param, const View& grad, const View& momentum, const SgdStep& s) {
  const std::int64_t n = param.numel();
  if (n == 0) return;
  with_compute_type(param.dtype, [&](auto zero) {
    using T = decltype(zero);
    sgd_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(param.data, param.dtype, grad.data, grad.dtype,
                                                                       momentum.data, momentum.dtype, n, s);
  });
  check_launch("sgd_kernel", "SGD step");
}

void adam(const View& param, const View& grad, const View& exp_avg, const View& exp_avg_sq, const AdamStep& s) {
  const std::int64_t n = param.numel();
  if (n == 0) return;
  with_compute_type(param.dtype, [&](auto zero) {
    using T = decltype(zero);
    adam_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(param.data, param.dtype, grad.data, grad.dtype,
                                                                        exp_avg.data, exp_avg.dtype, exp_avg_sq.data,
                                                                        exp_avg_sq.dtype, n, s);
  });
  check_launch("adam_kernel", "Adam step");
}

// Elements per block of the multi-tensor kernels: 64 per thread.
constexpr std::int64_t kUnscaleChunk = 16 * kThreads * 4;

std::size_t round_up(std::size_t bytes) { return (bytes + 15) / 16 * 16; }

// ---- every parameter's update at once ---------------------------------------------------

// UpdateTensor as the device reads it.
struct DeviceUpdate {
  void* weights;
  const void* grad;
  void* state0;
  void* state1;
  void* copy;
  std::int64_t numel;
  DType weights_dtype, grad_dtype, state0_dtype, state1_dtype, copy_dtype;
};
struct UpdateChunk {
  std::int64_t tensor;
  std::int64_t begin;
};

template <typename T>
__device__ void update_element(const DeviceUpdate& t, std::int64_t i, const SgdStep& s) {
  T p = load_element<T>(t.weights, t.weights_dtype, i);
  const T g = load_element<T>(t.grad, t.grad_dtype, i);
  if (t.state0 != nullptr) {
    T b = load_element<T>(t.state0, t.state0_dtype, i);
    sgd_momentum_element(p, g, b, s);
    store_element(t.state0, t.state0_dtype, i, b);
  } else {
    sgd_element(p, g, s);
  }
  store_element(t.weights, t.weights_dtype, i, p);
  if (t.copy != nullptr) store_element(t.copy, t.copy_dtype, i, p);
}

template <typename T>
__device__ void update_element(const DeviceUpdate& t, std::int64_t i, const AdamStep& s) {
  T p = load_element<T>(t.weights, t.weights_dtype, i);
  T m = load_element<T>(t.state0, t.state0_dtype, i);
  T v = load_element<T>(t.state1, t.state1_dtype, i);
  adam_element(p, load_element<T>(t.grad, t.grad_dtype, i), m, v, s);
  store_element(t.weights, t.weights_dtype, i, p);
  store_element(t.state0, t.state0_dtype, i, m);
  store_element(t.state1, t.state1_dtype, i, v);
  if (t.copy != nullptr) store_element(t.copy, t.copy_dtype, i, p);
}

// One block per chunk of one parameter, in that parameter's compute type.
template <class Step>
__global__ void update_all_kernel(const DeviceUpdate* tensors, const UpdateChunk* chunks, Step s) {
  const UpdateChunk c = chunks[blockIdx.x];
  const DeviceUpdate t = tensors[c.tensor];
  const std::int64_t end = c.begin + kUnscaleChunk < t.numel ? c.begin + kUnscaleChunk : t.numel;
  for (std::int64_t i = c.begin + threadIdx.x; i < end; i += blockDim.x) {
    if (t.weights_dtype == DType::f64) update_element<double>(t, i, s);
    else update_element<float>(t, i, s);
  }
}

template <class Step>
void update_all(const std::vector<UpdateTensor>& in, const Step& s, const char* op) {
  std::vector<DeviceUpdate> tensors;
  std::vector<UpdateChunk> chunks;
  for (const UpdateTensor& u : in) {
    const DeviceUpdate t{u.weights.data,   u.grad.data,      u.state0.data,    u.state1.data,
                         u.copy.data,      u.weights.numel(), u.weights.dtype, u.grad.dtype,
                         u.state0.dtype,   u.state1.dtype,    u.copy.dtype};
    for (std::int64_t b = 0; b < t.numel; b += kUnscaleChunk)
      chunks.push_back({static_cast<std::int64_t>(tensors.size()), b});
    tensors.push_back(t);
  }
  if (chunks.empty()) return;
  // One upload of both tables.
  const std::size_t tensors_bytes = round_up(tensors.size() * sizeof(DeviceUpdate));
  const std::size_t chunks_bytes = chunks.size() * sizeof(UpdateChunk);
  std::vector<unsigned char> host(tensors_bytes + chunks_bytes, 0);
  std::memcpy(host.data(), tensors.data(), tensors.size() * sizeof(DeviceUpdate));
  std::memcpy(host.data() + tensors_bytes, chunks.data(), chunks_bytes);
  Scratch scratch(host.size());
  check(cudaMemcpyAsync(scratch.get(), host.data(), host.size(), cudaMemcpyHostToDevice, stream()),
        "cudaMemcpyAsync(parameter table)", op);
  update_all_kernel<<<static_cast<unsigned int>(chunks.size()), kThreads, 0, stream()>>>(
      scratch.as<const DeviceUpdate>(), scratch.as<const UpdateChunk>(tensors_bytes), s);
  check_launch("update_all_kernel", op);
}

void sgd_all(const std::vector<UpdateTensor>& tensors, const SgdStep& s) { update_all(tensors, s, "SGD step"); }
void adam_all(const std::vector<UpdateTensor>& tensors, const AdamStep& s) { update_all(tensors, s, "Adam step"); }

// ---- unscale + Inf/NaN check over every gradient --------------------------------------

struct UnscaleTensor {
  const void* in;
  void* out;
  std::int64_t numel;
  DType in_dtype;
  DType out_dtype;
};
struct UnscaleChunk {
  std::int64_t tensor;
  std::int64_t begin;
};

template <typename T>
__device__ bool unscale_range(const UnscaleTensor& t, std::int64_t begin, std::int64_t end, T inv) {
  bool bad = false;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    store_element(t.out, t.out_dtype, i, unscale_element(load_element<T>(t.in, t.in_dtype, i), inv, bad));
  return bad;
}

// One block per chunk. flags[0]: any gradient held Inf/NaN; flags[1 + t]: gradient t did.
__global__ void unscale_kernel(const UnscaleTensor* tensors, const UnscaleChunk* chunks, float inv_f, double inv_d,
                               unsigned int* flags) {
  const UnscaleChunk c = chunks[blockIdx.x];
  const UnscaleTensor t = tensors[c.tensor];
  const std::int64_t end = c.begin + kUnscaleChunk < t.numel ? c.begin + kUnscaleChunk : t.numel;
  // The branch is the same for the whole block (the output dtype of its tensor).
  const bool bad = t.out_dtype == DType::f64 ? unscale_range<double>(t, c.begin, end, inv_d)
                                             : unscale_range<float>(t, c.begin, end, inv_f);
  if (__syncthreads_or(bad) && threadIdx.x == 0) {
    atomicOr(&flags[0], 1u);
    atomicOr(&flags[1 + c.tensor], 1u);
  }
}

bool unscale(const std::vector<View>& grads, const std::vector<View>& out, double inv_scale,
             std::uint8_t* per_tensor) {
  const std::size_t count = grads.size();
  std::vector<UnscaleTensor> tensors(count);
  std::vector<UnscaleChunk> chunks;
  for (std::size_t t = 0; t < count; ++t) {
    tensors[t] = {grads[t].data, out[t].data, grads[t].numel(), grads[t].dtype, out[t].dtype};
    for (std::int64_t b = 0; b < tensors[t].numel; b += kUnscaleChunk)
      chunks.push_back({static_cast<std::int64_t>(t), b});
  }
  if (per_tensor != nullptr) std::memset(per_tensor, 0, count);
  if (chunks.empty()) return false;

  // One upload: the flags (zeroed), the tensors, the chunks.
  const std::size_t flags_bytes = round_up((count + 1) * sizeof(unsigned int));
  const std::size_t tensors_bytes = round_up(count * sizeof(UnscaleTensor));
  const std::size_t chunks_bytes = chunks.size() * sizeof(UnscaleChunk);
  std::vector<unsigned char> host(flags_bytes + tensors_bytes + chunks_bytes, 0);
  std::memcpy(host.data() + flags_bytes, tensors.data(), count * sizeof(UnscaleTensor));
  std::memcpy(host.data() + flags_bytes + tensors_bytes, chunks.data(), chunks_bytes);
  Scratch scratch(host.size());
  check(cudaMemcpyAsync(scratch.get(), host.data(), host.size(), cudaMemcpyHostToDevice, stream()),
        "cudaMemcpyAsync(gradient table)", "unscale_");
  auto* flags = scratch.as<unsigned int>();
  unscale_kernel<<<static_cast<unsigned int>(chunks.size()), kThreads, 0, stream()>>>(
      scratch.as<const UnscaleTensor>(flags_bytes),
      scratch.as<const UnscaleChunk>(flags_bytes + tensors_bytes),
      static_cast<float>(inv_scale), inv_scale, flags);
  check_launch("unscale_kernel", "unscale_");

  std::vector<unsigned int> found(count + 1);
  check(cudaMemcpyAsync(found.data(), flags, found.size() * sizeof(unsigned int), cudaMemcpyDeviceToHost, stream()),
        "cudaMemcpyAsync(found_inf)", "unscale_");
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize", "unscale_");
  if (per_tensor != nullptr)
    for (std::size_t t = 0; t < count; ++t) per_tensor[t] = found[1 + t] != 0 ? 1 : 0;
  return found[0] != 0;
}

// ---- clipping: sum of squares, scaling ------------------------------------------------

using BlockSum = cub::BlockReduce<double, kThreads>;

__global__ void sum_squares_blocks(const void* p, DType d, std::int64_t n, double* partials) {
  __shared__ typename BlockSum::TempStorage temp;
  double local = 0;
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const double x = load_element<double>(p, d, i);
    local += x * x;
  }
  const double block = BlockSum(temp).Sum(local);
  if (threadIdx.x == 0) partials[blockIdx.x] = block;
}

// The block sums in a fixed order: the same bits on every run of one GPU.
__global__ void sum_partials(const double* partials, unsigned int count, double* out) {
  __shared__ typename BlockSum::TempStorage temp;
  double local = 0;
  for (unsigned int k = threadIdx.x; k < count; k += blockDim.x) local += partials[k];
  const double total = BlockSum(temp).Sum(local);
  if (threadIdx.x == 0) *out = total;
}

double sum_squares(const View& v, double total) {
  const std::int64_t n = v.numel();
  if (n == 0) return total;
  const unsigned int blocks = blocks_for(n, kThreads);
  Scratch scratch((blocks + 1) * sizeof(double));
  auto* partials = scratch.as<double>();
  sum_squares_blocks<<<blocks, kThreads, 0, stream()>>>(v.data, v.dtype, n, partials);
  check_launch("sum_squares_blocks", "clip_grad_norm");
  sum_partials<<<1, kThreads, 0, stream()>>>(partials, blocks, partials + blocks);
  check_launch("sum_partials", "clip_grad_norm");
  double sum = 0;
  check(cudaMemcpyAsync(&sum, partials + blocks, sizeof sum, cudaMemcpyDeviceToHost, stream()),
        "cudaMemcpyAsync(norm)", "clip_grad_norm");
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize", "clip_grad_norm");
  return total + sum;
}

template <typename T>
__global__ void scale_kernel(void* p, DType d, std::int64_t n, T factor) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    store_element(p, d, i, opmath::mul(load_element<T>(p, d, i), factor));
}

void scale(const View& v, double factor) {
  const std::int64_t n = v.numel();
  if (n == 0) return;
  with_compute_type(v.dtype, [&](auto zero) {
    using T = decltype(zero);
    scale_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(v.data, v.dtype, n, static_cast<T>(factor));
  });
  check_launch("scale_kernel", "clip_grad_norm");
}

}  // namespace
}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels {

const TrainingKernels& TrainingKernels::cuda() {
  static const TrainingKernels k{&cuda::sgd,     &cuda::adam,        &cuda::sgd_all, &cuda::adam_all,
                                 &cuda::unscale, &cuda::sum_squares, &cuda::scale};
  return k;
}

}  // namespace ampcheck::kernels
