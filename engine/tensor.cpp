#include "engine/tensor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>  // std::aligned_alloc, std::free
#include <cstring>
#include <fstream>
#include <limits>
#include <new>
#include <sstream>
#include <stdexcept>

#include "engine/autograd.h"
#include "engine/dispatch.h"
#include "engine/dtype/convert.h"
#include "engine/memory_budget.h"  // over_budget: the size a tensor may take
#include "engine/random.h"
#include "kernels/memory_kernels.h"

namespace ampcheck {

struct Tensor::Impl {
  std::shared_ptr<void> storage;  // 64-byte aligned, shared by views; on `device`
  Device device = Device::cpu;
  std::int64_t offset = 0;        // in elements
  Shape shape;
  DType dtype = DType::f32;
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
};

namespace {

std::string tensor_text(const Shape& shape, DType dtype) {
  return "a " + std::string(info(dtype).long_name) + " tensor of shape " + to_string(shape);
}

constexpr std::string_view kSmaller = "use smaller sizes (layer widths, batch, data)";


std::atomic<bool> g_guard_bytes{false};
std::atomic<std::uint64_t> g_guard_violations{0};
constexpr unsigned char kGuardPattern = 0xA5;

using kernels::MemoryKernels;

// Whether the guard bytes around a storage of `bytes` at `base` (its first guard byte)
// still hold the pattern. Never throws: it runs in a deleter.
bool guards_intact(const MemoryKernels& mem, const unsigned char* base, std::size_t bytes) noexcept {
  try {
    std::vector<unsigned char> seen(kGuardBytes);
    for (const unsigned char* guard : {base, base + kGuardBytes + bytes}) {
      mem.to_host(seen.data(), guard, kGuardBytes);
      for (unsigned char c : seen)
        if (c != kGuardPattern) return false;
    }
    return true;
  } catch (...) {
    return false;
  }
}

std::shared_ptr<void> allocate(const Shape& shape, DType dtype, Device device) {
  // The size in bytes, checked: a shape such as [3e9, 4e9] overflows 64 bits (one with a
  // zero is empty, whatever the rest: checked_numel).
  const std::optional<std::int64_t> count = checked_numel(shape);
  bool overflow = !count;
  const std::uint64_t elements = count ? static_cast<std::uint64_t>(*count) : 0;
  std::uint64_t bytes = 0;
  overflow = overflow || elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
             __builtin_mul_overflow(elements, static_cast<std::uint64_t>(element_size(dtype)), &bytes) ||
             bytes > std::numeric_limits<std::size_t>::max() - 4 * kGuardBytes;
  if (overflow)
    throw OutOfMemory(tensor_text(shape, dtype) + " needs more than 2^63 elements or 16 EiB, more than any machine has; " +
                      std::string(kSmaller));
  if (device == Device::cpu)
    if (const auto why = over_budget(bytes)) throw OutOfMemory(tensor_text(shape, dtype) + " " + *why + "; " + std::string(kSmaller));
  const MemoryKernels& mem = kernels_on<MemoryKernels>(device);
  const bool guard = g_guard_bytes.load();
  const std::size_t size = std::max<std::size_t>(bytes, 1) + (guard ? 2 * kGuardBytes : 0);
  std::string why_not;
  void* p = mem.allocate(size, why_not);
  if (p == nullptr)
    throw OutOfMemory(tensor_text(shape, dtype) + " needs " + human_bytes(static_cast<double>(bytes)) + " on " +
                      std::string(device_name(device)) + ", and the allocation failed (" + why_not + "); " +
                      std::string(kSmaller));
  if (!guard) return {p, [&mem](void* q) { mem.free(q); }};
  auto* base = static_cast<unsigned char*>(p);
  const std::vector<unsigned char> pattern(kGuardBytes, kGuardPattern);
  mem.to_device(base, pattern.data(), kGuardBytes);
  mem.to_device(base + kGuardBytes + bytes, pattern.data(), kGuardBytes);
  return {base + kGuardBytes, [&mem, base, bytes](void*) {
            if (!guards_intact(mem, base, static_cast<std::size_t>(bytes))) ++g_guard_violations;
            mem.free(base);
          }};
}

void check_shape(const Shape& shape) {
  for (std::int64_t d : shape)
    if (d < 0) throw std::invalid_argument("tensor shape " + to_string(shape) + " has a negative size");
}

// Host doubles into elements [first, first + n) of a tensor of any dtype: floats rounded
// once, i64 must be integral.
void store_f64(Tensor& t, const double* values, std::size_t first, std::size_t n) {
  if (t.dtype() == DType::i64) {
    auto* out = t.data<std::int64_t>() + first;
    for (std::size_t i = 0; i < n; ++i) {
      if (values[i] != std::floor(values[i]) || !std::isfinite(values[i]))
        throw std::invalid_argument("i64 tensor: value " + std::to_string(values[i]) + " at " +
                                    std::to_string(first + i) + " is not an integer");
      out[i] = static_cast<std::int64_t>(values[i]);
    }
    return;
  }
  convert(values, DType::f64, static_cast<char*>(t.raw()) + first * element_size(t.dtype()), t.dtype(), n);
}

void store_f64(Tensor& t, const double* values) { store_f64(t, values, 0, static_cast<std::size_t>(t.numel())); }

// Element i of `t` set to value(i), through a small f64 buffer: a whole-tensor f64 copy
// would need twice the tensor's memory again (four times a float32's).
template <class F>
void store_each(Tensor& t, F value) {
  constexpr std::size_t kChunk = std::size_t{1} << 14;
  const auto n = static_cast<std::size_t>(t.numel());
  std::vector<double> v(std::min(n, kChunk));
  for (std::size_t first = 0; first < n; first += kChunk) {
    const std::size_t m = std::min(kChunk, n - first);
    for (std::size_t i = 0; i < m; ++i) v[i] = value(first + i);
    store_f64(t, v.data(), first, m);
  }
}

}  // namespace

std::int64_t numel(const Shape& shape) {
  // A zero anywhere is an empty tensor, whatever the other dims: their product alone may not
  // fit (a file's claim of 120 dims and one zero).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::optional<std::int64_t> checked_numel(const Shape& shape) {
  if (std::any_of(shape.begin(), shape.end(), [](std::int64_t d) { return d < 0; })) return std::nullopt;
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;  // as numel
  std::int64_t n = 1;
  for (std::int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
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
Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  auto impl = std::make_shared<Impl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->device = device;
  impl->storage = allocate(shape, dtype, device);
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill(value);
  return t;
}

Tensor Tensor::arange(std::int64_t n, DType dtype) {
  Tensor t = empty({n}, dtype);
  store_each(t, [](std::size_t i) { return static_cast<double>(i); });
  return t;
}

Tensor Tensor::randn(const Shape& shape, Generator& gen, DType dtype, double mean, double stddev) {
  Tensor t = empty(shape, dtype);
  const std::uint64_t first = gen.advance(static_cast<std::uint64_t>(t.numel()));
  store_each(t, [&](std::size_t i) { return mean + stddev * normal01(gen.seed(), first + i); });
  return t;
}

Tensor Tensor::uniform(const Shape& shape, Generator& gen, double low, double high, DType dtype) {
  Tensor t = empty(shape, dtype);
  const std::uint64_t first = gen.advance(static_cast<std::uint64_t>(t.numel()));
  store_each(t, [&](std::size_t i) { return low + (high - low) * static_cast<double>(uniform01(gen.seed(), first + i)); });
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
  if (t.nbytes() > 0) std::memcpy(t.raw(), values.data(), t.nbytes());  // an empty vector's data() may be null
  return t;
}

// ---- what it is ----
const Shape& Tensor::shape() const { return impl().shape; }
DType Tensor::dtype() const { return impl().dtype; }
Device Tensor::device() const { return impl().device; }
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

void* Tensor::host_raw() {
  if (device() != Device::cpu)
    throw DeviceError("a " + std::string(device_name(device())) + " tensor " + to_string(shape()) +
                      " was read as host memory; its elements are on the GPU: copy it with to(Device::cpu) first");
  return raw();
}

std::vector<double> Tensor::to_f64() const {
  if (device() != Device::cpu) return to(Device::cpu).to_f64();
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
  if (device() != Device::cpu) return to(Device::cpu).to_i64();
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
  v->device = impl().device;
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
  v->device = impl().device;
  const std::int64_t row = shape()[0] == 0 ? 0 : numel() / shape()[0];
  v->offset = impl().offset + start * row;
  return Tensor(std::move(v));
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType target) const {
  Tensor t = empty(shape(), target, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor t = empty(shape(), dtype(), target);
  if (target == Device::cpu)
    kernels_on<MemoryKernels>(device()).to_host(t.raw(), raw(), nbytes());
  else
    kernels_on<MemoryKernels>(target).to_device(t.raw(), raw(), nbytes());
  return t;
}

bool Tensor::shares_storage(const Tensor& other) const {
  return defined() && other.defined() && impl().storage == other.impl().storage;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape() != shape())
    throw std::invalid_argument("copy_from: shape " + to_string(src.shape()) + " into " +
                                to_string(shape()));
  if (src.device() != device()) {
    copy_from(src.to(device()));
  } else if (dtype() == DType::i64 && src.dtype() != DType::i64) {
    // A float into i64 must hold integers: checked on the host, where the message can
    // name the value.
    const Tensor host = from(src.to_f64(), shape(), DType::i64);
    kernels_on<MemoryKernels>(device()).to_device(raw(), host.raw(), nbytes());
  } else {
    kernels_on<MemoryKernels>(device()).convert(view_of(src), view_of(*this));
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

void Tensor::move_to_(Device target) {
  if (target == device()) return;
  if (impl().grad_fn) throw std::logic_error("move_to_: only leaf tensors move in place; use to(Device)");
  const Tensor moved = to(target);
  Impl& i = impl();
  i.storage = moved.impl().storage;
  i.offset = 0;
  i.device = target;
  i.grad = Tensor();
}

void Tensor::fill(double value) {
  if (dtype() == DType::i64 && (value != std::floor(value) || !std::isfinite(value)))
    throw std::invalid_argument("i64 tensor: value " + std::to_string(value) + " is not an integer");
  kernels_on<MemoryKernels>(device()).fill(view_of(*this), value);
}

void set_guard_bytes(bool on) { g_guard_bytes = on; }
std::uint64_t guard_violations() { return g_guard_violations.load(); }

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
  v->device = impl().device;
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
