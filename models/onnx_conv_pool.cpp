// Conv and the pools (MaxPool, AveragePool, the global pools, LRN), DepthToSpace and
// SpaceToDepth, as registry ops. ONNX's windows are more general than the engine's
// conv2d / max_pool2d / avg_pool2d (symmetric padding of at most half the window, floor
// rounding): asymmetric pads, auto_pad SAME_UPPER/SAME_LOWER, ceil_mode and pads wider than
// the engine takes become an explicit padding of the input (a concat, -inf for max, zeros
// for the rest) before a window op with none; dilated pooling is the maximum (or sum) of
// the window's strided slices. Each part is a registry op, so the gradient is autograd's.
#include <algorithm>
#include <cmath>

#include "engine/autograd.h"
#include "models/onnx_exec.h"

namespace ampcheck::models::onnx_impl {
namespace {

using Pair = std::array<std::int64_t, 2>;

// A window op's geometry on its input's real sizes, per spatial dim; a 1-D op runs as 2-D
// with a first spatial dim of size 1.
struct Window {
  int sp = 2;                           // the op's spatial rank (1 or 2)
  Pair kernel{1, 1}, stride{1, 1}, dilation{1, 1};
  Pair begin{0, 0}, end{0, 0};          // the padding the node asks for (auto_pad resolved)
  Pair overhang{0, 0};                  // ceil_mode's windows past the end (not padding)
  Pair out{1, 1};
  bool plain() const {  // what the engine's ops take as they are
    for (int d = 0; d < 2; ++d)
      if (begin[d] != end[d] || overhang[d] != 0 || dilation[d] != 1 || 2 * begin[d] > kernel[d]) return false;
    return true;
  }
};

Pair spatial_pair(const NodeAttrs& a, const std::string& name, int sp, std::int64_t fallback) {
  const auto v = a.attr_ints(name).value_or(std::vector<std::int64_t>(static_cast<std::size_t>(sp), fallback));
  if (static_cast<int>(v.size()) != sp)
    a.fail(name + " has " + std::to_string(v.size()) + " values for " + std::to_string(sp) + " spatial dims");
  return sp == 1 ? Pair{1, v[0]} : Pair{v[0], v[1]};
}

// ONNX's window attributes resolved on the input's spatial sizes `in` (2-D form).
Window window_of(const NodeAttrs& a, int sp, const Pair& in, const Pair& kernel) {
  Window w;
  w.sp = sp;
  w.kernel = kernel;
  w.stride = spatial_pair(a, "strides", sp, 1);
  w.dilation = spatial_pair(a, "dilations", sp, 1);
  const std::string auto_pad = a.attr_s("auto_pad", "NOTSET");
  const bool ceil = a.attr_i("ceil_mode", 0) != 0;
  std::vector<std::int64_t> pads = a.attr_ints("pads").value_or(std::vector<std::int64_t>(static_cast<std::size_t>(2 * sp), 0));
  if (static_cast<int>(pads.size()) != 2 * sp) a.fail("pads has " + std::to_string(pads.size()) + " values for " + std::to_string(sp) + " spatial dims");
  for (int d = 0; d < 2; ++d) {
    const std::size_t k = static_cast<std::size_t>(d);
    if (w.stride[k] < 1 || w.dilation[k] < 1 || w.kernel[k] < 1) a.fail("kernel, strides and dilations must be positive");
    constexpr std::int64_t kLargest = std::int64_t{1} << 31;  // the window's arithmetic stays in int64
    if (w.stride[k] > kLargest || w.dilation[k] > kLargest || w.kernel[k] > kLargest)
      a.fail("kernel, strides and dilations beyond 2^31 (" + std::to_string(w.kernel[k]) + ", " +
             std::to_string(w.stride[k]) + ", " + std::to_string(w.dilation[k]) + "): no input is that large");
    const std::int64_t n = in[k], eff = (w.kernel[k] - 1) * w.dilation[k] + 1;
    if (d == 0 && sp == 1) continue;
    const std::size_t p = static_cast<std::size_t>(sp == 1 ? 0 : d);
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      // The output covers ceil(n / stride) windows; the padding they need is split evenly,
      // the odd one at the end (UPPER) or the beginning (LOWER).
      w.out[k] = (n + w.stride[k] - 1) / w.stride[k];
      const std::int64_t total = std::max<std::int64_t>(0, (w.out[k] - 1) * w.stride[k] + eff - n);
      const std::int64_t small = total / 2;
      w.begin[k] = auto_pad == "SAME_UPPER" ? small : total - small;
      w.end[k] = total - w.begin[k];
      continue;
    }
    if (auto_pad != "VALID") {
      w.begin[k] = pads[p];
      w.end[k] = pads[p + static_cast<std::size_t>(sp)];
    }
    if (w.begin[k] < 0 || w.end[k] < 0) a.fail("negative pads " + fmt_ints(pads));
    // Beyond 2^31 no padded input fits in memory, and the sums below stay far from overflow.
    if (w.begin[k] > (std::int64_t{1} << 31) || w.end[k] > (std::int64_t{1} << 31))
      a.fail("pads " + fmt_ints(pads) + " exceed 2^31: no padded input of that size fits in memory");
    const std::int64_t span = n + w.begin[k] + w.end[k] - eff;
    if (span < 0)
      a.fail("the window " + std::to_string(eff) + " is larger than the padded input " + std::to_string(n + w.begin[k] + w.end[k]));
    w.out[k] = (ceil ? (span + w.stride[k] - 1) / w.stride[k] : span / w.stride[k]) + 1;
    // As PyTorch: the last window must start inside the input or its leading padding.
    if (ceil && (w.out[k] - 1) * w.stride[k] >= n + w.begin[k]) --w.out[k];
    w.overhang[k] = std::max<std::int64_t>(0, (w.out[k] - 1) * w.stride[k] + eff - (n + w.begin[k] + w.end[k]));
  }
  return w;
}

// x [N, C, H, W] padded by `before` and `after` rows and columns of `fill` (a negative
// `after` crops).
Tensor pad_spatial(Tensor x, const Pair& before, const Pair& after, double fill) {
  for (int d = 0; d < 2; ++d) {
    const std::int64_t dim = 2 + d, b = before[static_cast<std::size_t>(d)], f = after[static_cast<std::size_t>(d)];
    if (f < 0) x = slice(x, dim, 0, x.size(dim) + f);
    if (b <= 0 && f <= 0) continue;
    std::vector<Tensor> parts;
    auto band = [&](std::int64_t n) {
      Shape s = x.shape();
      s[static_cast<std::size_t>(dim)] = n;
      return Tensor::full(s, fill, x.dtype(), x.device());
    };
    if (b > 0) parts.push_back(band(b));
    parts.push_back(x);
    if (f > 0) parts.push_back(band(f));
    x = concat(parts, dim);
  }
  return x;
}

// x padded with copies of its border rows and columns: for a contiguous window (no
// dilation) the maximum over it is the maximum over its elements inside x, since a window
// that reaches into the padding also covers the border element copied there; finite, so
// nothing non-finite appears in the model that the framework's kernel never makes.
// `count` copies of the one-wide slice t along dim, by doubling: a file's pad of any size
// costs log2(count) concatenations, and the band's storage is what the memory limit sees.
Tensor repeated(const Tensor& t, std::int64_t dim, std::int64_t count) {
  Tensor band = t;
  while (band.size(dim) < count) band = concat({band, band}, dim);
  return band.size(dim) == count ? band : slice(band, dim, 0, count);
}

Tensor pad_edge(Tensor x, const Pair& before, const Pair& after) {
  for (int d = 0; d < 2; ++d) {
    const std::int64_t dim = 2 + d, b = before[static_cast<std::size_t>(d)], f = after[static_cast<std::size_t>(d)];
    if (f < 0) x = slice(x, dim, 0, x.size(dim) + f);
    if (b <= 0 && f <= 0) continue;
    const std::int64_t n = x.size(dim);
    std::vector<Tensor> parts;
    if (b > 0) parts.push_back(repeated(slice(x, dim, 0, 1), dim, b));
    parts.push_back(x);
    if (f > 0) parts.push_back(repeated(slice(x, dim, n - 1, n), dim, f));
    x = concat(parts, dim);
  }
  return x;
}

// The window's strided slices of a padded input, one [N, C, out_h, out_w] per kernel tap.
std::vector<Tensor> taps(const Tensor& xp, const Window& w) {
  std::vector<Tensor> out;
  for (std::int64_t i = 0; i < w.kernel[0]; ++i)
    for (std::int64_t j = 0; j < w.kernel[1]; ++j) {
      Tensor t = xp;
      const Pair at{i * w.dilation[0], j * w.dilation[1]};
      for (int d = 0; d < 2; ++d) {
        const auto k = static_cast<std::size_t>(d);
        const std::int64_t start = at[k], stop = at[k] + (w.out[k] - 1) * w.stride[k] + 1;
        if (start != 0 || stop != t.size(2 + d) || w.stride[k] != 1) t = slice(t, 2 + d, start, stop, w.stride[k]);
      }
      out.push_back(t);
    }
  return out;
}

// For each output position, how many of its window's taps fall in [lo, hi) of the padded
// input, per dim (the average's divisor is the product over the dims).
std::vector<std::int64_t> counted(const Window& w, int d, std::int64_t lo, std::int64_t hi) {
  const auto k = static_cast<std::size_t>(d);
  std::vector<std::int64_t> c;
  for (std::int64_t o = 0; o < w.out[k]; ++o) {
    std::int64_t n = 0;
    for (std::int64_t j = 0; j < w.kernel[k]; ++j) {
      const std::int64_t p = o * w.stride[k] + j * w.dilation[k];
      n += p >= lo && p < hi;
    }
    c.push_back(n);
  }
  return c;
}

int spatial_rank(const Exec& e, std::int64_t dim) {
  if (dim == 4) return 2;
  if (dim == 3) return 1;
  e.fail("takes [N, C, H, W] (or [N, C, L]), got rank " + std::to_string(dim) +
         "; 3-D convolution and pooling are not supported");
}

Tensor as_2d(const Tensor& x, int sp) { return sp == 1 ? reshape(x, {x.size(0), x.size(1), 1, x.size(2)}) : x; }
Tensor from_2d(const Tensor& y, int sp) { return sp == 1 ? reshape(y, {y.size(0), y.size(1), y.size(3)}) : y; }

Pair kernel_attr(const Exec& e, int sp) {
  const auto k = e.attr_ints("kernel_shape");
  if (!k || static_cast<int>(k->size()) != sp) e.fail("kernel_shape is missing or has the wrong length");
  return sp == 1 ? Pair{1, (*k)[0]} : Pair{(*k)[0], (*k)[1]};
}

// x: the input in its 2-D form ([N, C, 1, L] for a 1-D op).
Window pool_window(const Exec& e, const Shape& x, int sp) { return window_of(e, sp, {x[2], x[3]}, kernel_attr(e, sp)); }

// MaxPool's Indices: for each output, where its maximum is in the (unpadded) input,
// flattened over N, C and the spatial dims, row-major (storage_order 0) or column-major.
// Integers: computed on the host from the data's values, as are the values of a host input.
void max_pool_host(Exec& e, const Array& x, const Window& w, bool values) {
  const Shape& s = x.shape;
  const std::int64_t n = s[0], c = s[1], h = w.sp == 1 ? 1 : s[2], wd = s.back();
  const bool column = e.attr_i("storage_order", 0) != 0;
  Shape os = {n, c};
  if (w.sp == 2) os.push_back(w.out[0]);
  os.push_back(w.out[1]);
  std::vector<std::int64_t> where;
  std::vector<std::int64_t> idx;
  for (std::int64_t b = 0; b < n * c; ++b)
    for (std::int64_t oi = 0; oi < w.out[0]; ++oi)
      for (std::int64_t oj = 0; oj < w.out[1]; ++oj) {
        std::int64_t best = -1;
        for (std::int64_t ki = 0; ki < w.kernel[0]; ++ki)
          for (std::int64_t kj = 0; kj < w.kernel[1]; ++kj) {
            const std::int64_t r = oi * w.stride[0] + ki * w.dilation[0] - w.begin[0];
            const std::int64_t q = oj * w.stride[1] + kj * w.dilation[1] - w.begin[1];
            if (r < 0 || r >= h || q < 0 || q >= wd) continue;
            const std::int64_t at = (b * h + r) * wd + q;
            if (best < 0 || x.at(at) > x.at(best)) best = at;
          }
        if (best < 0) e.fail("a window lies entirely in the padding");
        idx.push_back(best);
        const std::int64_t r = (best / wd) % h, q = best % wd;
        where.push_back(column ? b * h * wd + q * h + r : best);
      }
  if (values) e.set(0, take(x, os, idx));
  if (e.has_output(1)) e.set(1, Array::ints(os, where));
}

}  // namespace

