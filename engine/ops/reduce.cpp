// Reductions over axes: sum, mean, max. The op works out which dims reduce; the kernels
// (kernels/reduce_kernels.h) fold each output's group in an order fixed by the shapes,
// so results do not depend on the thread count.
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/dispatch.h"
#include "engine/ops/op_util.h"  // normalize_dim, float_dtype
#include "engine/ops/impl.h"
#include "engine/ops/ops.h"
#include "kernels/elementwise_kernels.h"
#include "kernels/reduce_kernels.h"

namespace ampcheck {
namespace impl {
namespace {

struct Plan {
  Shape keep_shape;  // the input's shape with reduced dims set to 1
  Shape out_shape;   // keep_shape without those dims unless keepdim
  std::int64_t count = 1;  // elements reduced into each output
};

Plan plan(const Tensor& x, const ReduceParams& p, const char* op) {
  Plan pl;
  pl.keep_shape = x.shape();
  std::vector<bool> reduce(x.shape().size(), p.dims.empty());
  for (std::int64_t d : p.dims) {
    const auto k = static_cast<std::size_t>(ops::normalize_dim(d, x.dim(), op));
    if (x.dim() == 0) continue;
    if (reduce[k]) throw std::invalid_argument(std::string(op) + ": dim " + std::to_string(d) + " given twice");
    reduce[k] = true;
  }
  for (std::size_t i = 0; i < reduce.size(); ++i) {
    if (!reduce[i]) {
      pl.out_shape.push_back(x.shape()[i]);
      continue;
    }
    pl.count *= x.shape()[i];
    pl.keep_shape[i] = 1;
    if (p.keepdim) pl.out_shape.push_back(1);
  }
  return pl;
}

// The output tensor of a reduction, and the View of it the kernels take: keep_shape, so
// its shape says which dims of x were reduced.
struct Reduced {
  Tensor out;
  kernels::View view;
};
Reduced reduced(const Tensor& x, const Plan& pl) {
  Reduced r{Tensor::empty(pl.out_shape, x.dtype(), x.device()), {}};
  r.view = view_of(r.out);
  r.view.shape = pl.keep_shape;
  return r;
}

// grad (of the reduced shape) spread back over the input's shape, times `scale`.
Tensor spread(const BackwardArgs& a, const Plan& pl, double scale) {
  const Tensor g = a.grad.view(pl.keep_shape);
  const Tensor& x = a.in[0];
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const kernels::View in[1] = {view_of(g)};
  dispatch<kernels::ElementwiseKernels>("reduce backward", {&g, &x})
      .map(kernels::MapFn::mul_scalar, {scale}, in, 1, view_of(out));
  return out;
}

}  // namespace

// sum: d x = g broadcast back
Tensor sum_forward(const ForwardArgs& a) {
  const Tensor& x = a.in[0];
  const Plan pl = plan(x, std::get<ReduceParams>(a.params), "sum");
  ops::float_dtype(x, "sum");
  const Reduced r = reduced(x, pl);
  dispatch<kernels::ReduceKernels>("sum", {&x}).sum(view_of(x), r.view);
  return r.out;
}
std::vector<Tensor> sum_backward(const BackwardArgs& a) {
  return {spread(a, plan(a.in[0], std::get<ReduceParams>(a.params), "sum"), 1.0)};
}

// mean: d x = g / count
Tensor mean_forward(const ForwardArgs& a) {
  const Tensor& x = a.in[0];
  const Plan pl = plan(x, std::get<ReduceParams>(a.params), "mean");
  ops::float_dtype(x, "mean");
  const Reduced r = reduced(x, pl);
  dispatch<kernels::ReduceKernels>("mean", {&x}).mean(view_of(x), r.view);
  return r.out;
}
std::vector<Tensor> mean_backward(const BackwardArgs& a) {
  const Plan pl = plan(a.in[0], std::get<ReduceParams>(a.params), "mean");
  return {spread(a, pl, 1.0 / static_cast<double>(pl.count))};
}

// max: the largest value (NaN wins, as in PyTorch); the first index on ties is saved (an
// i64 tensor of flat indices into x, on x's device) and takes the whole gradient.
Tensor max_forward(const ForwardArgs& a) {
  const Tensor& x = a.in[0];
  const Plan pl = plan(x, std::get<ReduceParams>(a.params), "max");
  if (pl.count == 0) throw std::invalid_argument("max: reducing an empty dim has no maximum");
  ops::float_dtype(x, "max");
  const Reduced r = reduced(x, pl);
  Tensor argmax = Tensor::empty(pl.keep_shape, DType::i64, x.device());
  dispatch<kernels::ReduceKernels>("max", {&x}).max(view_of(x), r.view, view_of(argmax));
  a.saved.tensors.push_back(argmax);
  return r.out;
}
std::vector<Tensor> max_backward(const BackwardArgs& a) {
  const Tensor& x = a.in[0];
  const Tensor& argmax = a.saved.tensors.at(0);
  Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch<kernels::ReduceKernels>("max backward", {&a.grad, &argmax})
      .max_backward(view_of(a.grad), view_of(argmax), view_of(gx));
  return {gx};
}

}  // namespace impl

Tensor sum(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  return call(Op::sum, {x}, ReduceParams{std::move(dims), keepdim});
}
Tensor mean(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  return call(Op::mean, {x}, ReduceParams{std::move(dims), keepdim});
}
Tensor max(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  return call(Op::max, {x}, ReduceParams{std::move(dims), keepdim});
}

}  // namespace ampcheck
