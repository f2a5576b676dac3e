#include "engine/amp/policy.h"

#include <algorithm>
#include <map>
#include <utility>

#include "engine/hooks.h"
#include "engine/util/strings.h"

namespace ampcheck::amp {
namespace {

// Framework op names users paste into custom lists, mapped to ours. PaddlePaddle names
// its kernels (matmul_v2, elementwise_add, reduce_sum, lookup_table_v2, ...), PyTorch
// its ATen functions (mm, addmm, cat, ...). Our own names win: Paddle's legacy "mul"
// (a matmul) is our elementwise "mul".
const std::map<std::string_view, Op>& aliases() {
  static const std::map<std::string_view, Op> table = {
      {"matmul_v2", Op::matmul},       {"mm", Op::matmul},
      {"addmm", Op::linear},
      {"fc", Op::linear},              {"baddbmm", Op::bmm},
      {"depthwise_conv2d", Op::conv2d}, {"elementwise_add", Op::add},
      {"elementwise_sub", Op::sub},    {"elementwise_mul", Op::mul},
      {"elementwise_div", Op::div},    {"elementwise_pow", Op::pow},
      {"reduce_sum", Op::sum},         {"reduce_mean", Op::mean},
      {"reduce_max", Op::max},         {"softmax_with_cross_entropy", Op::cross_entropy},
      {"nll_loss", Op::cross_entropy}, {"lookup_table_v2", Op::embedding},
      {"lookup_table", Op::embedding}, {"cat", Op::concat},
      {"hard_swish", Op::hardswish},   {"hard_sigmoid", Op::hardsigmoid},
      {"swish", Op::silu},             {"masked_fill_", Op::masked_fill},
      {"transpose2", Op::permute},     {"reshape2", Op::reshape},
      {"square_error_cost", Op::mse_loss},
      {"flash_attn", Op::scaled_dot_product_attention},
      {"_scaled_dot_product_flash_attention", Op::scaled_dot_product_attention},
      {"_scaled_dot_product_efficient_attention", Op::scaled_dot_product_attention},
      {"_scaled_dot_product_cudnn_attention", Op::scaled_dot_product_attention},
  };
  return table;
}

Reason default_reason(AmpCategory c) {
  switch (c) {
    case AmpCategory::lower: return Reason::white;
    case AmpCategory::fp32: return Reason::black;
    case AmpCategory::promote: return Reason::promote;
    case AmpCategory::follow: return Reason::follow;
  }
  return Reason::follow;
}

bool is_norm(Op op) { return op == Op::batch_norm || op == Op::layer_norm; }

// The outermost autocast scope owns the cast cache.
struct ScopeState {
  const Policy* policy = nullptr;
  int depth = 0;
  std::map<std::pair<const void*, DType>, std::pair<Tensor, Tensor>> cache;  // id -> (source, cast)
};
thread_local ScopeState t_scope;

}  // namespace

std::string_view level_name(Level level) {
  switch (level) {
    case Level::O0: return "O0";
    case Level::O1: return "O1";
    case Level::O2: return "O2";
    case Level::O3: return "O3";
  }
  return "?";
}

std::optional<Level> parse_level(std::string_view text) {
  if (text.size() == 2 && (text[0] == 'O' || text[0] == 'o')) text.remove_prefix(1);
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '3') return static_cast<Level>(text[0] - '0');
  return std::nullopt;
}

std::string_view reason_name(Reason r) {
  switch (r) {
    case Reason::off: return "off";
    case Reason::white: return "white";
    case Reason::black: return "black";
    case Reason::promote: return "promote";
    case Reason::follow: return "follow";
    case Reason::custom_white: return "custom white";
    case Reason::custom_black: return "custom black";
    case Reason::unsupported: return "unsupported";
  }
  return "?";
}

namespace {
// A name as a message quotes it: whole when short, its start and its length when long (a
// hostile list is not echoed back whole).
std::string quoted_name(std::string_view name) {
  if (name.size() <= 100) return "\"" + std::string(name) + "\"";
  return "\"" + std::string(name.substr(0, 60)) + "...\" (" + std::to_string(name.size()) + " characters)";
}
}  // namespace

Op resolve_op_name(std::string_view name, std::string_view list_name) {
  if (auto op = op_from_name(name)) return *op;
  if (auto it = aliases().find(name); it != aliases().end()) return it->second;
  std::string msg = std::string(list_name) + ": unknown op " + quoted_name(name);
  std::string_view best = closest_op_name(name);
  if (best.empty()) {
    std::vector<std::string_view> alias_names;
    for (const auto& [alias, op] : aliases()) alias_names.push_back(alias);
    best = closest(name, alias_names, 3);
  }
  if (!best.empty()) msg += " (did you mean \"" + std::string(best) + "\"?)";
  throw PolicyError(msg + "; ops are named as in engine/ops/op_list.h");
}

std::vector<std::string_view> op_aliases(Op op) {
  std::vector<std::string_view> names;
  for (const auto& [alias, target] : aliases())  // a std::map: already sorted
    if (target == op) names.push_back(alias);
  return names;
}

