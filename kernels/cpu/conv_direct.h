// The CPU convolution by path, for kernels/cpu/conv_pool.cpp (which picks one), the tests
// that hold the paths to each other bit for bit, and bench/conv_bench.cpp.
//
// im2col + GEMM (conv_pool.cpp) defines the bits of a convolution: each element of y is
// one fma chain over k = (c, i, j) of its group in ascending order, from 0, then + bias;
// each element of the column gradient one chain over the group's output channels, added
// into grad_x tap by tap in (i, j) order; each weight gradient one chain per slot of
// samples (the samples in order, then the pixels), the slots added in order. Padding
// takes part as zeros (fma(w, 0, acc) is not always acc: Inf * 0 is NaN).
//
// The direct kernels (conv_direct.cpp) compute the same chains in the same order without
// the column matrix: the input is split by stride phase into zero-padded planes sharing
// one row pitch, so that every tap is a constant offset and a whole plane's outputs are
// one contiguous loop (the forward and the input gradient: lanes are output pixels); the
// weight gradient's lanes are 16 output channels (a chain runs over pixels, so pixels
// cannot be lanes). They take any geometry; direct_conv_takes() says where they are
// faster.
#pragma once

#include "kernels/conv_pool_kernels.h"
#include "kernels/cpu/gemm.h"  // GemmIsa: the vector path the direct kernels are compiled for
#include "kernels/view.h"

namespace ampcheck::kernels::cpu {

// Whether the CPU table runs this convolution on the direct kernels (depthwise ones; dense
// and grouped ones with several channels per group stay on im2col + GEMM, whose register
// blocking wins there).
bool direct_conv_takes(const ConvGeometry& g);

// The direct kernels, on the vector path `isa` (a path this CPU runs: gemm_isa_supported).
void direct_conv_forward(const ConvGeometry& g, const View& x, const View& weight, const View& bias, const View& y,
                         GemmIsa isa);
void direct_conv_backward_data(const ConvGeometry& g, const View& grad_y, const View& weight, const View& grad_x,
                               GemmIsa isa);
void direct_conv_backward_filter(const ConvGeometry& g, const View& x, const View& grad_y, const View& grad_weight,
                                 GemmIsa isa);

// im2col + GEMM (on active_gemm_isa(); every GEMM path gives the same bits).
void im2col_conv_forward(const ConvGeometry& g, const View& x, const View& weight, const View& bias, const View& y);
void im2col_conv_backward_data(const ConvGeometry& g, const View& grad_y, const View& weight, const View& grad_x);
void im2col_conv_backward_filter(const ConvGeometry& g, const View& x, const View& grad_y, const View& grad_weight);

// The slots of the weight gradient (a function of the shapes only): slot s sums samples
// [s * n / slots, (s + 1) * n / slots), and the slots are added in order.
std::int64_t weight_gradient_slots(const ConvGeometry& g);

}  // namespace ampcheck::kernels::cpu
