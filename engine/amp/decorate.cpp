#include "engine/amp/decorate.h"

namespace ampcheck::amp {

bool is_norm_layer(const nn::Module& m) { return m.type() == "BatchNorm2d" || m.type() == "LayerNorm"; }

void decorate(nn::Module& model, optim::Optimizer* optimizer, const AmpOptions& options) {
  if (options.level == Level::O0 || options.level == Level::O1) return;
  if (!is_low_precision(options.dtype))
    throw PolicyError("decorate: dtype must be float16 or bfloat16, got " + std::string(name(options.dtype)));
  const bool o2 = options.level == Level::O2;
  // The masters are copied before the parameters lose precision.
  if (o2 && options.master_weight && optimizer != nullptr) optimizer->enable_master_weights();
  const bool keep_norm = o2 && options.keep_norm_fp32;
  model.cast_parameters(options.dtype, [keep_norm](const nn::Module& m) { return keep_norm && is_norm_layer(m); });
}

}  // namespace ampcheck::amp
