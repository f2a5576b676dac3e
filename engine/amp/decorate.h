// AMP O2/O3 "decorate": the model's parameters become low precision (normalisation
// layers kept in fp32 when asked), and the optimizer keeps fp32 master weights (O2).
#pragma once

#include "engine/amp/policy.h"
#include "engine/nn/module.h"
#include "engine/optim/optimizer.h"

namespace ampcheck::amp {

bool is_norm_layer(const nn::Module& m);  // BatchNorm2d, LayerNorm

// O0/O1: nothing (parameters stay fp32). O2: masters first (when master_weight), then
// every parameter to options.dtype except normalisation layers' (keep_norm_fp32).
// O3: every parameter to options.dtype, no masters. `optimizer` may be null.
void decorate(nn::Module& model, optim::Optimizer* optimizer, const AmpOptions& options);

}  // namespace ampcheck::amp
