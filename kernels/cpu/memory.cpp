// The memory family on the CPU (kernels/memory_kernels.h).
#include <cmath>
#include <cstdint>
#include <cstdlib>  // std::aligned_alloc, std::free
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/tensor_io.h"
#include "kernels/memory_kernels.h"

namespace ampcheck::kernels::cpu {
namespace {

// One rounding of the value (straight from binary64), then copies of its bits.
void fill(const View& dst, double value) {
  unsigned char one[8] = {};
  if (dst.dtype == DType::i64) {
    const auto v = static_cast<std::int64_t>(value);
    std::memcpy(one, &v, sizeof v);
  } else {
    convert(&value, DType::f64, one, dst.dtype, 1);
  }
  const std::size_t es = element_size(dst.dtype);
  auto* p = static_cast<unsigned char*>(dst.data);
  for (std::int64_t i = 0; i < dst.numel(); ++i) std::memcpy(p + static_cast<std::size_t>(i) * es, one, es);
}

void convert_view(const View& src, const View& dst) {
  const auto n = static_cast<std::size_t>(dst.numel());
  if (n == 0) return;  // an empty tensor's data may be null
  if (src.dtype == dst.dtype) {
    std::memmove(dst.data, src.data, dst.nbytes());
  } else if (src.dtype == DType::i64) {
    const auto* s = src.as<std::int64_t>();
    std::vector<double> v(s, s + n);
    convert(v.data(), DType::f64, dst.data, dst.dtype, n);
  } else if (dst.dtype == DType::i64) {
    std::vector<double> v(n);
    convert(src.data, src.dtype, v.data(), DType::f64, n);
    auto* d = dst.as<std::int64_t>();
    for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<std::int64_t>(std::llround(v[i]));
  } else {
    convert(src.data, src.dtype, dst.data, dst.dtype, n);
  }
}

void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);  // memcpy of a null pointer is undefined even for 0 bytes
}

void* allocate(std::size_t bytes, std::string& why_not) {
  const std::size_t rounded = (bytes + 63) / 64 * 64 + 64;  // room for vector tails
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) why_not = "the allocation of " + std::to_string(rounded) + " bytes failed";
  return p;
}

void release(void* p) { std::free(p); }
void synchronize() {}

}  // namespace
}  // namespace ampcheck::kernels::cpu

namespace ampcheck::kernels {

const MemoryKernels& MemoryKernels::cpu() {
  static const MemoryKernels k{&cpu::fill, &cpu::convert_view, &cpu::copy_bytes, &cpu::copy_bytes,
                               &cpu::allocate, &cpu::release, &cpu::synchronize};
  return k;
}

}  // namespace ampcheck::kernels
