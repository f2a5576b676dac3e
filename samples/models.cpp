#include "samples/models.h"

#include <array>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::samples {
namespace {

void require_positive(std::int64_t v, const char* model, const char* what) {
  if (v <= 0)
    throw std::invalid_argument(std::string(model) + ": " + what + " must be positive, got " +
                                std::to_string(v));
}

}  // namespace

// ---- Mlp ----

Mlp::Mlp(std::int64_t in, std::int64_t hidden, std::int64_t classes, Generator& gen,
         nn::Activation activation)
    : nn::Module("Mlp") {
  require_positive(in, "Mlp", "in");
  require_positive(hidden, "Mlp", "hidden");
  require_positive(classes, "Mlp", "classes");
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden, gen));
  act1 = register_module("act1", std::make_shared<nn::Act>(activation));
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, hidden, gen));
  act2 = register_module("act2", std::make_shared<nn::Act>(activation));
  head = register_module("head", std::make_shared<nn::Linear>(hidden, classes, gen));
}

Tensor Mlp::forward(const Tensor& x) { return (*head)((*act2)((*fc2)((*act1)((*fc1)(x))))); }

// ---- OverflowMlp ----

Tensor Energy::forward(const Tensor& x) { return square(mul(x, gain)); }

OverflowMlp::OverflowMlp(std::int64_t in, std::int64_t hidden, std::int64_t classes, Generator& gen, double gain)
    : nn::Module("OverflowMlp") {
  require_positive(in, "OverflowMlp", "in");
  require_positive(hidden, "OverflowMlp", "hidden");
  require_positive(classes, "OverflowMlp", "classes");
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden, gen));
  energy = register_module("energy", std::make_shared<Energy>(gain));
  norm = register_module("norm", std::make_shared<nn::LayerNorm>(Shape{hidden}));
  act = register_module("act", std::make_shared<nn::Act>(nn::Activation::relu));
  head = register_module("head", std::make_shared<nn::Linear>(hidden, classes, gen));
}

Tensor OverflowMlp::forward(const Tensor& x) { return (*head)((*act)((*norm)((*energy)((*fc1)(x))))); }

// ---- ResidualBlock ----

ResidualBlock::ResidualBlock(std::int64_t in, std::int64_t out, std::int64_t stride,
                             Generator& gen)
    : nn::Module("ResidualBlock") {
  require_positive(in, "ResidualBlock", "in");
  require_positive(out, "ResidualBlock", "out");
  require_positive(stride, "ResidualBlock", "stride");
  // Convolutions before a BatchNorm take no bias: the norm's shift replaces it.
  Conv2dOptions first;
  first.stride = {stride, stride};
  first.padding = {1, 1};
  Conv2dOptions same;
  same.padding = {1, 1};
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(in, out, std::array<std::int64_t, 2>{3, 3},
                                                                 gen, first, false));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(out, out, std::array<std::int64_t, 2>{3, 3},
                                                                 gen, same, false));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
  if (stride != 1 || in != out) {
    Conv2dOptions project;
    project.stride = {stride, stride};
    shortcut_conv = std::make_shared<nn::Conv2d>(in, out, std::array<std::int64_t, 2>{1, 1}, gen,
                                                 project, false);
    shortcut_bn = std::make_shared<nn::BatchNorm2d>(out);
    shortcut_ = std::make_shared<nn::Sequential>();
    shortcut_->add(shortcut_conv).add(shortcut_bn);
    register_module("shortcut", shortcut_);
  }
}

Tensor ResidualBlock::forward(const Tensor& x) {
  const Tensor main = (*bn2)((*conv2)(relu((*bn1)((*conv1)(x)))));
  return relu(main + (shortcut_ ? (*shortcut_)(x) : x));
}

// ---- SmallCnn ----