std::string_view paddle_op_name(Op op) {
  switch (op) {
    case Op::matmul: return "matmul_v2";
    case Op::linear: return "matmul_v2";  // paddle.nn.Linear runs matmul_v2 + elementwise_add
    case Op::fp8_linear: return "fp8_fp8_half_gemm_fused";  // paddle.linalg's fp8 GEMM
    case Op::bmm: return "bmm";
    case Op::scaled_dot_product_attention: return "flash_attn";  // paddle.nn.functional.scaled_dot_product_attention
    case Op::lstm:
    case Op::gru:
    case Op::rnn_tanh:
    case Op::rnn_relu: return "rnn";  // paddle.nn.LSTM / GRU / SimpleRNN run the rnn op (cuDNN)
    case Op::conv2d: return "conv2d";
    case Op::batch_norm: return "batch_norm";
    case Op::layer_norm: return "layer_norm";
    case Op::relu: return "relu";
    case Op::gelu: return "gelu";
    case Op::silu: return "silu";
    case Op::sigmoid: return "sigmoid";
    case Op::tanh: return "tanh";
    case Op::hardswish: return "hard_swish";
    case Op::hardsigmoid: return "hard_sigmoid";
    case Op::add: return "elementwise_add";
    case Op::sub: return "elementwise_sub";
    case Op::mul: return "elementwise_mul";
    case Op::div: return "elementwise_div";
    case Op::add_scalar:
    case Op::sub_scalar:
    case Op::mul_scalar:
    case Op::div_scalar:
    case Op::neg: return "scale";  // x * 0.5, x + 1, -x
    case Op::abs: return "abs";
    case Op::square: return "square";
    case Op::exp: return "exp";
    case Op::log: return "log";
    case Op::sqrt: return "sqrt";
    case Op::rsqrt: return "rsqrt";
    case Op::pow: return "pow";
    case Op::reciprocal: return "reciprocal";
    case Op::clamp: return "clip";
    case Op::erf: return "erf";
    case Op::sum: return "reduce_sum";
    case Op::mean: return "reduce_mean";
    case Op::max: return "reduce_max";
    case Op::softmax: return "softmax";
    case Op::log_softmax: return "log_softmax";
    case Op::cross_entropy: return "softmax_with_cross_entropy";
    case Op::mse_loss: return "square_error_cost";
    case Op::embedding: return "lookup_table_v2";
    case Op::dropout: return "dropout";
    case Op::max_pool2d:
    case Op::avg_pool2d:
    case Op::adaptive_avg_pool2d: return "pool2d";
    case Op::reshape: return "reshape2";
    case Op::permute: return "transpose2";
    case Op::concat: return "concat";
    case Op::slice: return "slice";
    case Op::where: return "where";
    case Op::masked_fill: return "where";
    case Op::cast: return "cast";
  }
  return op_name(op);
}

std::string_view torch_op_name(Op op) {
  switch (op) {
    case Op::add_scalar: return "add";
    case Op::sub_scalar: return "sub";
    case Op::mul_scalar: return "mul";
    case Op::div_scalar: return "div";
    case Op::max: return "amax";
    case Op::cross_entropy: return "cross_entropy_loss";
    case Op::concat: return "cat";
    case Op::cast: return "_to_copy";
    case Op::fp8_linear: return "_scaled_mm";  // the fp8 GEMM TransformerEngine and torchao reach
    case Op::matmul:
    case Op::linear:
    case Op::bmm:
    case Op::scaled_dot_product_attention:
    case Op::lstm:
    case Op::gru:
    case Op::rnn_tanh:
    case Op::rnn_relu:
    case Op::conv2d:
    case Op::batch_norm:
    case Op::layer_norm:
    case Op::relu:
    case Op::gelu:
    case Op::silu:
    case Op::sigmoid:
    case Op::tanh:
    case Op::hardswish:
    case Op::hardsigmoid:
    case Op::add:
    case Op::sub:
    case Op::mul:
    case Op::div:
    case Op::neg:
    case Op::abs:
    case Op::square:
    case Op::exp:
    case Op::log:
    case Op::sqrt:
    case Op::rsqrt:
    case Op::pow:
    case Op::reciprocal:
    case Op::clamp:
    case Op::erf:
    case Op::sum:
    case Op::mean:
    case Op::softmax:
    case Op::log_softmax:
    case Op::mse_loss:
    case Op::embedding:
    case Op::dropout:
    case Op::max_pool2d:
    case Op::avg_pool2d:
    case Op::adaptive_avg_pool2d:
    case Op::reshape:
    case Op::permute:
    case Op::slice:
    case Op::where:
    case Op::masked_fill: return op_name(op);
  }
  return op_name(op);
}

