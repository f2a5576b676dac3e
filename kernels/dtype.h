// The element types of tensor storage, as the kernels see them: the four float formats
// and i64 (class labels, embedding indices). Names, limits and parsing are the engine's
// (engine/dtype/dtype.h); the kernels only need to tell the formats apart.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ampcheck {

enum class DType : std::uint8_t { f64, f32, f16, bf16, i64 };

constexpr std::size_t element_size(DType d) {
  return d == DType::f64 || d == DType::i64 ? 8 : d == DType::f32 ? 4 : 2;
}

namespace kernels {

// "f64", "f32", "f16", "bf16", "i64": the kernels' own messages and notes.
constexpr const char* dtype_text(DType d) {
  switch (d) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
  }
  return "?";
}

}  // namespace kernels

}  // namespace ampcheck