std::optional<OnnxRefusal> check_pool(const NodeAttrs& a) {
  const std::string& op = a.node.op_type;
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") return std::nullopt;
  const std::string auto_pad = a.attr_s("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    return OnnxRefusal{"auto_pad", "\"" + auto_pad + "\" is not an auto_pad ONNX defines", "export with explicit pads"};
  if (const auto k = a.attr_ints("kernel_shape"); k && k->size() > 2)
    return OnnxRefusal{"kernel_shape", std::to_string(k->size()) + "-D pooling " + fmt_ints(*k) + " (1-D and 2-D are supported)",
                       "pool over at most two spatial dims"};
  return std::nullopt;
}

std::optional<OnnxRefusal> check_conv(const NodeAttrs& a) {
  const std::string auto_pad = a.attr_s("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    return OnnxRefusal{"auto_pad", "\"" + auto_pad + "\" is not an auto_pad ONNX defines", "export with explicit pads"};
  if (const auto k = a.attr_ints("kernel_shape"); k && k->size() > 2)
    return OnnxRefusal{"kernel_shape", std::to_string(k->size()) + "-D convolution " + fmt_ints(*k) + " (1-D and 2-D are supported)",
                       "use 1-D or 2-D convolutions"};
  return std::nullopt;
}

void op_conv(Exec& e) {
  Tensor x = e.tensor(0), w = e.tensor(1);
  const int sp = spatial_rank(e, x.dim());
  if (w.dim() != sp + 2) e.fail("weight " + to_string(w.shape()) + " does not match the input " + to_string(x.shape()));
  if (auto k = e.attr_ints("kernel_shape")) {
    // Checked against the rank it describes before it is read.
    if (static_cast<int>(k->size()) != sp)
      e.fail("kernel_shape " + fmt_ints(*k) + " has " + std::to_string(k->size()) + " values for the input's " +
             std::to_string(sp) + " spatial dims");
    for (int d = 0; d < sp; ++d)
      if ((*k)[static_cast<std::size_t>(d)] != w.size(2 + d))
        e.fail("kernel_shape " + fmt_ints(*k) + " does not match the weight " + to_string(w.shape()));
  }
  x = as_2d(x, sp);
  w = as_2d(w, sp);
  const Window g = window_of(e, sp, {x.size(2), x.size(3)}, {w.size(2), w.size(3)});
  Conv2dOptions o;
  o.stride = g.stride;
  o.dilation = g.dilation;
  o.groups = e.attr_i("group", 1);
  if (g.begin == g.end) {
    o.padding = g.begin;
  } else {  // asymmetric (SAME_*, or exported so): the zeros made explicit
    x = pad_spatial(x, g.begin, g.end, 0);
  }
  e.set(0, from_2d(conv2d(x, w, e.has(2) ? e.tensor(2) : Tensor{}, o), sp));
}

