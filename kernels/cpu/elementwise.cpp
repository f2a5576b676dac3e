// The elementwise family on the CPU (kernels/elementwise_kernels.h): the switch on the
// function happens once per call, outside the loops, and each MapFn gets its own
// instantiation of the chunked maps of tensor_io.h, so the inner loop is the scalar
// expression alone (as fast, and the same bits, as the lambdas the ops used to pass).
#include <stdexcept>
#include <string>

#include "kernels/cpu/tensor_io.h"  // map_unary/binary/ternary, load_broadcast, store
#include "kernels/elementwise_kernels.h"

namespace ampcheck::kernels::cpu {
namespace {

// out = f(x) with x broadcast to out's shape (a reduction's gradient spread back over
// its input).
template <typename F>
void map_unary_broadcast(const View& x, const View& out, F f) {
  with_compute_type(out.dtype, [&](auto zero) {
    using T = decltype(zero);
    parallel_for(out.numel(), kChunk, [&](std::int64_t b, std::int64_t e) {
      T buf[kChunk];
      load_broadcast(x, out.shape, b, e, buf);
      for (std::int64_t i = 0; i < e - b; ++i) buf[i] = f(buf[i]);
      store(out, b, e - b, buf);
    });
  });
}

template <MapFn F>
void run(const MapScalars& s, const View* in, const View& out) {
  using M = Map<F>;
  if constexpr (M::arity == 1) {
    const auto f = [s](auto x) {
      using T = decltype(x);
      return M::apply(x, T(s.a), T(s.b));
    };
    if (in[0].shape == out.shape)
      map_unary(in[0], out, f);
    else
      map_unary_broadcast(in[0], out, f);
  } else if constexpr (M::arity == 2) {
    map_binary(in[0], in[1], out, [s](auto x, auto y) {
      using T = decltype(x);
      return M::apply(x, y, T(s.a), T(s.b));
    });
  } else {
    static_assert(M::arity == 3, "a MapFn takes 1 to 3 inputs");
    map_ternary(in[0], in[1], in[2], out, [s](auto x, auto y, auto z) {
      using T = decltype(x);
      return M::apply(x, y, z, T(s.a), T(s.b));
    });
  }
}

void map(MapFn fn, const MapScalars& s, const View* in, int n_inputs, const View& out) {
  if (n_inputs != map_arity(fn))
    throw std::invalid_argument(std::string("map ") + map_fn_name(fn) + ": takes " +
                                std::to_string(map_arity(fn)) + " inputs, given " + std::to_string(n_inputs));
  switch (fn) {
#define AMPCHECK_MAP_CASE(id) \
  case MapFn::id: return run<MapFn::id>(s, in, out);
    AMPCHECK_MAP_FNS(AMPCHECK_MAP_CASE)
#undef AMPCHECK_MAP_CASE
  }
}

}  // namespace
}  // namespace ampcheck::kernels::cpu

namespace ampcheck::kernels {

const ElementwiseKernels& ElementwiseKernels::cpu() {
  static const ElementwiseKernels k{&cpu::map};
  return k;
}

}  // namespace ampcheck::kernels
