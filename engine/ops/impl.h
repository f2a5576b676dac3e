// The forward and backward of every op in engine/ops/op_list.h, declared from the list
// itself: defining them is each op family's file's job (engine/ops/*.cpp).
#pragma once

#include "engine/ops/registry.h"

namespace ampcheck::impl {

#define AMPCHECK_DECLARE_OP(id, arity, amp)      \
  Tensor id##_forward(const ForwardArgs& args);  \
  std::vector<Tensor> id##_backward(const BackwardArgs& args);
AMPCHECK_OPS(AMPCHECK_DECLARE_OP)
#undef AMPCHECK_DECLARE_OP

}  // namespace ampcheck::impl
