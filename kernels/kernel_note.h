// What really ran for the op in progress, in the kernels' own words: a GEMM names its
// library, compute type and algorithm, a convolution its cuDNN algorithm. The engine
// takes the notes after each op's forward and backward (the op event's `kernel`), so the
// choice a library made is recorded, not guessed. Per thread; cheap when nobody notes.
#pragma once

#include <string>
#include <string_view>

namespace ampcheck::kernels {

// Adds one note ("cublasLt: A f16, B f16, C f16, compute 32F, tensor cores, algo 21").
void note_kernel(std::string_view note);
// The notes since the last take, joined with "; ", and clears them ("" when none).
std::string take_kernel_notes();

}  // namespace ampcheck::kernels