namespace {

// Crops negative `before`/`after` amounts, then pads the rest with zeros.
Tensor pad_or_crop(Tensor x, const Pair& before, const Pair& after) {
  for (int d = 0; d < 2; ++d) {
    const std::int64_t dim = 2 + d, b = before[static_cast<std::size_t>(d)], f = after[static_cast<std::size_t>(d)];
    if (b < 0 || f < 0) x = slice(x, dim, std::max<std::int64_t>(0, -b), x.size(dim) - std::max<std::int64_t>(0, -f));
  }
  return pad_spatial(x, {std::max<std::int64_t>(0, before[0]), std::max<std::int64_t>(0, before[1])},
                     {std::max<std::int64_t>(0, after[0]), std::max<std::int64_t>(0, after[1])}, 0);
}

// x with stride - 1 zeros after each element of dims 2 and 3 (none after the last).
Tensor spread(Tensor x, const Pair& stride) {
  for (int d = 0; d < 2; ++d) {
    const std::int64_t s = stride[static_cast<std::size_t>(d)], dim = 2 + d, n = x.size(dim);
    if (s == 1 || n == 0) continue;
    Shape one = x.shape(), zeros = x.shape(), merged = x.shape();
    one.insert(one.begin() + dim + 1, 1);
    zeros.insert(zeros.begin() + dim + 1, s - 1);
    merged[static_cast<std::size_t>(dim)] = n * s;
    const Tensor t = concat({reshape(x, one), Tensor::zeros(zeros, x.dtype(), x.device())}, dim + 1);
    x = slice(reshape(t, merged), dim, 0, (n - 1) * s + 1);
  }
  return x;
}

}  // namespace

