// The GPU side of the kernels, seen from the host. Built from kernels/cuda/*.cu when
// CUDA is on; a build without CUDA links kernels/no_gpu/, where every entry point says
// it has no GPU implementation, so callers never test for the build flavour themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ampcheck::kernels::cuda {

struct Probe {
  bool built_with_cuda = false;
  int device_count = 0;
  std::string why_none;     // set when device_count == 0: the runtime's own words
  std::string device_name;  // of device 0
  int compute_capability = 0;  // 90 for sm_90
};
// Asks the CUDA runtime once; cheap to call again.
const Probe& probe();
// "CUDA 13.0, sm_75 sm_80 sm_90" or "no CUDA (AMPCHECK_CUDA=OFF)".
std::string build_description();

// Conversions on GPU 0 of host buffers (copied in, converted, copied back), with the
// same scalar definitions as the CPU (kernels/fp_bits.h). Throw std::runtime_error
// naming the failed call.
void f64_to_f16(const double* src, std::uint16_t* dst, std::size_t n);
void f64_to_bf16(const double* src, std::uint16_t* dst, std::size_t n);
void f32_to_f16(const float* src, std::uint16_t* dst, std::size_t n);
void f32_to_bf16(const float* src, std::uint16_t* dst, std::size_t n);
void f16_to_f32(const std::uint16_t* src, float* dst, std::size_t n);
void bf16_to_f32(const std::uint16_t* src, float* dst, std::size_t n);

}  // namespace ampcheck::kernels::cuda
