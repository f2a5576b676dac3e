// The shape family on the CPU (kernels/shape_kernels.h): byte copies, a row at a time.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/tensor_io.h"  // kChunk
#include "kernels/shape_kernels.h"

namespace ampcheck::kernels::cpu {
namespace {

std::vector<std::int64_t> strides_of(const Dims& s) {
  std::vector<std::int64_t> st(s.size(), 1);
  for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// n elements of `es` bytes from src (every `stride` elements) to contiguous dst.
void copy_strided(char* dst, const char* src, std::int64_t n, std::int64_t stride, std::size_t es) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * es);
    return;
  }
  auto typed = [&](auto word) {
    using W = decltype(word);
    for (std::int64_t i = 0; i < n; ++i)
      std::memcpy(dst + static_cast<std::size_t>(i) * sizeof(W), src + static_cast<std::size_t>(i * stride) * sizeof(W),
                  sizeof(W));
  };
  switch (es) {
    case 1: typed(std::uint8_t{}); break;
    case 2: typed(std::uint16_t{}); break;
    case 4: typed(std::uint32_t{}); break;
    default: typed(std::uint64_t{}); break;
  }
}

// The output walked row by row (its last dim): one source offset computed per work item,
// then stepped like an odometer, and each row copied as one run (a memcpy where the
// source row is contiguous). Heads split and merged in attention are exactly that.
void permute(const View& x, const Dims& perm, const View& out) {
  const std::size_t rank = perm.size();
  const Dims& out_shape = out.shape;
  if (out.numel() == 0) return;
  const auto in_strides = strides_of(x.shape);
  std::vector<std::int64_t> src_stride(rank);
  for (std::size_t i = 0; i < rank; ++i) src_stride[i] = in_strides[static_cast<std::size_t>(perm[i])];
  const std::size_t es = element_size(x.dtype);
  const auto* src = static_cast<const char*>(x.data);
  auto* dst = static_cast<char*>(out.data);
  if (rank == 0) {
    std::memcpy(dst, src, es);
    return;
  }
  const std::int64_t inner = out_shape[rank - 1], inner_stride = src_stride[rank - 1];
  const std::int64_t rows = out.numel() / inner;
  parallel_for(rows, std::max<std::int64_t>(1, kChunk / inner), [&](std::int64_t rb, std::int64_t re) {
    std::vector<std::int64_t> idx(rank - 1);
    std::int64_t off = 0;
    for (std::size_t d = rank - 1, r = static_cast<std::size_t>(rb); d-- > 0;) {
      idx[d] = static_cast<std::int64_t>(r) % out_shape[d];
      off += idx[d] * src_stride[d];
      r /= static_cast<std::size_t>(out_shape[d]);
    }
    for (std::int64_t row = rb; row < re; ++row) {
      copy_strided(dst + static_cast<std::size_t>(row * inner) * es, src + static_cast<std::size_t>(off) * es, inner,
                   inner_stride, es);
      for (std::size_t d = rank - 1; d-- > 0;) {
        off += src_stride[d];
        if (++idx[d] < out_shape[d]) break;
        off -= src_stride[d] * out_shape[d];
        idx[d] = 0;
      }
    }
  });
}

void copy_along(const View& src, const View& dst, const CopyAlong& c) {
  const Dims& ss = src.shape;
  const Dims& ds = dst.shape;
  const auto dim = static_cast<std::size_t>(c.dim);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < dim; ++d) outer *= ss[d];
  for (std::size_t d = dim + 1; d < ss.size(); ++d) inner *= ss[d];
  const std::size_t es = element_size(src.dtype);
  const auto* s = static_cast<const char*>(src.data);
  auto* t = static_cast<char*>(dst.data);
  const std::int64_t sn = ss[dim], dn = ds[dim];
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t j = 0; j < c.count; ++j)
      std::memcpy(t + static_cast<std::size_t>((o * dn + c.dst_start + j * c.dst_step) * inner) * es,
                  s + static_cast<std::size_t>((o * sn + c.src_start + j * c.src_step) * inner) * es,
                  static_cast<std::size_t>(inner) * es);
}

}  // namespace
}  // namespace ampcheck::kernels::cpu

namespace ampcheck::kernels {

const ShapeKernels& ShapeKernels::cpu() {
  static const ShapeKernels k{&cpu::permute, &cpu::copy_along};
  return k;
}

}  // namespace ampcheck::kernels
