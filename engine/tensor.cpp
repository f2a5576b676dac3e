#include "engine/tensor.h"

#include <cmath>
#include <cstdlib>  // std::aligned_alloc, std::free
#include <cstring>
#include <new>
#include <sstream>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/dtype/convert.h"
#include "engine/random.h"

namespace ampcheck {

struct Tensor::Impl {
  std::shared_ptr<void> storage;  // 64-byte aligned, shared by views
  std::int64_t offset = 0;        // in elements
  Shape shape;
  DType dtype = DType::f32;
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
};

namespace {

std::shared_ptr<void> allocate(std::size_t bytes) {
  const std::size_t rounded = (bytes + 63) / 64 * 64 + 64;  // never 0; room for vector tails
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  return {p, [](void* q) { std::free(q); }};
}

void check_shape(const Shape& shape) {
  for (std::int64_t d : shape)
    if (d < 0) throw std::invalid_argument("tensor shape " + to_string(shape) + " has a negative size");
}

// Host doubles into a tensor of any dtype: floats rounded once, i64 must be integral.
void store_f64(Tensor& t, const double* values) {
  const auto n = static_cast<std::size_t>(t.numel());
  if (t.dtype() == DType::i64) {
    auto* out = t.data<std::int64_t>();
    for (std::size_t i = 0; i < n; ++i) {
      if (values[i] != std::floor(values[i]) || !std::isfinite(values[i]))
        throw std::invalid_argument("i64 tensor: value " + std::to_string(values[i]) + " at " +
                                    std::to_string(i) + " is not an integer");
      out[i] = static_cast<std::int64_t>(values[i]);
    }
    return;
  }
  convert(values, DType::f64, t.raw(), t.dtype(), n);
}

}  // namespace

std::int64_t numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string to_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Tensor::Impl& Tensor::impl() const {
  if (!impl_) throw std::logic_error("use of an undefined tensor");
  return *impl_;
}

// ---- factories ----
Tensor Tensor::empty(const Shape& shape, DType dtype) {
  check_shape(shape);
  auto impl = std::make_shared<Impl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->storage = allocate(static_cast<std::size_t>(ampcheck::numel(shape)) * element_size(dtype));
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.raw(), 0, t.nbytes());  // all-zero bits are +0 in every dtype
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::arange(std::int64_t n, DType dtype) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<double>(i);
  return from(v, {n}, dtype);
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, DType dtype, double mean, double stddev) {
  Tensor t = empty(shape, dtype);
  const auto n = static_cast<std::uint64_t>(t.numel());
  const std::uint64_t first = gen.advance(n);
  std::vector<double> v(n);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = mean + stddev * normal01(gen.seed(), first + i);
  store_f64(t, v.data());
  return t;
}

Tensor Tensor::uniform(const Shape& shape, Generator& gen, double low, double high, DType dtype) {
  Tensor t = empty(shape, dtype);
  const auto n = static_cast<std::uint64_t>(t.numel());
  const std::uint64_t first = gen.advance(n);
  std::vector<double> v(n);
  for (std::uint64_t i = 0; i < n; ++i)
    v[i] = low + (high - low) * static_cast<double>(uniform01(gen.seed(), first + i));
  store_f64(t, v.data());
  return t;
}

Tensor Tensor::from(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  if (static_cast<std::int64_t>(values.size()) != t.numel())
    throw std::invalid_argument("Tensor::from: " + std::to_string(values.size()) +
                                " values for shape " + to_string(shape) + " (" +
                                std::to_string(t.numel()) + " elements)");
  store_f64(t, values.data());
  return t;
}

Tensor Tensor::from(const std::vector<float>& values, const Shape& shape, DType dtype) {
  return from(std::vector<double>(values.begin(), values.end()), shape, dtype);
}