// ConvTranspose: the gradient of a convolution with respect to its input, written as a
// convolution: the input spread by the strides (zeros between its elements), padded by
// dilation (kernel - 1) less the node's pads (cropped where those are larger) plus
// output_padding at the end, and convolved at stride 1 with the weight flipped in space
// and, per group, with its input and output channels swapped. Registry ops throughout, so
// the gradient is autograd's (PyTorch's conv_transpose2d is conv2d's backward).
void op_conv_transpose(Exec& e) {
  Tensor x = e.tensor(0), w = e.tensor(1);
  const int sp = spatial_rank(e, x.dim());
  if (w.dim() != sp + 2) e.fail("weight " + to_string(w.shape()) + " does not match the input " + to_string(x.shape()));
  x = as_2d(x, sp);
  w = as_2d(w, sp);
  const std::int64_t groups = e.attr_i("group", 1), cin = x.size(1);
  if (groups < 1 || w.size(0) != cin || cin % groups != 0)
    e.fail("weight " + to_string(w.shape()) + " does not fit " + std::to_string(cin) + " input channels in " +
           std::to_string(groups) + " groups");
  const std::int64_t cout = w.size(1) * groups;
  const Pair kernel{w.size(2), w.size(3)}, stride = spatial_pair(e, "strides", sp, 1), dilation = spatial_pair(e, "dilations", sp, 1);
  const std::vector<std::int64_t> out_pad_list = e.attr_ints("output_padding").value_or(std::vector<std::int64_t>(static_cast<std::size_t>(sp), 0));
  if (static_cast<int>(out_pad_list.size()) != sp) e.fail("output_padding has " + std::to_string(out_pad_list.size()) + " values");
  const Pair out_pad = sp == 1 ? Pair{0, out_pad_list[0]} : Pair{out_pad_list[0], out_pad_list[1]};
  const std::vector<std::int64_t> pads = e.attr_ints("pads").value_or(std::vector<std::int64_t>(static_cast<std::size_t>(2 * sp), 0));
  if (static_cast<int>(pads.size()) != 2 * sp) e.fail("pads has " + std::to_string(pads.size()) + " values");
  Pair begin = sp == 1 ? Pair{0, pads[0]} : Pair{pads[0], pads[1]};
  Pair end = sp == 1 ? Pair{0, pads[1]} : Pair{pads[2], pads[3]};
  const std::string auto_pad = e.attr_s("auto_pad", "NOTSET");
  const auto output_shape = e.attr_ints("output_shape");
  if (auto_pad == "VALID") begin = end = {0, 0};
  if (output_shape || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    // The padding that gives the output shape asked for (SAME: input * stride), split as
    // ONNX says: the odd one at the end for SAME_UPPER, at the beginning otherwise.
    std::vector<std::int64_t> want;
    if (output_shape) want.assign(output_shape->end() - sp, output_shape->end());
    for (int d = 0; d < 2; ++d) {
      const auto k = static_cast<std::size_t>(d);
      if (sp == 1 && d == 0) continue;
      const std::int64_t in = x.size(2 + d);
      const std::int64_t target = output_shape ? want[static_cast<std::size_t>(sp == 1 ? 0 : d)] : in * stride[k];
      const std::int64_t total = stride[k] * (in - 1) + out_pad[k] + (kernel[k] - 1) * dilation[k] + 1 - target;
      // Floor division, as ONNX's reference computes it: a negative total (an output_shape
      // one larger than the natural size) grows the end, not the beginning.
      const std::int64_t half = total >= 0 ? total / 2 : -((1 - total) / 2);
      begin[k] = auto_pad == "SAME_UPPER" ? half : total - half;
      end[k] = total - begin[k];
    }
  }
  Pair before{}, after{};
  for (std::size_t k = 0; k < 2; ++k) {
    before[k] = dilation[k] * (kernel[k] - 1) - begin[k];
    after[k] = dilation[k] * (kernel[k] - 1) - end[k] + out_pad[k];
  }
  const Tensor xs = pad_or_crop(spread(x, stride), before, after);
  // [Cin, Cout/g, kh, kw] -> [Cout, Cin/g, kh, kw], flipped in space.
  Tensor wt = reshape(permute(reshape(w, {groups, cin / groups, cout / groups, kernel[0], kernel[1]}), {0, 2, 1, 3, 4}),
                      {cout, cin / groups, kernel[0], kernel[1]});
  for (int d = 0; d < 2; ++d) {
    const std::int64_t n = kernel[static_cast<std::size_t>(d)];
    if (n == 1) continue;
    std::vector<std::int64_t> reversed;
    for (std::int64_t i = n; i-- > 0;) reversed.push_back(i);
    wt = take_along(e, wt, 2 + d, reversed);
  }
  Conv2dOptions o;
  o.dilation = dilation;
  o.groups = groups;
  e.set(0, from_2d(conv2d(xs, wt, e.has(2) ? e.tensor(2) : Tensor{}, o), sp));
}

