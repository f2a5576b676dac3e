// The elementwise family on GPU 0 (kernels/elementwise_kernels.h): one grid-stride
// kernel per MapFn and compute type, instantiated from the scalar definitions the CPU
// uses (kernels/elementwise.h), so the switch on the function happens once, on the host.
// Each thread reads its inputs through the shared element definitions (kernels/element.h:
// f16/bf16 widened exactly to f32, i64 masks converted as the CPU does), computes in the
// output's compute type and rounds once into the output. An input of the output's shape
// is read at the output's index; a broadcast one through its Broadcast strides.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/runtime.h"  // check_launch, stream, blocks_for
#include "kernels/element.h"       // load_element, store_element, Broadcast
#include "kernels/elementwise_kernels.h"
#include "kernels/kernel_note.h"

namespace ampcheck::kernels::cuda::elementwise {
namespace {

using i64 = std::int64_t;

constexpr int kThreads = 256;
constexpr int kMaxInputs = 3;

// One input as a kernel argument, by value.
struct MapInput {
  const void* data = nullptr;
  DType dtype = DType::f32;
  bool direct = true;  // the output's shape: element i is input element i
  Broadcast where;     // otherwise: where output element i reads it
};
struct MapInputs {
  MapInput in[kMaxInputs];
};

template <typename T>
__device__ T load_input(const MapInput& in, i64 i) {
  return load_element<T>(in.data, in.dtype, in.direct ? i : in.where.offset(i));
}

template <MapFn F, typename T>
__global__ void __launch_bounds__(kThreads) map_kernel(MapInputs ins, void* out, DType out_dtype, i64 n, T a, T b) {
  using M = Map<F>;
  for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<i64>(gridDim.x) * blockDim.x) {
    const T x = load_input<T>(ins.in[0], i);
    T r;
    if constexpr (M::arity == 1) {
      r = M::apply(x, a, b);
    } else if constexpr (M::arity == 2) {
      r = M::apply(x, load_input<T>(ins.in[1], i), a, b);
    } else {
      static_assert(M::arity == 3, "a MapFn takes 1 to 3 inputs");
      r = M::apply(x, load_input<T>(ins.in[1], i), load_input<T>(ins.in[2], i), a, b);
    }
    store_element(out, out_dtype, i, r);
  }
}

template <MapFn F>
void launch(const MapScalars& s, const View* in, const View& out) {
  const i64 n = out.numel();
  if (n == 0) return;
  MapInputs ins;
  for (int k = 0; k < Map<F>::arity; ++k) {
    ins.in[k].data = in[k].data;
    ins.in[k].dtype = in[k].dtype;
    ins.in[k].direct = in[k].shape == out.shape;
    if (!ins.in[k].direct) ins.in[k].where = broadcast_of(in[k].shape, out.shape);
  }
  const bool f64 = out.dtype == DType::f64;
  if (f64)
    map_kernel<F, double><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(ins, out.data, out.dtype, n, s.a, s.b);
  else
    map_kernel<F, float><<<blocks_for(n, kThreads), kThreads, 0, stream()>>>(
        ins, out.data, out.dtype, n, static_cast<float>(s.a), static_cast<float>(s.b));
  check_launch("map_kernel", map_fn_name(F));
  if (noting()) note_kernel(std::string(map_fn_name(F)) + ": CUDA map kernel, " + (f64 ? "f64" : "f32") + " compute");
}

void map(MapFn fn, const MapScalars& s, const View* in, int n_inputs, const View& out) {
  if (n_inputs != map_arity(fn))
    throw std::invalid_argument(std::string("map ") + map_fn_name(fn) + ": takes " +
                                std::to_string(map_arity(fn)) + " inputs, given " + std::to_string(n_inputs));
  switch (fn) {
#define AMPCHECK_MAP_CASE(id) \
  case MapFn::id: return launch<MapFn::id>(s, in, out);
    AMPCHECK_MAP_FNS(AMPCHECK_MAP_CASE)
#undef AMPCHECK_MAP_CASE
  }
}

}  // namespace
}  // namespace ampcheck::kernels::cuda::elementwise

namespace ampcheck::kernels {

const ElementwiseKernels& ElementwiseKernels::cuda() {
  static const ElementwiseKernels k{&cuda::elementwise::map};
  return k;
}

}  // namespace ampcheck::kernels
