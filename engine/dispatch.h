// The one place where an op's arithmetic meets a device. An op (engine/ops/*.cpp, and Tensor itself) says
// what it computes and with which kernel family; dispatch() finds the device its inputs
// live on and hands back that device's table of the family, so op code never asks which
// device it runs on.
//
// A kernel family (kernels/*_kernels.h) is a struct of function pointers over
// kernels::View, with two static accessors: Family::cpu() (kernels/cpu/) and
// Family::cuda() (kernels/cuda/, or kernels/no_gpu/ in a build without CUDA, whose
// tables say so when called; a tensor cannot reach the GPU in such a build anyway).
#pragma once

#include <initializer_list>
#include <string_view>
#include <vector>

#include "engine/device.h"
#include "engine/tensor.h"
#include "kernels/view.h"

namespace ampcheck {

// The device the defined tensors among `tensors` live on (cpu when none is defined).
// Throws DeviceError naming the op and both devices when they differ.
Device common_device(std::string_view op, std::initializer_list<const Tensor*> tensors);
Device common_device(std::string_view op, const std::vector<Tensor>& tensors);

template <class Family>
const Family& kernels_on(Device device) {
  return device == Device::cuda ? Family::cuda() : Family::cpu();
}

// The table of `Family` for the device of `tensors`.
template <class Family>
const Family& dispatch(std::string_view op, const std::vector<Tensor>& tensors) {
  return kernels_on<Family>(common_device(op, tensors));
}
template <class Family>
const Family& dispatch(std::string_view op, std::initializer_list<const Tensor*> tensors) {
  return kernels_on<Family>(common_device(op, tensors));
}

// What a kernel sees of a tensor: its elements (host or device memory), dtype and shape.
// An undefined tensor gives a View with no data and an empty shape.
kernels::View view_of(const Tensor& t);

}  // namespace ampcheck
