// Tensor: a shape, a dtype, a device and shared storage, plus the autograd fields.
// Always row-major contiguous from an element offset into its storage, so a view
// (reshape, flatten, a slice of leading rows) shares storage without strides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <new>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/dtype/dtype.h"

namespace ampcheck {

using Shape = std::vector<std::int64_t>;
std::int64_t numel(const Shape& shape);
// The element count of a shape read from a file: nullopt when a size is negative or the
// product overflows int64 (a header claiming [2^33, 2^31] must not wrap to 0).
std::optional<std::int64_t> checked_numel(const Shape& shape);
std::string to_string(const Shape& shape);  // "[2, 3, 4]"

class Generator;
struct Node;

// A tensor larger than the memory there is: what() names its dtype, shape and size and
// what the machine has. Tensor::empty asks the machine before allocating a large block,
// so an impossible size is refused without a malloc (which could succeed on overcommit
// and be killed later, or abort a sanitizer build).
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::string message) : message_(std::make_shared<const std::string>(std::move(message))) {}
  const char* what() const noexcept override { return message_->c_str(); }

 private:
  std::shared_ptr<const std::string> message_;  // shared: copying an exception must not throw
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage

  // ---- factories ----
  // Storage on `device` comes from that device's allocator (on CUDA, GPU 0's caching
  // allocator: kernels/caching_allocator.h). The other factories make CPU tensors; move
  // them with to(Device).
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor arange(std::int64_t n, DType dtype = DType::f32);  // 0, 1, ..., n-1
  static Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32,
                      double mean = 0.0, double stddev = 1.0);
  static Tensor uniform(const Shape& shape, Generator& gen, double low, double high,
                        DType dtype = DType::f32);
  // Host values, rounded once to `dtype` (an i64 tensor takes integral values).
  static Tensor from(const std::vector<double>& values, const Shape& shape,
                     DType dtype = DType::f32);
  static Tensor from(const std::vector<float>& values, const Shape& shape,
                     DType dtype = DType::f32);
  static Tensor from(const std::vector<std::int64_t>& values, const Shape& shape);
  static Tensor scalar(double value, DType dtype = DType::f32) { return full({}, value, dtype); }

  // ---- what it is ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  std::int64_t dim() const { return static_cast<std::int64_t>(shape().size()); }
  std::int64_t size(std::int64_t d) const;  // negative d counts from the end
  std::int64_t numel() const;
  DType dtype() const;
  Device device() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(dtype()); }

  // ---- data ----
  // The first element, in the memory of the tensor's device (what kernels are given).
  void* raw();
  const void* raw() const;
  // The elements for host code: CPU tensors only (a CUDA tensor's are on the GPU: copy
  // it with to(Device::cpu) first); throws DeviceError otherwise.
  template <typename T>
  T* data() {
    return static_cast<T*>(host_raw());
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(const_cast<Tensor*>(this)->host_raw());
  }
  // Host copies of the values, from any device.
  std::vector<double> to_f64() const;       // exact for every float dtype and i64 < 2^53
  std::vector<std::int64_t> to_i64() const;  // i64 tensors
  double item() const;                       // a one-element tensor's value

  // ---- views and copies (no autograd: the registry ops reshape/slice record it) ----
  Tensor view(const Shape& shape) const;                       // same storage; -1 infers
  Tensor rows(std::int64_t start, std::int64_t count) const;   // same storage, dim 0 range
  Tensor clone() const;                                        // new storage, same values
  Tensor to(DType dtype) const;                                // new storage, converted
  Tensor to(Device device) const;  // a copy on `device`; this tensor itself when already there
  bool shares_storage(const Tensor& other) const;
  void copy_from(const Tensor& src);  // same shape; converts dtype, crosses devices; in place, no autograd
  // Changes this tensor's dtype in place (new storage, rounded once), keeping the handle:
  // every holder of it (a module field, an optimizer) sees the new dtype. Drops .grad.
  void convert_(DType dtype);
  // Moves this tensor's storage to `device` in place, keeping the handle (as convert_:
  // a module's parameters, the closures that hold a constant, see the move). Drops .grad.
  void move_to_(Device device);
  void fill(double value);            // in place, no autograd

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& set_requires_grad(bool on = true);
  bool is_leaf() const;
  const Tensor& grad() const;   // undefined until a backward reached it
  void set_grad(const Tensor& g);
  void zero_grad();             // drops the gradient (the next backward writes it anew)
  const std::shared_ptr<Node>& grad_fn() const;
  void set_grad_fn(std::shared_ptr<Node> node);
  Tensor detach() const;  // same storage, no graph
  // Reverse mode from this tensor: `grad` defaults to 1 for a one-element tensor.
  // retain_graph keeps the graph's saved values for another backward.
  void backward(const Tensor& grad = {}, bool retain_graph = false) const;

  bool same(const Tensor& other) const { return impl_ == other.impl_; }
  const void* id() const { return impl_.get(); }  // identity of the handle's tensor

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  explicit Tensor(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Impl& impl() const;
  void* host_raw();
};

// Guard bytes (for the backend parity harness): while on, every new storage on any device
// gets kGuardBytes of a known pattern before and after its elements, checked when the
// storage is freed; a kernel that writes outside its output is counted.
inline constexpr std::size_t kGuardBytes = 256;
void set_guard_bytes(bool on);
std::uint64_t guard_violations();  // storages freed so far with a guard byte changed

// A tensor's values in the first `limit` elements, for messages: "[1, 2.5, ...]".
std::string preview(const Tensor& t, std::size_t limit = 8);

}  // namespace ampcheck
