// Hand-written C++ twins of the samples mlp, cnn and transformer (samples/models/*.json),
// built from engine/nn layers with hierarchical names ("block1.conv1", "encoder.attn.q",
// ...), initialised from the caller's Generator. They are the independent reference the
// model-file interpreter is tested against (same seed: the same parameters and
// bit-identical outputs, tests/samples_model_file_test.cpp), and what the engine's
// training tests and benchmarks train without going through a model file.
//
//   Mlp              2-D points -> classes: three Linear layers with ReLU or GELU
//   SmallCnn         images -> classes: conv-BN-ReLU stem, residual blocks with
//                    BatchNorm2d, global average pooling, a linear head
//   TinyTransformer  token sequences -> classes: token + learned position embeddings,
//                    one encoder layer (attention and a GELU feed-forward, residuals,
//                    pre- or post-LayerNorm), mean over time, a linear head
//   OverflowMlp      an MLP with a planted fp16 overflow, for the NaN-source tests
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/nn/layers.h"
#include "engine/random.h"

namespace ampcheck::samples {

// Low precision is the AMP machinery's job, as for any user model: amp::decorate for
// O2/O3 parameters and masters, amp::Autocast for the per-op casts.
class Mlp : public nn::Module {
 public:
  Mlp(std::int64_t in, std::int64_t hidden, std::int64_t classes, Generator& gen,
      nn::Activation activation = nn::Activation::relu);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Linear> fc1, fc2, head;
  std::shared_ptr<nn::Act> act1, act2;

};

// A planted fp16 overflow, for bisect-nan: fc1, then "energy" = square(gain * h) (gain
// 300, so any |h| > 0.86 squares past fp16's 65504 while fp32 holds it easily), then a
// LayerNorm that brings the values back to order one, ReLU and a head. Under O2 every op
// but the black list runs in fp16 and square's output overflows: the one fix is to
// black-list square (black-listing what feeds it does not help: at O2 square casts its
// input back down). Under O0 it trains like any MLP.
class Energy : public nn::Module {
 public:
  explicit Energy(double g) : nn::Module("Energy"), gain(g) {}
  Tensor forward(const Tensor& x) override;
  double gain;
};

class OverflowMlp : public nn::Module {
 public:
  OverflowMlp(std::int64_t in, std::int64_t hidden, std::int64_t classes, Generator& gen, double gain = 300);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Linear> fc1, head;
  std::shared_ptr<Energy> energy;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Act> act;
};

// A ResNet basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), where the
// shortcut is the identity, or a strided 1x1 conv + BN ("shortcut.0", "shortcut.1")
// when the stride or the channel count changes.
class ResidualBlock : public nn::Module {
 public:
  ResidualBlock(std::int64_t in, std::int64_t out, std::int64_t stride, Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv1, conv2, shortcut_conv;  // shortcut_conv may be null
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, shortcut_bn;

 private:
  std::shared_ptr<nn::Sequential> shortcut_;
};

// stem (3x3 conv, BN, ReLU; width channels), block1 (width -> width), block2 (width ->
// 2 width, stride 2; only when num_blocks == 2), adaptive average pool to 1x1, head.
// Input [N, in_channels, H, W].
class SmallCnn : public nn::Module {
 public:
  SmallCnn(std::int64_t in_channels, std::int64_t classes, Generator& gen,
           std::int64_t width = 16, int num_blocks = 2);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> stem_conv;
  std::shared_ptr<nn::BatchNorm2d> stem_bn;
  std::vector<std::shared_ptr<ResidualBlock>> blocks;
  std::shared_ptr<nn::Linear> head;

};

// One transformer encoder layer on [B, T, D]: attention and a feed-forward
// (ff1, GELU, ff2), each with a residual connection. Pre-norm:
// x + attn(ln1(x)), then x + ff(ln2(x)); post-norm: ln1(x + attn(x)), then
// ln2(x + ff(x)).
class EncoderLayer : public nn::Module {
 public:
  EncoderLayer(std::int64_t dim, std::int64_t heads, std::int64_t ffn, Generator& gen,
               bool use_pre_norm = true);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::MultiHeadAttention> attn;
  std::shared_ptr<nn::Linear> ff1, ff2;
  bool pre_norm;
};

// tok_embed + pos_embed, encoder, (pre-norm: a final LayerNorm "norm"), mean over T,
// head. Input i64 [B, T] with T <= max_len.
class TinyTransformer : public nn::Module {
 public:
  TinyTransformer(std::int64_t vocab, std::int64_t max_len, std::int64_t dim,
                  std::int64_t heads, std::int64_t ffn, std::int64_t classes, Generator& gen,
                  bool pre_norm = true);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Embedding> tok_embed, pos_embed;
  std::shared_ptr<EncoderLayer> encoder;
  std::shared_ptr<nn::LayerNorm> norm;  // null for post-norm
  std::shared_ptr<nn::Linear> head;

};

}  // namespace ampcheck::samples
