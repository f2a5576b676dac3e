// The functional API users train with. Every function is one registry op (or a thin
// spelling of one: flatten and transpose are reshape and permute), so each call is
// seen by autograd, the AMP policy and the inspector alike.
//
// dtypes: float inputs of any float dtype; f16/bf16 compute in f32 ("opmath") and round
// the result once to the output dtype; binary ops promote to the wider input dtype.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/ops/registry.h"
#include "engine/random.h"
#include "engine/tensor.h"

namespace ampcheck {

// ---- GEMM ----
// 1-D and 2-D operands as numpy.matmul; N-D operands batch over leading dims
// (broadcast), with a 2-D right-hand side shared across the batch.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});  // x W^T + b
// TransformerEngine's fp8 Linear (engine/ops/fp8_linear.cpp): x and W cast to fp8 with the
// meta's scales, the fp8 GEMM, the amaxes written back into the meta.
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, std::shared_ptr<Fp8LinearMeta> meta);
Tensor bmm(const Tensor& a, const Tensor& b);  // [B,M,K] x [B,K,N]
// PyTorch's F.scaled_dot_product_attention: softmax(scale Q K^T + mask) V over the last
// two dims of Q [..., L, E], K [..., S, E], V [..., S, Ev] (the same leading dims); the
// mask (optional) is additive and broadcasts to [..., L, S]; scale defaults to
// 1 / sqrt(E); causal hides key j from query i where j > i. engine/ops/attention.cpp.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {},
                                    std::optional<double> scale = std::nullopt, bool causal = false);

// ---- recurrent layers: one layer, one direction, a whole time-major sequence ----
// PyTorch's nn.LSTM / nn.GRU / nn.RNN gate order and equations (kernels/rnn_kernels.h):
// x [T, B, I], w_ih [G*H, I], w_hh [G*H, H], optional b_ih, b_hh [G*H] (both or
// neither), h0 and (LSTM) c0 [B, H]; the result is every step's h, [T, B, H].
// engine/ops/rnn.cpp.
struct RnnInputs {
  Tensor x, w_ih, w_hh, b_ih, b_hh, h0, c0;
};
Tensor lstm(const RnnInputs& in);
Tensor gru(const RnnInputs& in);
Tensor rnn_tanh(const RnnInputs& in);
Tensor rnn_relu(const RnnInputs& in);

// ---- convolution and pooling, NCHW ----
struct Conv2dOptions {
  std::array<std::int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  std::int64_t groups = 1;
};
// weight [C_out, C_in/groups, kH, kW]; bias [C_out] or undefined
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const Conv2dOptions& options = {});
Tensor max_pool2d(const Tensor& x, std::array<std::int64_t, 2> kernel,
                  std::array<std::int64_t, 2> stride = {0, 0},  // 0: = kernel
                  std::array<std::int64_t, 2> padding = {0, 0});
Tensor avg_pool2d(const Tensor& x, std::array<std::int64_t, 2> kernel,
                  std::array<std::int64_t, 2> stride = {0, 0},
                  std::array<std::int64_t, 2> padding = {0, 0});  // padding counts as zeros
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<std::int64_t, 2> output_size);

// ---- normalisation ----
// x [N, C, ...]; weight, bias [C] (undefined: 1 and 0). In training, normalises with the
// batch statistics and updates running_mean/var in place (unbiased variance, as
// PyTorch); in eval, uses them.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum = 0.1, double eps = 1e-5);
// Normalises over the last `normalized_dims` dims; weight/bias have those dims' shape.
Tensor layer_norm(const Tensor& x, std::int64_t normalized_dims, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// ---- activations ----
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, bool tanh_approx = false);
Tensor silu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor hardswish(const Tensor& x);
Tensor hardsigmoid(const Tensor& x);

// ---- arithmetic (broadcasting) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor reciprocal(const Tensor& x);
Tensor erf(const Tensor& x);  // the Gauss error function (torch.erf, paddle.erf, ONNX Erf)
Tensor clamp(const Tensor& x, double lo, double hi);  // +-inf for an open side

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

// ---- reductions ----
Tensor sum(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
Tensor max(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
Tensor softmax(const Tensor& x, std::int64_t dim = -1);
Tensor log_softmax(const Tensor& x, std::int64_t dim = -1);

// ---- losses (mean reduction) ----
// logits [N, C], labels i64 [N] in [0, C)
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing = 0);
Tensor mse_loss(const Tensor& input, const Tensor& target);

// ---- layers ----
Tensor embedding(const Tensor& indices, const Tensor& weight);  // indices i64, weight [V, D]
// Zeroes with probability p and scales the rest by 1/(1-p); identity when !training.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

// ---- shape ----
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, std::int64_t start_dim = 0, std::int64_t end_dim = -1);
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& perm);
Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1);
Tensor concat(const std::vector<Tensor>& xs, std::int64_t dim = 0);
Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end,
             std::int64_t step = 1);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);  // cond != 0
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);    // mask != 0
Tensor cast(const Tensor& x, DType dtype);

}  // namespace ampcheck
