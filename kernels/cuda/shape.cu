// The shape family on GPU 0 (kernels/shape_kernels.h): one thread per element moved, as
// the machine word of the element's size, so every dtype moves bit for bit.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/runtime.h"
#include "kernels/element.h"  // Broadcast: the source offset of an output element
#include "kernels/shape_kernels.h"

namespace ampcheck::kernels::cuda {
namespace {

// out[i] = x[gather.offset(i)]: gather walks out's dims with x's strides permuted.
template <typename W>
__global__ void permute_kernel(const W* x, W* out, Broadcast gather, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = x[gather.offset(i)];
}

// Element i of the copied part, read as (o, j, e): outer index, slab number, element of
// the slab.
template <typename W>
__global__ void copy_along_kernel(const W* src, W* dst, std::int64_t count, std::int64_t inner, std::int64_t src_n,
                                  std::int64_t dst_n, CopyAlong c, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t e = i % inner, slab = i / inner, j = slab % count, o = slab / count;
    dst[(o * dst_n + c.dst_start + j * c.dst_step) * inner + e] = src[(o * src_n + c.src_start + j * c.src_step) * inner + e];
  }
}

// Calls f(W{}) with the unsigned word of an element of `size` bytes.
template <typename F>
void with_word(std::size_t size, F f) {
  switch (size) {
    case 8: f(std::uint64_t{}); break;
    case 4: f(std::uint32_t{}); break;
    case 2: f(std::uint16_t{}); break;
    default: f(std::uint8_t{}); break;
  }
}

void permute(const View& x, const Dims& perm, const View& out) {
  const std::int64_t n = out.numel();
  if (n == 0) return;
  // x's strides in out's order; dims of size 1 dropped, and neighbours that are
  // neighbours in x too (a stride that is the next one's times its size) merged, so any
  // rank whose moves are simple fits Broadcast's kMaxDims.
  const std::size_t rank = perm.size();
  std::vector<std::int64_t> in_stride(rank, 1);
  for (std::size_t i = rank; i-- > 1;) in_stride[i - 1] = in_stride[i] * x.shape[i];
  Dims dims, strides;
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t size = out.shape[i], stride = in_stride[static_cast<std::size_t>(perm[i])];
    if (size == 1) continue;
    if (!dims.empty() && strides.back() == stride * size) {
      dims.back() *= size;
      strides.back() = stride;
    } else {
      dims.push_back(size);
      strides.push_back(stride);
    }
  }
  if (dims.size() > static_cast<std::size_t>(kMaxDims))
    throw std::invalid_argument("permute: this permutation of " + std::to_string(rank) +
                                " dims moves more than " + std::to_string(kMaxDims) +
                                " separate dims, more than the CUDA kernel takes; permute in two steps");
  Broadcast gather;
  gather.rank = static_cast<int>(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    gather.dims[d] = dims[d];
    gather.strides[d] = strides[d];
  }
  with_word(element_size(x.dtype), [&](auto word) {
    using W = decltype(word);
    permute_kernel<W><<<blocks_for(n), 256, 0, stream()>>>(static_cast<const W*>(x.data), static_cast<W*>(out.data),
                                                            gather, n);
    check_launch("permute_kernel", "permute");
  });
}

void copy_along(const View& src, const View& dst, const CopyAlong& c) {
  const auto dim = static_cast<std::size_t>(c.dim);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < dim; ++d) outer *= src.shape[d];
  for (std::size_t d = dim + 1; d < src.shape.size(); ++d) inner *= src.shape[d];
  const std::int64_t n = outer * c.count * inner;
  if (n == 0) return;
  with_word(element_size(src.dtype), [&](auto word) {
    using W = decltype(word);
    copy_along_kernel<W><<<blocks_for(n), 256, 0, stream()>>>(static_cast<const W*>(src.data),
                                                               static_cast<W*>(dst.data), c.count, inner,
                                                               src.shape[dim], dst.shape[dim], c, n);
    check_launch("copy_along_kernel", "copy along a dim (concat, slice)");
  });
}

}  // namespace
}  // namespace ampcheck::kernels::cuda

namespace ampcheck::kernels {

const ShapeKernels& ShapeKernels::cuda() {
  static const ShapeKernels k{&cuda::permute, &cuda::copy_along};
  return k;
}

}  // namespace ampcheck::kernels
