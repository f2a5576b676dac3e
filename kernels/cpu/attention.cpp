// The attention family's CPU table: the CPU has no fused attention kernel, so every call
// takes the op's composed path (engine/ops/attention.cpp), which defines the arithmetic
// and is the reference the GPU's fused kernels are held to.
#include <stdexcept>

#include "kernels/attention_kernels.h"

namespace ampcheck::kernels {
namespace {

std::string no_fused(DType, const AttentionShape&, bool, DType) {
  return "the CPU computes attention as its GEMMs and softmax (no fused kernel)";
}

[[noreturn]] void unreachable() {
  throw std::logic_error("scaled_dot_product_attention: the CPU has no fused attention kernel (fused_problem says so)");
}
void fused_forward(const View&, const View&, const View&, const View&, const AttentionShape&, const View&, const View&) {
  unreachable();
}
void fused_backward(const View&, const View&, const View&, const View&, const View&, const View&, const View&,
              const AttentionShape&, const View&, const View&, const View&) {
  unreachable();
}

}  // namespace

const AttentionKernels& AttentionKernels::cpu() {
  static const AttentionKernels k{&no_fused, &fused_forward, &fused_backward};
  return k;
}

}  // namespace ampcheck::kernels
