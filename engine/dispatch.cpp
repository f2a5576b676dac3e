#include "engine/dispatch.h"

#include <string>

namespace ampcheck {
namespace {

template <typename Range>
Device common(std::string_view op, const Range& tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    if (first == nullptr) {
      first = t;
    } else if (t->device() != first->device()) {
      throw DeviceError(std::string(op) + ": its inputs are on different devices (" +
                        std::string(device_name(first->device())) + " and " +
                        std::string(device_name(t->device())) +
                        "); move them to one with Tensor::to(Device) first (a model and its data "
                        "go to the device together)");
    }
  }
  return first == nullptr ? Device::cpu : first->device();
}

}  // namespace

Device common_device(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  return common(op, tensors);
}

Device common_device(std::string_view op, const std::vector<Tensor>& tensors) {
  std::vector<const Tensor*> ptrs;
  ptrs.reserve(tensors.size());
  for (const Tensor& t : tensors) ptrs.push_back(&t);
  return common(op, ptrs);
}

kernels::View view_of(const Tensor& t) {
  if (!t.defined()) return {};
  return kernels::View{const_cast<void*>(t.raw()), t.dtype(), t.shape()};
}

}  // namespace ampcheck
