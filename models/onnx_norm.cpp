// Normalisation: BatchNormalization, LayerNormalization, InstanceNormalization,
// MeanVarianceNormalization, and Softmax and LogSoftmax (normalised along an axis).
// BatchNormalization and LayerNormalization are the registry's batch_norm and layer_norm,
// the ops the framework's layers ran; the others are composed of registry ops.
#include "models/onnx_exec.h"

namespace ampcheck::models::onnx_impl {

void op_batch_norm(Exec& e) {
  const Tensor x = e.tensor(0);
  const Tensor scale = e.tensor(1), bias = e.tensor(2), mean = e.tensor(3), var = e.tensor(4);
  // ONNX: running = running * momentum + batch * (1 - momentum); PyTorch's momentum is 1 - that.
  const double momentum = 1 - e.attr_f("momentum", 0.9);
  const double eps = e.attr_f("epsilon", 1e-5);
  const bool training = e.training() || e.attr_i("training_mode", 0) != 0;
  Tensor y = batch_norm(x, scale, bias, mean, var, training, momentum, eps);
  e.set(0, y);
  if (e.node.outputs.size() > 1) {
    if (!training) e.only_outputs(1, "running statistics are outputs only in training mode");
    e.set(1, mean.detach().clone());
    if (e.node.outputs.size() > 2) e.set(2, var.detach().clone());
    e.only_outputs(3, "saved mean/variance outputs (opset < 9) are not supported");
  }
}

std::optional<OnnxRefusal> check_batch_norm(const NodeAttrs& a) {
  if (a.node.opset < 9 && a.attr_i("spatial", 1) != 1)
    return OnnxRefusal{"spatial", "0 (per-activation statistics)", "export with opset 9 or newer (BatchNorm over channels)"};
  return std::nullopt;
}

void op_layer_norm(Exec& e) {
  const Tensor x = e.tensor(0);
  const std::int64_t axis = norm_axis(e.attr_i("axis", -1), x.dim(), "axis");
  const Tensor w = e.tensor(1);
  const Tensor b = e.has(2) ? e.tensor(2) : Tensor{};
  const double eps = e.attr_f("epsilon", 1e-5);
  e.set(0, layer_norm(x, x.dim() - axis, w, b, eps));
  // The optional Mean and InvStdDev outputs (training graphs), over the normalised dims.
  const bool mean_out = e.node.outputs.size() > 1 && !e.node.outputs[1].empty();
  const bool inv_out = e.node.outputs.size() > 2 && !e.node.outputs[2].empty();
  if (mean_out || inv_out) {
    std::vector<std::int64_t> dims;
    for (std::int64_t d = axis; d < x.dim(); ++d) dims.push_back(d);
    const Tensor m = mean(x, dims, true);
    if (mean_out) e.set(1, m);
    if (inv_out) e.set(2, rsqrt(add(mean(square(sub(x, m)), dims, true), eps)));
  }
}

void op_instance_norm(Exec& e) {
  const Tensor x = e.tensor(0);
  if (x.dim() < 3) e.fail("takes [N, C, ...], got " + to_string(x.shape()));
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  const Tensor m = mean(x, dims, true);
  const Tensor centred = sub(x, m);
  const Tensor normed = mul(centred, rsqrt(add(mean(square(centred), dims, true), e.attr_f("epsilon", 1e-5))));
  Shape per_channel = {x.size(1)};
  for (std::int64_t d = 2; d < x.dim(); ++d) per_channel.push_back(1);
  e.set(0, add(mul(normed, reshape(e.tensor(1), per_channel)), reshape(e.tensor(2), per_channel)));
}

// MeanVarianceNormalization: (x - mean) / sqrt(variance + 1e-9) over `axes` (ONNX's
// function body).
void op_mvn(Exec& e) {
  const Tensor x = e.tensor(0);
  std::vector<std::int64_t> axes = e.attr_ints("axes").value_or(std::vector<std::int64_t>{0, 2, 3});
  for (auto& a : axes) a = norm_axis(a, x.dim(), "axis");
  const Tensor centred = sub(x, mean(x, axes, true));
  e.set(0, div(centred, sqrt(add(mean(square(centred), axes, true), 1e-9))));
}

void op_softmax(Exec& e) {
  const Tensor x = e.tensor(0);
  const bool log_form = e.node.op_type == "LogSoftmax";
  const std::int64_t axis = norm_axis(e.attr_i("axis", e.node.opset < 13 ? 1 : -1), x.dim(), "axis");
  if (e.node.opset < 13 && axis != x.dim() - 1) {
    // Before opset 13 the input is flattened to 2-D at `axis` and normalised over the rest.
    const Tensor flat = reshape(x, flatten_shape(e, x.shape()));
    const Tensor y = log_form ? log_softmax(flat, 1) : softmax(flat, 1);
    return e.set(0, reshape(y, x.shape()));
  }
  e.set(0, log_form ? log_softmax(x, axis) : softmax(x, axis));
}

}  // namespace ampcheck::models::onnx_impl
