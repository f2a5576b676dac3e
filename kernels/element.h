// One element of a buffer read into the compute type and written back with one rounding,
// and the index arithmetic of numpy broadcasting: written once for the host and (under
// nvcc) the device, so a CUDA kernel reads and rounds exactly as the CPU kernels do (the
// CPU's vector conversions equal these scalar definitions bit for bit: kernels/cpu/convert.h).
#pragma once

#include <cmath>  // llround
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/dtype.h"
#include "kernels/fp_bits.h"
#include "kernels/view.h"

namespace ampcheck::kernels {

// Element i of a buffer of dtype d, exactly, as T (float or double). i64 converts as a
// static_cast does.
template <typename T>
AMPCHECK_HD T load_element(const void* p, DType d, std::int64_t i) {
  switch (d) {
    case DType::f64: return static_cast<T>(static_cast<const double*>(p)[i]);
    case DType::f32: return static_cast<T>(static_cast<const float*>(p)[i]);
    case DType::f16: return static_cast<T>(f16_to_f32(static_cast<const std::uint16_t*>(p)[i]));
    case DType::bf16: return static_cast<T>(bf16_to_f32(static_cast<const std::uint16_t*>(p)[i]));
    case DType::i64: return static_cast<T>(static_cast<const std::int64_t*>(p)[i]);
  }
  return T(0);
}

// v rounded once (nearest even) to dtype d into element i. A double goes to f16/bf16 in
// one rounding (not through float); i64 takes the nearest integer (llround).
template <typename T>
AMPCHECK_HD void store_element(void* p, DType d, std::int64_t i, T v) {
  switch (d) {
    case DType::f64: static_cast<double*>(p)[i] = static_cast<double>(v); return;
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case DType::f16:
      static_cast<std::uint16_t*>(p)[i] = sizeof(T) == 8 ? f64_to_f16_bits(bits_of(static_cast<double>(v)))
                                                         : f32_to_f16(static_cast<float>(v));
      return;
    case DType::bf16:
      static_cast<std::uint16_t*>(p)[i] = sizeof(T) == 8 ? f64_to_bf16_bits(bits_of(static_cast<double>(v)))
                                                         : f32_to_bf16(static_cast<float>(v));
      return;
    case DType::i64: static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(llround(static_cast<double>(v))); return;
  }
}

// The most dims a kernel argument carries by value (to a CUDA kernel: no pointer chase).
inline constexpr int kMaxDims = 8;

// Where output element `i` of a broadcast reads an input: dims of the output, and the
// input's stride along each (0 where the input has size 1 or lacks the dim).
struct Broadcast {
  int rank = 0;
  std::int64_t dims[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};

  AMPCHECK_HD std::int64_t offset(std::int64_t i) const {
    std::int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const std::int64_t size = dims[d];
      off += (i % size) * strides[d];
      i /= size;
    }
    return off;
  }
};

// The Broadcast of a tensor of `in` shape read at the elements of `out` shape. Throws
// std::invalid_argument when the output has more than kMaxDims dims.
inline Broadcast broadcast_of(const Dims& in, const Dims& out) {
  if (out.size() > static_cast<std::size_t>(kMaxDims))
    throw std::invalid_argument("a tensor of " + std::to_string(out.size()) + " dims: the kernels take at most " +
                                std::to_string(kMaxDims) + "; reshape to fewer dims");
  Broadcast b;
  b.rank = static_cast<int>(out.size());
  const std::size_t lead = out.size() - in.size();
  std::int64_t stride = 1;
  for (std::size_t d = out.size(); d-- > 0;) {
    b.dims[d] = out[d] == 0 ? 1 : out[d];
    const std::int64_t size = d < lead ? 1 : in[d - lead];
    b.strides[d] = size == 1 ? 0 : stride;
    stride *= size;
  }
  return b;
}

}  // namespace ampcheck::kernels