void host_max_pool(Exec& e) {
  const Array& x = e.host(0, "X");
  const int sp = spatial_rank(e, static_cast<std::int64_t>(x.shape.size()));
  Shape s2 = x.shape;
  if (sp == 1) s2.insert(s2.begin() + 2, 1);
  max_pool_host(e, x, pool_window(e, s2, sp), true);
}

void op_pool(Exec& e) {
  const std::string& op = e.node.op_type;
  Tensor x = e.tensor(0);
  const int sp = spatial_rank(e, x.dim());
  x = as_2d(x, sp);
  if (op == "GlobalAveragePool") return e.set(0, from_2d(adaptive_avg_pool2d(x, {1, 1}), sp));
  if (op == "GlobalMaxPool") return e.set(0, from_2d(max(x, {2, 3}, true), sp));
  const Window w = pool_window(e, x.shape(), sp);
  const Pair after{w.end[0] + w.overhang[0], w.end[1] + w.overhang[1]};
  Tensor y;
  if (op == "MaxPool") {
    if (e.has_output(1)) max_pool_host(e, *e.values(0, "X"), w, false);  // the Indices (integers)
    if (w.plain()) {
      y = max_pool2d(x, w.kernel, w.stride, w.begin);
    } else if (w.dilation == Pair{1, 1}) {
      y = max_pool2d(pad_edge(x, w.begin, after), w.kernel, w.stride, {0, 0});
    } else {
      // The maximum over the window's taps; a dilated window may skip the border element,
      // so the padding is the dtype's lowest finite value (never the maximum of a window
      // that holds an element of x, unless all of them are -inf).
      const Tensor xp = pad_spatial(x, w.begin, after, -info(x.dtype()).max());
      {
        std::vector<Tensor> parts = taps(xp, w);
        for (Tensor& t : parts) t = reshape(t, {t.size(0), t.size(1), t.size(2), t.size(3), 1});
        y = max(concat(parts, 4), {4});
      }
    }
    return e.set(0, from_2d(y, sp));
  }
  // AveragePool: the sum over the window's taps divided by how many count: the input's
  // elements (count_include_pad 0, ONNX's default) or those and the padding (1); windows
  // that ceil_mode lets run past the padding never count what lies beyond it (PyTorch).
  const bool include_pad = e.attr_i("count_include_pad", 0) != 0;
  const Pair lo = include_pad ? Pair{0, 0} : w.begin;
  const Pair hi = include_pad ? Pair{x.size(2) + w.begin[0] + w.end[0], x.size(3) + w.begin[1] + w.end[1]}
                              : Pair{x.size(2) + w.begin[0], x.size(3) + w.begin[1]};
  const auto rows = counted(w, 0, lo[0], hi[0]), cols = counted(w, 1, lo[1], hi[1]);
  const double full = static_cast<double>(w.kernel[0] * w.kernel[1]);
  std::vector<double> share;  // counted / full: the engine's average divides by full
  bool whole = true;
  for (std::int64_t r : rows)
    for (std::int64_t c : cols) {
      const double n = static_cast<double>(r * c);
      if (n == 0) e.fail("a window lies entirely in the padding");
      share.push_back(n / full);
      whole = whole && n == full;
    }
  if (w.plain()) {
    y = avg_pool2d(x, w.kernel, w.stride, w.begin);  // the padding counts as zeros
  } else {
    const Tensor xp = pad_spatial(x, w.begin, after, 0);
    if (w.dilation == Pair{1, 1}) {
      y = avg_pool2d(xp, w.kernel, w.stride, {0, 0});
    } else {
      for (const Tensor& t : taps(xp, w)) y = y.defined() ? add(y, t) : t;
      y = div(y, full);
    }
  }
  if (!whole) y = div(y, Tensor::from(share, {1, 1, w.out[0], w.out[1]}, DType::f64).to(y.dtype()).to(y.device()));
  e.set(0, from_2d(y, sp));
}

