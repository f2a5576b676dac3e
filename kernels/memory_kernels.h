// The kernel family a Tensor itself needs on every device: filling, copying within the
// device and converting between dtypes, and moving bytes between the host and the
// device. The elements are those of View::data: host memory for cpu(), GPU 0's memory
// for cuda(). (engine/dispatch.h explains families.)
#pragma once

#include <cstddef>
#include <string>

#include "kernels/view.h"

namespace ampcheck::kernels {

struct MemoryKernels {
  // Every element of dst set to value rounded once to dst's dtype (i64: value must be
  // integral; the engine checks).
  void (*fill)(const View& dst, double value);
  // dst = src converted to dst's dtype element by element (same numel): float dtypes
  // round once, nearest even; i64 from a float takes the nearest integer, a float from
  // i64 the nearest float. Same dtype: a byte copy.
  void (*convert)(const View& src, const View& dst);
  // Bytes between host memory and this device's memory (on the CPU, both are memcpy).
  // to_host waits for the device's work queued before it.
  void (*to_device)(void* dst, const void* host_src, std::size_t bytes);
  void (*to_host)(void* host_dst, const void* src, std::size_t bytes);
  // Storage on this device, 64-byte aligned, for `bytes` > 0: nullptr when the device
  // cannot give it, with the device's own account of why in `why_not` (the engine's
  // message names the tensor). On CUDA it comes from GPU 0's caching allocator
  // (kernels/caching_allocator.h). free takes back what allocate gave.
  void* (*allocate)(std::size_t bytes, std::string& why_not);
  void (*free)(void* ptr);
  // Waits for the work queued on this device (a no-op on the CPU).
  void (*synchronize)();

  static const MemoryKernels& cpu();
  static const MemoryKernels& cuda();
};

}  // namespace ampcheck::kernels
