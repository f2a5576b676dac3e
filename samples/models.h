// The three sample models, built from engine/nn layers with hierarchical names
// ("block2.conv1", "encoder.attn.q", ...), initialised from the caller's Generator.
//
//   Mlp              2-D points -> classes: three Linear layers with ReLU or GELU
//   SmallCnn         images -> classes: conv-BN-ReLU stem, residual blocks with
//                    BatchNorm2d, global average pooling, a linear head
//   TinyTransformer  token sequences -> classes: token + learned position embeddings,
//                    one encoder layer (attention and a GELU feed-forward, residuals,
//                    pre- or post-LayerNorm), mean over time, a linear head
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/nn/layers.h"
#include "engine/random.h"

namespace ampcheck::samples {

// What the three models share: the dtype their forward runs in.
//
// f32 (the default) uses the parameters as they are. f16 or bf16 is low-precision
// storage with f32 master weights: the parameters stay f32 (what the optimizer updates),
// each forward casts them with the cast op (recorded, so gradients reach the masters in
// f32), floating inputs are cast too, and every activation is stored in the low dtype
// while each op computes in f32 ("opmath"). BatchNorm running statistics stay f32.
class SampleModel : public nn::Module {
 public:
  using nn::Module::Module;

  void set_dtype(DType dtype);
  DType dtype() const { return dtype_; }

  // Runs run() with the parameters (and a floating input) in dtype().
  Tensor forward(const Tensor& x) final;

 protected:
  virtual Tensor run(const Tensor& x) = 0;

  // Parameters the forward casts: every layer whose weights the model uses.
  void track(nn::Linear& m);
  void track(nn::Conv2d& m);
  void track(nn::BatchNorm2d& m);
  void track(nn::LayerNorm& m);
  void track(nn::Embedding& m);
  void track(nn::MultiHeadAttention& m);

 private:
  DType dtype_ = DType::f32;
  // The layers' public weight fields; a low-precision forward points them at casts of
  // the masters and restores them afterwards.
  std::vector<Tensor*> tracked_;
};

// 2 -> hidden -> hidden -> classes: fc1, act1, fc2, act2, head.
class Mlp : public SampleModel {
 public:
  Mlp(std::int64_t in, std::int64_t hidden, std::int64_t classes, Generator& gen,
      nn::Activation activation = nn::Activation::relu);
  std::shared_ptr<nn::Linear> fc1, fc2, head;
  std::shared_ptr<nn::Act> act1, act2;

 protected:
  Tensor run(const Tensor& x) override;
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
class SmallCnn : public SampleModel {
 public:
  SmallCnn(std::int64_t in_channels, std::int64_t classes, Generator& gen,
           std::int64_t width = 16, int num_blocks = 2);
  std::shared_ptr<nn::Conv2d> stem_conv;
  std::shared_ptr<nn::BatchNorm2d> stem_bn;
  std::vector<std::shared_ptr<ResidualBlock>> blocks;
  std::shared_ptr<nn::Linear> head;

 protected:
  Tensor run(const Tensor& x) override;
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
class TinyTransformer : public SampleModel {
 public:
  TinyTransformer(std::int64_t vocab, std::int64_t max_len, std::int64_t dim,
                  std::int64_t heads, std::int64_t ffn, std::int64_t classes, Generator& gen,
                  bool pre_norm = true);
  std::shared_ptr<nn::Embedding> tok_embed, pos_embed;
  std::shared_ptr<EncoderLayer> encoder;
  std::shared_ptr<nn::LayerNorm> norm;  // null for post-norm
  std::shared_ptr<nn::Linear> head;

 protected:
  Tensor run(const Tensor& x) override;
};

}  // namespace ampcheck::samples