Policy::Policy(AmpOptions options) : options_(std::move(options)), reasons_(kOpCount, Reason::off) {
  if (!is_low_precision(options_.dtype))
    throw PolicyError("amp dtype must be float16 or bfloat16, got " + std::string(name(options_.dtype)));
  std::vector<Op> white, black;
  for (const std::string& n : options_.custom_white_list) white.push_back(resolve_op_name(n, "custom_white_list"));
  for (const std::string& n : options_.custom_black_list) black.push_back(resolve_op_name(n, "custom_black_list"));
  for (Op w : white)
    if (std::find(black.begin(), black.end(), w) != black.end())
      throw PolicyError("op \"" + std::string(op_name(w)) +
                        "\" is in both custom_white_list and custom_black_list; keep it in one");
  if (options_.level == Level::O0) return;
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    Reason r = default_reason(op_info(op).amp);
    if (options_.level == Level::O2 && r != Reason::black) r = Reason::white;
    if (options_.level == Level::O3) r = Reason::white;
    if (op == Op::cast) r = Reason::follow;  // the policy's own tool: never re-cast a cast
    reasons_[static_cast<std::size_t>(i)] = r;
  }
  for (Op w : white) reasons_[static_cast<std::size_t>(w)] = Reason::custom_white;
  for (Op b : black) reasons_[static_cast<std::size_t>(b)] = Reason::custom_black;
  if (!options_.fp32_modules.empty()) fp32_ = std::shared_ptr<const Policy>(new Policy(options_, Fp32Tag{}));
}

Policy::Policy(const AmpOptions& options, Fp32Tag) : options_(options), reasons_(kOpCount, Reason::custom_black) {
  options_.fp32_modules.clear();
  reasons_[static_cast<std::size_t>(Op::cast)] = Reason::follow;
}

bool Policy::fp32_module(const std::string& path) const {
  if (!fp32_) return false;  // none listed (the fp32 policy itself lists none)
  for (const std::string& m : options_.fp32_modules)
    if (path == m || (path.size() > m.size() && path.compare(0, m.size(), m) == 0 && path[m.size()] == '.'))
      return true;
  return false;
}

Reason Policy::reason(Op op) const { return reasons_[static_cast<std::size_t>(op)]; }

std::optional<DType> Policy::cast_target(Op op) const {
  switch (reason(op)) {
    case Reason::white:
    case Reason::custom_white: return options_.dtype;
    case Reason::black:
    case Reason::custom_black:
    case Reason::unsupported: return DType::f32;
    default: return std::nullopt;
  }
}

bool Policy::casts_input(Op op, std::size_t index) const {
  const auto target = cast_target(op);
  if (!target) return false;
  // Normalisation runs its low-precision data with fp32 weights (kept so by decorate).
  if (is_norm(op) && is_low_precision(*target)) return index == 0;
  return true;
}

DType Policy::compute_dtype(Op op, const std::vector<DType>& in) const {
  std::vector<DType> d = in;
  const auto target = cast_target(op);
  for (std::size_t i = 0; i < d.size(); ++i) {
    if (!is_floating(d[i]) || !target || !casts_input(op, i)) continue;
    if (is_low_precision(*target) ? d[i] == DType::f32 : is_low_precision(d[i])) d[i] = *target;
  }
  // The op's own result dtype from its (cast) inputs.
  switch (op) {
    case Op::batch_norm:
    case Op::layer_norm:
    case Op::masked_fill:
    case Op::cross_entropy: return d.at(0);
    case Op::embedding: return d.at(1);
    default: break;
  }
  DType out = d.at(0);
  bool first = true;
  for (DType x : d) {
    if (!is_floating(x)) continue;
    out = first ? x : promote(out, x);
    first = false;
  }
  return out;
}

std::vector<Tensor> Policy::apply(Op op, std::vector<Tensor> inputs) const {
  const auto target = cast_target(op);
  if (!target) return inputs;
  const bool down = is_low_precision(*target);
  const InsertedCastScope inserting;  // the casts below are the policy's, not the user's
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor& t = inputs[i];
    if (!t.defined() || !is_floating(t.dtype()) || !casts_input(op, i)) continue;
    if (down ? t.dtype() != DType::f32 : !is_low_precision(t.dtype())) continue;
    // Parameters are cast once per autocast scope (PyTorch's cast cache).
    const bool cacheable = down && t.is_leaf() && t.requires_grad() && grad_enabled();
    if (cacheable) {
      const auto key = std::make_pair(t.id(), *target);
      if (auto it = t_scope.cache.find(key); it != t_scope.cache.end()) {
        t = it->second.second;
        continue;
      }
      Tensor cast_t = call(Op::cast, {t}, CastParams{*target});
      t_scope.cache.emplace(key, std::make_pair(t, cast_t));
      t = cast_t;
      continue;
    }
    t = call(Op::cast, {t}, CastParams{*target});
  }
  return inputs;
}

Autocast::Autocast(const Policy* policy) : previous_(t_scope.policy) {
  t_scope.policy = policy;
  ++t_scope.depth;
}

Autocast::~Autocast() {
  t_scope.policy = previous_;
  if (--t_scope.depth == 0) t_scope.cache.clear();
}

const Policy* active_policy() { return t_scope.policy; }

}  // namespace ampcheck::amp
