#include "engine/dtype/convert.h"

#include <algorithm>
#include <array>
#include <cstdlib>  // std::getenv
#include <cstring>  // std::memcpy
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda.h"
#include "kernels/fp_bits.h"

namespace ampcheck {
namespace k = kernels;

std::uint64_t encode(double x, DType to) {
  switch (to) {
    case DType::f64: return k::bits_of(x);
    case DType::f32: return k::bits_of(k::f64_to_f32(x));
    case DType::f16: return k::f64_to_f16_bits(k::bits_of(x));
    case DType::bf16: return k::f64_to_bf16_bits(k::bits_of(x));
    case DType::i64: break;
  }
  throw std::invalid_argument("encode: " + std::string(name(to)) + " is not a floating-point dtype");
}

double decode(std::uint64_t bits, DType from) {
  switch (from) {
    case DType::f64: return k::double_of(bits);
    case DType::f32: return k::float_of(static_cast<std::uint32_t>(bits));
    case DType::f16: return k::f16_to_f32(static_cast<std::uint16_t>(bits));
    case DType::bf16: return k::bf16_to_f32(static_cast<std::uint16_t>(bits));
    case DType::i64: break;
  }
  throw std::invalid_argument("decode: " + std::string(name(from)) + " is not a floating-point dtype");
}

std::vector<std::uint64_t> encode_all(const std::vector<double>& values, DType to,
                                      Device device) {
  std::vector<std::uint64_t> bits(values.size());
  if (device == Device::cuda && (to == DType::f16 || to == DType::bf16)) {
    std::vector<std::uint16_t> narrow(values.size());
    (to == DType::f16 ? k::cuda::f64_to_f16 : k::cuda::f64_to_bf16)(values.data(), narrow.data(),
                                                                   values.size());
    std::copy(narrow.begin(), narrow.end(), bits.begin());
  } else {  // f64 and f32 are the hardware's own formats on either device
    std::transform(values.begin(), values.end(), bits.begin(),
                   [to](double v) { return encode(v, to); });
  }
  return bits;
}

std::string_view conversion_isa_name() { return k::cpu::isa_name(conversion_isa()); }

}  // namespace ampcheck
