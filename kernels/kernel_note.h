// What really ran for the op in progress, in the kernels' own words: a GEMM names its
// library, compute type and algorithm, a convolution its cuDNN algorithm. The engine
// takes the notes after each op's forward and backward (the op event's `kernel`), so the
// choice a library made is recorded, not guessed. Per thread. Only while an observer
// listens does the engine turn noting on; a kernel that builds its note per call asks
// noting() first, so an unobserved run builds no strings.
#pragma once

#include <string>
#include <string_view>

namespace ampcheck::kernels {

// Whether notes are kept on this thread (off by default), and the switch the engine uses.
bool noting();
void set_noting(bool on);

// Adds one note (dropped while noting is off) ("cublasLt: A f16, B f16, C f16, compute 32F, tensor cores, algo 21").
void note_kernel(std::string_view note);
// The notes since the last take, joined with "; ", and clears them ("" when none).
std::string take_kernel_notes();

}  // namespace ampcheck::kernels