// LRN: x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels)^beta, the
// sum an average pool over channels (floor((size-1)/2) before, ceil after).
void op_lrn(Exec& e) {
  const Tensor x = e.tensor(0);
  if (x.dim() < 3) e.fail("takes [N, C, ...], got " + to_string(x.shape()));
  const std::int64_t size = e.attr_i("size", 0);
  if (size < 1) e.fail("size must be positive");
  const double alpha = e.attr_f("alpha", 1e-4), beta = e.attr_f("beta", 0.75), bias = e.attr_f("bias", 1.0);
  const std::int64_t rest = x.numel() / (x.size(0) * x.size(1));
  Tensor sq = reshape(square(x), {x.size(0), 1, x.size(1), rest});
  sq = pad_spatial(sq, {(size - 1) / 2, 0}, {size / 2, 0}, 0);
  Tensor scale = reshape(avg_pool2d(sq, {size, 1}, {1, 1}, {0, 0}), x.shape());
  scale = add(mul(scale, alpha), bias);
  e.set(0, mul(x, pow(scale, -beta)));
}

// DepthToSpace (DCR, CRD) and SpaceToDepth: a reshape, a permute and a reshape.
void op_depth_space(Exec& e) {
  const Tensor x = e.tensor(0);
  if (x.dim() != 4) e.fail("takes [N, C, H, W], got " + to_string(x.shape()));
  const std::int64_t b = e.attr_i("blocksize", 0);
  if (b < 1) e.fail("blocksize must be positive");
  const std::int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  if (e.node.op_type == "SpaceToDepth") {
    if (h % b || w % b) e.fail("H and W must be multiples of blocksize " + std::to_string(b));
    const Tensor t = permute(reshape(x, {n, c, h / b, b, w / b, b}), {0, 3, 5, 1, 2, 4});
    return e.set(0, reshape(t, {n, c * b * b, h / b, w / b}));
  }
  if (c % (b * b)) e.fail("C must be a multiple of blocksize^2 = " + std::to_string(b * b));
  const bool crd = e.attr_s("mode", "DCR") == "CRD";
  const Tensor t = crd ? permute(reshape(x, {n, c / (b * b), b, b, h, w}), {0, 1, 4, 2, 5, 3})
                       : permute(reshape(x, {n, b, b, c / (b * b), h, w}), {0, 3, 4, 1, 5, 2});
  e.set(0, reshape(t, {n, c / (b * b), h * b, w * b}));
}

}  // namespace ampcheck::models::onnx_impl
