// Chrome-trace JSON of a GPU run, read as a stream of events: the PyTorch profiler's
// (Kineto) of every schema generation and PaddlePaddle's profiler's. Which one it is comes
// from the content (the event categories, the schema version), never from the file name:
//   Kineto 2022+   cpu_op, user_annotation, python_function, cuda_runtime, cuda_driver,
//                  kernel, gpu_memcpy, gpu_memset, ac2g flows; args "External id",
//                  "correlation", "Input Dims", "Input type", "Concrete Inputs",
//                  "Sequence number"
//   Kineto 2021    Operator, Runtime, Kernel, Memcpy, Memset, "async" flows; the GPU side
//                  names its op in "external id" (lower case)
//   HTA's older    Kernel and Runtime events with "external id", no op events
//   Paddle         Operator, CudaRuntime, Kernel, Memcpy, Memset, Forward, Backward,
//                  Optimization, ProfileStep; args "correlation id", "input_shapes",
//                  "input_dtypes"; names end in their duration ("matmul_v2 dygraph[1.2 us]")
// What is read: ops and annotations (with their thread, time, inputs and autograd sequence
// number), nn.Module frames, launches, kernels, copies and memsets, the rank and the GPUs.
#pragma once

#include "profiles/byte_source.h"
#include "profiles/profile.h"

namespace ampcheck::profiles {

// Reads the trace from `source` (positioned at its first byte) into a Profile whose
// kernels are not attributed yet (profiles/attribution.h does that). Throws ProfileError.
Profile read_chrome_trace(ByteSource& source);

}  // namespace ampcheck::profiles
