// What every CUDA source of the backend shares (CUDA builds only): status checks whose
// messages name the call and the op, the stream the engine's work runs on, GPU 0's
// caching allocator, and launch sizes for grid-stride loops.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

#include "kernels/caching_allocator.h"

namespace ampcheck::kernels::cuda {

// Throws std::runtime_error "<op>: <call> failed: <error name> (<error text>)", clearing
// the runtime's last error first. Success returns.
void check(cudaError_t status, std::string_view call, std::string_view op);
// The launch just made (a kernel's name) for an op: throws as check() when it failed.
void check_launch(std::string_view kernel, std::string_view op);

// The stream every kernel, copy and library call of the engine runs on: GPU 0's legacy
// default stream, so the work of one step is ordered without events and a synchronous
// copy to the host waits for it.
cudaStream_t stream();

// GPU 0's caching allocator, made on first use (kernels/caching_allocator.h).
CachingAllocator& allocator();

// Blocks of `threads` for a grid-stride loop over n items (at least 1, at most enough to
// fill the GPU several times over).
unsigned int blocks_for(std::int64_t n, unsigned int threads = 256);

}  // namespace ampcheck::kernels::cuda
