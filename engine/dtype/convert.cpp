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
namespace {

template <typename T>
const T* as(const void* p, std::size_t i = 0) {
  return static_cast<const T*>(p) + i;
}
template <typename T>
T* as(void* p, std::size_t i = 0) {
  return static_cast<T*>(p) + i;
}

// f16/bf16 to and from f32 through the vector kernels.
void narrow_from_f32(const float* s, std::uint16_t* d, std::size_t n, DType to) {
  (to == DType::f16 ? k::cpu::f32_to_f16 : k::cpu::f32_to_bf16)(s, d, n, conversion_isa());
}
void widen_to_f32(const std::uint16_t* s, float* d, std::size_t n, DType from) {
  (from == DType::f16 ? k::cpu::f16_to_f32 : k::cpu::bf16_to_f32)(s, d, n, conversion_isa());
}

}  // namespace

std::uint64_t encode(double x, DType to) {
  switch (to) {
    case DType::f64: return k::bits_of(x);
    case DType::f32: return k::bits_of(static_cast<float>(x));
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

void convert(const void* src, DType from, void* dst, DType to, std::size_t n) {
  if (!is_floating(from) || !is_floating(to))
    throw std::invalid_argument("convert: " + std::string(name(from)) + " -> " +
                                std::string(name(to)) + ": only float dtypes convert here");
  const bool narrow_from = from == DType::f16 || from == DType::bf16;
  const bool narrow_to = to == DType::f16 || to == DType::bf16;
  if (from == to) {
    std::memcpy(dst, src, n * static_cast<std::size_t>(info(from).bits / 8));
  } else if (from == DType::f32 && narrow_to) {
    narrow_from_f32(as<float>(src), as<std::uint16_t>(dst), n, to);
  } else if (narrow_from && to == DType::f32) {
    widen_to_f32(as<std::uint16_t>(src), as<float>(dst), n, from);
  } else if (from == DType::f64 && to == DType::f32) {
    std::transform(as<double>(src), as<double>(src, n), as<float>(dst),
                   [](double v) { return static_cast<float>(v); });
  } else if (from == DType::f32 && to == DType::f64) {
    std::transform(as<float>(src), as<float>(src, n), as<double>(dst),
                   [](float v) { return static_cast<double>(v); });
  } else if (from == DType::f64) {  // to f16/bf16: one rounding from binary64
    const auto fn = to == DType::f16 ? k::f64_to_f16_bits : k::f64_to_bf16_bits;
    std::transform(as<double>(src), as<double>(src, n), as<std::uint16_t>(dst),
                   [fn](double v) { return fn(k::bits_of(v)); });
  } else {  // f16/bf16 -> f64 or f16 <-> bf16: through f32, which holds both exactly
    std::array<float, 1024> tmp;
    for (std::size_t i = 0; i < n; i += tmp.size()) {
      const std::size_t m = std::min(tmp.size(), n - i);
      widen_to_f32(as<std::uint16_t>(src, i), tmp.data(), m, from);
      if (to == DType::f64)
        std::transform(tmp.data(), tmp.data() + m, as<double>(dst, i),
                       [](float v) { return static_cast<double>(v); });
      else
        narrow_from_f32(tmp.data(), as<std::uint16_t>(dst, i), m, to);
    }
  }
}

k::cpu::Isa conversion_isa() {
  static const k::cpu::Isa isa = [] {
    const char* env = std::getenv("AMPCHECK_CPU_ISA");
    if (env == nullptr || *env == '\0') return k::cpu::best_isa();
    const auto chosen = k::cpu::isa_from_name(env);
    if (!chosen)
      throw std::invalid_argument("AMPCHECK_CPU_ISA=\"" + std::string(env) +
                                  "\" is not a conversion path; use scalar, f16c, avx512 or "
                                  "avx512_bf16, or unset it for the best one");
    if (!k::cpu::isa_supported(*chosen))
      throw std::invalid_argument("AMPCHECK_CPU_ISA=" + std::string(env) +
                                  " is not supported by this CPU; the best it runs is " +
                                  std::string(k::cpu::isa_name(k::cpu::best_isa())));
    return *chosen;
  }();
  return isa;
}

std::string_view conversion_isa_name() { return k::cpu::isa_name(conversion_isa()); }

}  // namespace ampcheck