SmallCnn::SmallCnn(std::int64_t in_channels, std::int64_t classes, Generator& gen,
                   std::int64_t width, int num_blocks)
    : nn::Module("SmallCnn") {
  require_positive(in_channels, "SmallCnn", "in_channels");
  require_positive(classes, "SmallCnn", "classes");
  require_positive(width, "SmallCnn", "width");
  if (num_blocks != 1 && num_blocks != 2)
    throw std::invalid_argument("SmallCnn: num_blocks must be 1 or 2, got " +
                                std::to_string(num_blocks));
  Conv2dOptions same;
  same.padding = {1, 1};
  stem_conv = register_module("stem_conv", std::make_shared<nn::Conv2d>(
                                                in_channels, width, std::array<std::int64_t, 2>{3, 3},
                                                gen, same, false));
  stem_bn = register_module("stem_bn", std::make_shared<nn::BatchNorm2d>(width));
  std::int64_t channels = width;
  for (int b = 0; b < num_blocks; ++b) {
    const std::int64_t out = b == 0 ? width : 2 * width;
    auto block = register_module("block" + std::to_string(b + 1),
                                 std::make_shared<ResidualBlock>(channels, out, b == 0 ? 1 : 2, gen));
    blocks.push_back(std::move(block));
    channels = out;
  }
  head = register_module("head", std::make_shared<nn::Linear>(channels, classes, gen));
}

Tensor SmallCnn::forward(const Tensor& x) {
  Tensor h = relu((*stem_bn)((*stem_conv)(x)));
  for (const auto& block : blocks) h = (*block)(h);
  return (*head)(flatten(adaptive_avg_pool2d(h, {1, 1}), 1));
}

// ---- EncoderLayer ----

EncoderLayer::EncoderLayer(std::int64_t dim, std::int64_t heads, std::int64_t ffn, Generator& gen,
                           bool use_pre_norm)
    : nn::Module("EncoderLayer"), pre_norm(use_pre_norm) {
  require_positive(dim, "EncoderLayer", "dim");
  require_positive(ffn, "EncoderLayer", "ffn");
  ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{dim}));
  attn = register_module("attn", std::make_shared<nn::MultiHeadAttention>(dim, heads, gen));
  ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{dim}));
  ff1 = register_module("ff1", std::make_shared<nn::Linear>(dim, ffn, gen));
  ff2 = register_module("ff2", std::make_shared<nn::Linear>(ffn, dim, gen));
}

Tensor EncoderLayer::forward(const Tensor& x) {
  auto feed_forward = [&](const Tensor& h) { return (*ff2)(gelu((*ff1)(h))); };
  if (pre_norm) {
    const Tensor h = x + (*attn)((*ln1)(x));
    return h + feed_forward((*ln2)(h));
  }
  const Tensor h = (*ln1)(x + (*attn)(x));
  return (*ln2)(h + feed_forward(h));
}

// ---- TinyTransformer ----

TinyTransformer::TinyTransformer(std::int64_t vocab, std::int64_t max_len, std::int64_t dim,
                                 std::int64_t heads, std::int64_t ffn, std::int64_t classes,
                                 Generator& gen, bool pre_norm)
    : nn::Module("TinyTransformer") {
  require_positive(vocab, "TinyTransformer", "vocab");
  require_positive(max_len, "TinyTransformer", "max_len");
  require_positive(classes, "TinyTransformer", "classes");
  tok_embed = register_module("tok_embed", std::make_shared<nn::Embedding>(vocab, dim, gen));
  pos_embed = register_module("pos_embed", std::make_shared<nn::Embedding>(max_len, dim, gen));
  encoder = register_module("encoder", std::make_shared<EncoderLayer>(dim, heads, ffn, gen, pre_norm));
  if (pre_norm) norm = register_module("norm", std::make_shared<nn::LayerNorm>(Shape{dim}));
  head = register_module("head", std::make_shared<nn::Linear>(dim, classes, gen));
}

Tensor TinyTransformer::forward(const Tensor& x) {
  if (x.dtype() != DType::i64 || x.dim() != 2)
    throw std::invalid_argument("TinyTransformer: expects i64 token indices [B, T], got " +
                                std::string(name(x.dtype())) + " " + to_string(x.shape()));
  const std::int64_t t = x.size(1), max_len = pos_embed->weight.size(0);
  if (t > max_len)
    throw std::invalid_argument("TinyTransformer: sequence length " + std::to_string(t) +
                                " exceeds max_len " + std::to_string(max_len));
  // [B, T, D] + [T, D]: one position row per time step, broadcast over the batch.
  Tensor h = (*tok_embed)(x) + (*pos_embed)(Tensor::arange(t, DType::i64).to(x.device()));
  h = (*encoder)(h);
  if (norm) h = (*norm)(h);
  return (*head)(mean(h, {1}));
}

}  // namespace ampcheck::samples