Tensor Tensor::from(const std::vector<std::int64_t>& values, const Shape& shape) {
  Tensor t = empty(shape, DType::i64);
  if (static_cast<std::int64_t>(values.size()) != t.numel())
    throw std::invalid_argument("Tensor::from: " + std::to_string(values.size()) +
                                " values for shape " + to_string(shape));
  std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

// ---- what it is ----
const Shape& Tensor::shape() const { return impl().shape; }
DType Tensor::dtype() const { return impl().dtype; }
std::int64_t Tensor::numel() const { return ampcheck::numel(impl().shape); }
std::int64_t Tensor::size(std::int64_t d) const {
  const std::int64_t r = dim();
  if (d < -r || d >= r)
    throw std::out_of_range("dim " + std::to_string(d) + " out of range for shape " +
                            to_string(shape()));
  return shape()[static_cast<std::size_t>(d < 0 ? d + r : d)];
}

void* Tensor::raw() {
  Impl& i = impl();
  return static_cast<char*>(i.storage.get()) +
         static_cast<std::size_t>(i.offset) * element_size(i.dtype);
}
const void* Tensor::raw() const { return const_cast<Tensor*>(this)->raw(); }

std::vector<double> Tensor::to_f64() const {
  std::vector<double> v(static_cast<std::size_t>(numel()));
  if (dtype() == DType::i64) {
    const auto* p = data<std::int64_t>();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(p[i]);
  } else {
    convert(raw(), dtype(), v.data(), DType::f64, v.size());
  }
  return v;
}

std::vector<std::int64_t> Tensor::to_i64() const {
  if (dtype() != DType::i64)
    throw std::invalid_argument("to_i64: tensor is " + std::string(name(dtype())) + ", not i64");
  const auto* p = data<std::int64_t>();
  return {p, p + numel()};
}

double Tensor::item() const {
  if (numel() != 1)
    throw std::invalid_argument("item(): tensor of shape " + to_string(shape()) +
                                " has " + std::to_string(numel()) + " elements, not 1");
  return to_f64()[0];
}

// ---- views and copies ----
Tensor Tensor::view(const Shape& new_shape) const {
  Shape s = new_shape;
  std::int64_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("view: more than one -1 in " + to_string(new_shape));
      infer = static_cast<int>(i);
    } else {
      if (s[i] < 0) throw std::invalid_argument("view: negative size in " + to_string(new_shape));
      known *= s[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      throw std::invalid_argument("view: cannot infer -1 in " + to_string(new_shape) +
                                  " for " + std::to_string(numel()) + " elements");
    s[static_cast<std::size_t>(infer)] = numel() / known;
  }
  if (ampcheck::numel(s) != numel())
    throw std::invalid_argument("view: shape " + to_string(new_shape) + " has " +
                                std::to_string(ampcheck::numel(s)) + " elements, the tensor " +
                                to_string(shape()) + " has " + std::to_string(numel()));
  auto v = std::make_shared<Impl>();
  v->storage = impl().storage;
  v->offset = impl().offset;
  v->shape = std::move(s);
  v->dtype = impl().dtype;
  return Tensor(std::move(v));
}

Tensor Tensor::rows(std::int64_t start, std::int64_t count) const {
  if (dim() == 0 || start < 0 || count < 0 || start + count > shape()[0])
    throw std::out_of_range("rows(" + std::to_string(start) + ", " + std::to_string(count) +
                            ") of shape " + to_string(shape()));
  auto v = std::make_shared<Impl>();
  v->storage = impl().storage;
  v->shape = shape();
  v->shape[0] = count;
  v->dtype = impl().dtype;
  const std::int64_t row = shape()[0] == 0 ? 0 : numel() / shape()[0];
  v->offset = impl().offset + start * row;
  return Tensor(std::move(v));
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype());
  std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

Tensor Tensor::to(DType target) const {
  Tensor t = empty(shape(), target);
  t.copy_from(*this);
  return t;
}

bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && impl().storage == other.impl().storage;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape() != shape())
    throw std::invalid_argument("copy_from: shape " + to_string(src.shape()) + " into " +
                                to_string(shape()));
  const auto n = static_cast<std::size_t>(numel());
  if (src.dtype() == dtype()) {
    std::memmove(raw(), src.raw(), nbytes());
  } else if (dtype() == DType::i64 || src.dtype() == DType::i64) {
    const std::vector<double> v = src.to_f64();
    store_f64(*this, v.data());
  } else {
    convert(src.raw(), src.dtype(), raw(), dtype(), n);
  }
}

void Tensor::convert_(DType target) {
  if (target == dtype()) return;
  if (impl().grad_fn) throw std::logic_error("convert_: only leaf tensors change dtype in place");
  const Tensor converted = to(target);
  Impl& i = impl();
  i.storage = converted.impl().storage;
  i.offset = 0;
  i.dtype = target;
  i.grad = Tensor();
}

void Tensor::fill(double value) {
  const std::vector<double> v(static_cast<std::size_t>(numel()), value);
  store_f64(*this, v.data());
}

// ---- autograd ----
bool Tensor::requires_grad() const { return defined() && impl().requires_grad; }

Tensor& Tensor::set_requires_grad(bool on) {
  if (impl().grad_fn)
    throw std::logic_error(
        "set_requires_grad on a computed tensor: only leaves (parameters, inputs) take it; "
        "use detach() first for a new leaf");
  if (on && !is_floating(dtype()))
    throw std::invalid_argument("set_requires_grad: an i64 tensor has no gradient");
  impl().requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return !impl().grad_fn; }
const Tensor& Tensor::grad() const { return impl().grad; }
void Tensor::set_grad(const Tensor& g) {
  if (g.defined() && (g.shape() != shape() || g.dtype() != dtype()))
    throw std::invalid_argument("set_grad: gradient " + to_string(g.shape()) + " " +
                                std::string(name(g.dtype())) + " for a tensor " +
                                to_string(shape()) + " " + std::string(name(dtype())));
  impl().grad = g;
}
void Tensor::zero_grad() { impl().grad = Tensor(); }
const std::shared_ptr<Node>& Tensor::grad_fn() const { return impl().grad_fn; }
void Tensor::set_grad_fn(std::shared_ptr<Node> node) {
  impl().grad_fn = std::move(node);
  impl().requires_grad = impl().grad_fn != nullptr;
}

Tensor Tensor::detach() const {
  auto v = std::make_shared<Impl>();
  v->storage = impl().storage;
  v->offset = impl().offset;
  v->shape = impl().shape;
  v->dtype = impl().dtype;
  return Tensor(std::move(v));
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  run_backward(*this, grad, retain_graph);
}

std::string preview(const Tensor& t, std::size_t limit) {
  if (!t.defined()) return "(undefined)";
  const std::vector<double> v = t.to_f64();
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < v.size() && i < limit; ++i) s << (i ? ", " : "") << v[i];
  if (v.size() > limit) s << ", ...";
  s << ']';
  return s.str();
}

}  // namespace ampcheck
