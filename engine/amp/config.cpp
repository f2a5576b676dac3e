// AMP config import. Each framework's keys, defaults and checks are taken from its own
// source (cited where they are read); docs/amp.md has the tables side by side.
#include "engine/amp/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

#include "common/json_text.h"
#include "engine/amp/fp8_recipe.h"
#include "engine/dtype/dtype.h"
#include "engine/ops/registry.h"
#include "engine/util/strings.h"

namespace ampcheck::amp {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using Keys = std::vector<std::string_view>;

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;  // clang 14 deduces no aggregate's arguments by itself

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kInt32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// The shortest decimal that reads back as the same double.
std::string num(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string show(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string join(const Keys& items, std::string_view sep = ", ") {
  std::string out;
  for (std::string_view s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

std::string quoted_list(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "\"" : ", \"") + s + "\"";
  return out;
}

std::string_view dtype_long_name(DType d) { return info(d).long_name; }

// A bound of a numeric range: its value and whether the value itself is allowed.
struct Bound {
  double v;
  bool inclusive;
};

std::string range_text(Bound lo, Bound hi) {
  if (hi.v == kInf) return std::string("a number ") + (lo.inclusive ? ">= " : "> ") + num(lo.v);
  return std::string("a number in ") + (lo.inclusive ? "[" : "(") + num(lo.v) + ", " + num(hi.v) +
         (hi.inclusive ? "]" : ")");
}

// One JSON object of the config: its dotted path for messages, the keys it accepts
// (anything else is an error with a did-you-mean), and typed reads that name the key,
// the value given and what is accepted. A JSON null reads as "not given", as Python's
// None does for every framework's keyword arguments.
class Obj {
 public:
  Obj(const json& j, std::string path, Keys known, std::string accepted_text = {})
      : j_(j), path_(std::move(path)), known_(std::move(known)) {
    if (!j_.is_object()) fail_path(path_, j_, "a JSON object { ... }");
    for (const auto& [key, value] : j_.items()) {
      if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
      std::string msg = "unknown key \"" + at(key) + "\"";
      const std::string_view best = closest(key, known_, key.size() > 10 ? 3 : 2);
      if (!best.empty()) msg += " (did you mean \"" + std::string(best) + "\"?)";
      msg += "; " + (accepted_text.empty() ? "accepted" + where() + ": " + join(known_) : accepted_text);
      throw ConfigError(msg);
    }
  }

  const std::string& path() const { return path_; }
  std::string at(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  std::string where() const { return path_.empty() ? "" : " in " + path_; }

  bool has(std::string_view key) const {
    const auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }
  // The value of a key that is given, or null.
  const json* raw(std::string_view key) const {
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  std::vector<std::string> given() const {
    std::vector<std::string> out;
    for (const auto& [key, value] : j_.items())
      if (!value.is_null()) out.push_back(key);
    return out;
  }

  [[noreturn]] static void fail_path(const std::string& path, const json& v, std::string_view accepted,
                                     std::string_view why = {}) {
    std::string msg = path + ": " + show(v) + " is not " + std::string(accepted);
    if (!why.empty()) msg += " (" + std::string(why) + ")";
    throw ConfigError(msg);
  }
  [[noreturn]] void fail(std::string_view key, const json& v, std::string_view accepted,
                         std::string_view why = {}) const {
    fail_path(at(key), v, accepted, why);
  }

  std::optional<bool> boolean(std::string_view key) const {
    const json* v = raw(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) {
      if (v->is_string() && v->get<std::string>() == "auto") reject_auto(key);
      fail(key, *v, "true or false");
    }
    return v->get<bool>();
  }
  bool boolean(std::string_view key, bool fallback) const { return boolean(key).value_or(fallback); }

  std::optional<double> number(std::string_view key, Bound lo, Bound hi, std::string_view why = {}) const {
    const json* v = raw(key);
    if (!v) return std::nullopt;
    return check_number(key, *v, lo, hi, why);
  }
  double check_number(std::string_view key, const json& v, Bound lo, Bound hi,
                      std::string_view why = {}) const {
    if (!v.is_number()) {
      if (v.is_string() && v.get<std::string>() == "auto") reject_auto(key);
      fail(key, v, range_text(lo, hi), why);
    }
    const double d = v.get<double>();
    const bool above = lo.inclusive ? d >= lo.v : d > lo.v;
    const bool below = hi.inclusive ? d <= hi.v : d < hi.v;
    if (!std::isfinite(d) || !above || !below) fail(key, v, range_text(lo, hi), why);
    return d;
  }

  std::optional<std::int64_t> integer(std::string_view key, std::int64_t lo, std::int64_t hi,
                                      std::string_view why = {}) const {
    const json* v = raw(key);
    if (!v) return std::nullopt;
    const std::string accepted =
        hi == kInt64Max ? "an integer >= " + std::to_string(lo)
                        : "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    if (v->is_string() && v->get<std::string>() == "auto") reject_auto(key);
    if (v->is_number_unsigned()) {
      const auto u = v->get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(hi) || static_cast<std::int64_t>(u) < lo)
        fail(key, *v, accepted, why);
      return static_cast<std::int64_t>(u);
    }
    if (!v->is_number_integer()) fail(key, *v, accepted, why);
    const auto i = v->get<std::int64_t>();
    if (i < lo || i > hi) fail(key, *v, accepted, why);
    return i;
  }

  std::optional<std::string> string(std::string_view key, std::string_view accepted) const {
    const json* v = raw(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail(key, *v, accepted);
    return v->get<std::string>();
  }

  std::optional<Obj> object(std::string_view key, Keys known, std::string accepted_text = {}) const {
    const json* v = raw(key);
    if (!v) return std::nullopt;
    return Obj(*v, at(key), std::move(known), std::move(accepted_text));
  }

 private:
  // Hugging Face's Trainer fills "auto" in before DeepSpeed reads the config.
  [[noreturn]] void reject_auto(std::string_view key) const {
    throw ConfigError(at(key) +
                      ": \"auto\" is a placeholder that the Hugging Face Trainer replaces before DeepSpeed "
                      "reads the config; write the value it stands for");
  }

  const json& j_;
  std::string path_;
  Keys known_;
};

// ---- shared pieces ---------------------------------------------------------------------

DType read_amp_dtype(const Obj& o, std::string_view key, DType fallback) {
  const json* v = o.raw(key);
  if (!v) return fallback;
  constexpr std::string_view accepted = "\"float16\" (also f16, fp16, half) or \"bfloat16\" (also bf16)";
  if (!v->is_string()) o.fail(key, *v, accepted);
  const auto d = try_parse_dtype(v->get<std::string>());
  if (!d || !is_low_precision(*d)) o.fail(key, *v, accepted, "the low-precision dtype AMP casts to");
  return *d;
}

Level read_level(const Obj& o, std::string_view key, Level fallback, bool od_known = false) {
  const auto text = o.string(key, "\"O0\", \"O1\", \"O2\" or \"O3\"");
  if (!text) return fallback;
  if (od_known && (*text == "OD" || *text == "od"))
    o.fail(
        key, *o.raw(key), "\"O0\", \"O1\" or \"O2\"",
        "Paddle's OD runs only the white list low and everything else in fp32; ampcheck has no such level");
  const auto level = parse_level(*text);
  if (!level) o.fail(key, *o.raw(key), "\"O0\", \"O1\", \"O2\" or \"O3\"");
  return *level;
}

struct ListedOp {
  Op op;
  std::string given;
};

// A custom op list: names resolved (ours or a framework's), kept in our spelling.
std::vector<ListedOp> read_op_list(const Obj& o, std::string_view key, ConfigStyle style,
                                   std::vector<std::string>& notes) {
  std::vector<ListedOp> out;
  const json* v = o.raw(key);
  if (!v) return out;
  if (!v->is_array()) o.fail(key, *v, "a list of op names, e.g. [\"softmax\", \"layer_norm\"]");
  const std::string path = o.at(key);
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& item = (*v)[i];
    if (!item.is_string())
      Obj::fail_path(path + "[" + std::to_string(i) + "]", item, "an op name (a string)");
    const std::string given = item.get<std::string>();
    Op op;
    try {
      op = resolve_op_name(given, path);
    } catch (const PolicyError& e) {
      throw ConfigError(e.what());
    }
    const std::string_view ours = op_name(op);
    if (std::any_of(out.begin(), out.end(), [op](const ListedOp& l) { return l.op == op; })) {
      notes.push_back(path + ": \"" + given + "\" listed twice (as ampcheck's \"" + std::string(ours) +
                      "\"); kept once");
      continue;
    }
    if (style == ConfigStyle::paddle && given == "mul")
      notes.push_back(path +
                      ": \"mul\" is read as the elementwise mul; Paddle's legacy \"mul\" op is a matrix "
                      "multiply, which ampcheck calls \"matmul\"");
    else if (ours != given)
      notes.push_back(path + ": \"" + given + "\" is ampcheck's \"" + std::string(ours) + "\"");
    out.push_back({op, given});
  }
  return out;
}

void set_lists(AmpOptions& amp, const std::vector<ListedOp>& white, const std::vector<ListedOp>& black,
               const std::string& white_path, const std::string& black_path) {
  for (const ListedOp& w : white)
    for (const ListedOp& b : black)
      if (w.op == b.op) {
        const std::string what =
            w.given == b.given
                ? "op \"" + w.given + "\" is in both " + white_path + " and " + black_path
                : "\"" + w.given + "\" in " + white_path + " and \"" + b.given + "\" in " + black_path +
                      " are the same op (ampcheck's \"" + std::string(op_name(w.op)) + "\")";
        throw ConfigError(what + "; an op runs either low (white) or in fp32 (black): keep it in one list");
      }
  amp.custom_white_list.clear();
  amp.custom_black_list.clear();
  for (const ListedOp& w : white) amp.custom_white_list.emplace_back(op_name(w.op));
  for (const ListedOp& b : black) amp.custom_black_list.emplace_back(op_name(b.op));
}

// Scale values PyTorch and Paddle hold in a float32 tensor.
double read_f32_scale(const Obj& o, std::string_view key, double fallback) {
  const auto v = o.number(key, {0, false}, {kInf, false}, "the scale is kept as a float32");
  if (!v) return fallback;
  const float f = static_cast<float>(*v);
  if (!(f > 0) || !std::isfinite(f))
    o.fail(key, *o.raw(key), "a number that stays positive and finite as a float32 (about 1.4e-45 to 3.4e38)",
           "the scale is kept as a float32");
  return *v;
}

TorchScaling read_torch_scaling(const Obj& o, TorchScaling s) {
  // torch/amp/grad_scaler.py: assert growth_factor > 1.0, backoff_factor < 1.0.
  s.init_scale = read_f32_scale(o, "init_scale", s.init_scale);
  s.growth_factor = o.number("growth_factor", {1, false}, {kInf, false}).value_or(s.growth_factor);
  s.backoff_factor = o.number("backoff_factor", {0, false}, {1, false}).value_or(s.backoff_factor);
  s.growth_interval = o.integer("growth_interval", 1, kInt32Max, "the growth tracker is an int32")
                          .value_or(s.growth_interval);
  return s;
}

PaddleScaling read_paddle_scaling(const Obj& o, PaddleScaling s) {
  // python/paddle/amp/grad_scaler.py: assert incr_ratio > 1.0, decr_ratio < 1.0; the
  // ratios multiply a float32 scale, so they must hold as float32 values too.
  s.init_loss_scaling = read_f32_scale(o, "init_loss_scaling", s.init_loss_scaling);
  if (auto v = o.number("incr_ratio", {1, false}, {kInf, false})) {
    if (!(static_cast<float>(*v) > 1.0f) || !std::isfinite(static_cast<float>(*v)))
      o.fail("incr_ratio", *o.raw("incr_ratio"), "a number > 1 as a float32");
    s.incr_ratio = *v;
  }
  if (auto v = o.number("decr_ratio", {0, false}, {1, false},
                        "the scale is multiplied by it after Inf/NaN, so it must shrink it")) {
    const float f = static_cast<float>(*v);
    if (!(f > 0.0f && f < 1.0f))
      o.fail("decr_ratio", *o.raw("decr_ratio"), "a number in (0, 1) as a float32");
    s.decr_ratio = *v;
  }
  s.incr_every_n_steps = o.integer("incr_every_n_steps", 1, kInt32Max).value_or(s.incr_every_n_steps);
  s.decr_every_n_nan_or_inf =
      o.integer("decr_every_n_nan_or_inf", 1, kInt32Max).value_or(s.decr_every_n_nan_or_inf);
  s.use_dynamic_loss_scaling = o.boolean("use_dynamic_loss_scaling", s.use_dynamic_loss_scaling);
  return s;
}

// deepspeed/runtime/precision_config.py (DeepSpeedFP16Config) and
// deepspeed/runtime/fp16/loss_scaler.py (positive window, hysteresis and min_scale).
DeepSpeedScaling read_deepspeed_scaling(const Obj& o, DeepSpeedScaling s) {
  // DeepSpeedFP16Config declares `initial_scale_power: int = 16` with no bound (older
  // releases had Field(32, ge=0)) and starts at 2**power, a Python float; but the scaled
  // loss is a float32 tensor times that scale, which PyTorch computes in float32, so a
  // scale beyond float32 (2^128 and up) makes every step Inf, and one below its smallest
  // subnormal (2^-149) makes it 0.
  s.initial_scale_power = static_cast<int>(
      o.integer("initial_scale_power", -149, 127,
                "the initial scale 2^power must be a positive finite float32: 2^-149 to 2^127")
          .value_or(s.initial_scale_power));
  s.loss_scale_window = o.integer("loss_scale_window", 1, kInt64Max).value_or(s.loss_scale_window);
  s.hysteresis = o.integer("hysteresis", 1, kInt64Max).value_or(s.hysteresis);
  s.min_loss_scale = o.number("min_loss_scale", {0, false}, {kInf, false}).value_or(s.min_loss_scale);
  s.consecutive_hysteresis = o.boolean("consecutive_hysteresis", s.consecutive_hysteresis);
  return s;
}

ScalingOptions no_scaling() { return StaticScaling{1.0}; }
// A scaler switched off: scaler.step(opt) is opt.step(), Inf/NaN or not.
ScalingOptions disabled_scaler() { return StaticScaling{1.0, false}; }

// ---- PaddlePaddle ----------------------------------------------------------------------

// paddle/fluid/framework/distributed_strategy.proto, message AMPConfig.
const Keys kPaddleAmpConfigKeys = {
    "init_loss_scaling", "incr_every_n_steps", "decr_every_n_nan_or_inf", "incr_ratio", "decr_ratio",
    "use_dynamic_loss_scaling", "custom_white_list", "custom_black_list", "custom_black_varnames",
    "use_pure_fp16", "use_fp16_guard", "use_optimizer_fp16", "use_pure_bf16"};
// The same message's defaults (decr_ratio is 0.8 there, unlike GradScaler's 0.5).
constexpr PaddleScaling kFleetDefaults{32768.0, 2.0, 0.8, 1000, 2, true};
// paddle.amp.GradScaler's defaults (python/paddle/amp/grad_scaler.py, Paddle >= 2.5).
constexpr PaddleScaling kPaddleGradScalerDefaults{65536.0, 2.0, 0.5, 2000, 1, true};

// DistributedStrategy's other fields (same proto): accepted and ignored.
const Keys kPaddleStrategyOtherKeys = {
    "mode", "recompute", "localsgd", "dgc", "gradient_merge", "lars", "lamb", "pipeline", "elastic", "auto",
    "a_sync", "sync_nccl_allreduce", "nccl_comm_num", "use_hierarchical_allreduce",
    "hierarchical_allreduce_inter_nranks", "sync_batch_norm", "fuse_all_reduce_ops", "fuse_grad_size_in_MB",
    "fuse_grad_size_in_TFLOPS", "cudnn_exhaustive_search", "conv_workspace_size_limit",
    "cudnn_batchnorm_spatial_persistent", "adaptive_localsgd", "fp16_allreduce", "sharding",
    "last_comm_group_size_MB", "find_unused_parameters", "tensor_parallel", "without_graph_optimization",
    "fuse_grad_size_in_num", "calc_comm_same_stream", "asp", "fuse_grad_merge", "semi_auto", "adam_d2sum",
    "auto_search", "heter_ccl_mode", "is_fl_ps_mode", "with_coordinator", "qat", "split_data",
    "recompute_configs", "localsgd_configs", "gradient_merge_configs", "dgc_configs", "pipeline_configs",
    "a_sync_configs", "lars_configs", "lamb_configs", "adaptive_localsgd_configs", "sharding_configs",
    "hybrid_configs", "tensor_parallel_configs", "trainer_desc_configs", "downpour_table_param",
    "fs_client_param", "qat_configs", "build_strategy", "execution_strategy", "gradient_scale_configs"};

// The fleet amp_configs dict (inside a strategy or bare).
void read_paddle_amp_configs(const Obj& o, Config& c) {
  const bool pure_fp16 = o.boolean("use_pure_fp16", false);
  const bool pure_bf16 = o.boolean("use_pure_bf16", false);
  if (pure_fp16 && pure_bf16)
    throw ConfigError(o.at("use_pure_fp16") + " and " + o.at("use_pure_bf16") +
                      " are both true; pure training runs in one dtype: set one of them");
  c.amp.level = pure_fp16 || pure_bf16 ? Level::O2 : Level::O1;
  c.amp.dtype = pure_bf16 ? DType::bf16 : DType::f16;
  if (pure_fp16 || pure_bf16) {
    c.notes.push_back(
        o.at(pure_fp16 ? "use_pure_fp16" : "use_pure_bf16") +
        ": pure training is ampcheck's O2: parameters low except BatchNorm/LayerNorm (Paddle keeps "
        "their parameters fp32), fp32 master weights (Paddle keeps them when the optimizer has "
        "multi_precision=True, as fleet's pure-fp16 examples set)");
    if (o.boolean("use_fp16_guard", true))
      c.notes.push_back(o.at("use_fp16_guard") + (o.has("use_fp16_guard") ? "" : " (default true)") +
                        ": ampcheck has no fp16_guard regions; O2 applies to the whole model");
  } else {
    c.notes.push_back(
        "amp_configs without use_pure_fp16/use_pure_bf16: Paddle's O1 (per-op casts from the "
        "white/black lists, parameters fp32)");
    o.boolean("use_fp16_guard");
  }
  if (o.boolean("use_optimizer_fp16", false))
    c.notes.push_back(o.at("use_optimizer_fp16") + ": only auto parallel reads it; ignored");

  const auto white = read_op_list(o, "custom_white_list", ConfigStyle::paddle, c.notes);
  const auto black = read_op_list(o, "custom_black_list", ConfigStyle::paddle, c.notes);
  set_lists(c.amp, white, black, o.at("custom_white_list"), o.at("custom_black_list"));
  if (const json* v = o.raw("custom_black_varnames")) {
    if (!v->is_array() || std::any_of(v->begin(), v->end(), [](const json& x) { return !x.is_string(); }))
      o.fail("custom_black_varnames", *v, "a list of variable names");
    if (!v->empty())
      c.notes.push_back(o.at("custom_black_varnames") +
                        ": ignored: ampcheck's lists name ops, not variables (put the op that makes them "
                        "in custom_black_list)");
  }

  const PaddleScaling s = read_paddle_scaling(o, kFleetDefaults);
  if (pure_bf16) {
    c.scaling = no_scaling();
    c.notes.push_back(
        "bf16: no loss scaling (Paddle turns dynamic loss scaling off for bfloat16); the "
        "scaling keys are not used");
  } else {
    c.scaling = s;
    c.notes.push_back(
        "loss scaling: Paddle's rules; keys not given take fleet's AMPConfig defaults "
        "(init_loss_scaling 32768, incr_every_n_steps 1000, decr_every_n_nan_or_inf 2, "
        "incr_ratio 2, decr_ratio 0.8)");
  }
}

// python/paddle/amp/auto_cast.py: auto_cast(enable=True, custom_white_list=None,
// custom_black_list=None, level='O1', dtype='float16', use_promote=True), and
// decorate(models, optimizers, level, dtype, master_weight, save_dtype, master_grad,
// excluded_layers); python/paddle/amp/grad_scaler.py: GradScaler(enable, ...).
const Keys kPaddleAutoCastArgs = {"enable", "custom_white_list", "custom_black_list", "level", "dtype", "use_promote"};
const Keys kPaddleDecorateArgs = {"level", "dtype", "master_weight", "save_dtype", "master_grad", "excluded_layers"};
const Keys kPaddleGradScalerArgs = {"enable",           "init_loss_scaling",       "incr_ratio",
                                    "decr_ratio",       "incr_every_n_steps",      "decr_every_n_nan_or_inf",
                                    "use_dynamic_loss_scaling"};
const Keys kPaddleDygraphBlocks = {"auto_cast", "decorate", "grad_scaler"};

// paddle.amp.auto_cast / decorate / GradScaler keyword arguments (dynamic graph).
void read_paddle_dygraph(const Obj& top, Config& c) {
  const auto ac = top.object("auto_cast", kPaddleAutoCastArgs);
  const auto dec = top.object("decorate", kPaddleDecorateArgs);
  const auto gs = top.object("grad_scaler", kPaddleGradScalerArgs);
  bool enabled = true;
  Level level = Level::O1;
  DType dtype = DType::f16;
  if (ac) {
    enabled = ac->boolean("enable", true);
    level = read_level(*ac, "level", Level::O1, true);
    if (level == Level::O3)
      ac->fail("level", *ac->raw("level"), "\"O0\", \"O1\" or \"O2\"", "Paddle has no O3");
    dtype = read_amp_dtype(*ac, "dtype", DType::f16);
    const auto white = read_op_list(*ac, "custom_white_list", ConfigStyle::paddle, c.notes);
    const auto black = read_op_list(*ac, "custom_black_list", ConfigStyle::paddle, c.notes);
    set_lists(c.amp, white, black, ac->at("custom_white_list"), ac->at("custom_black_list"));
    if (!ac->boolean("use_promote", true))
      c.notes.push_back(
          ac->at("use_promote") +
          ": false: ampcheck always promotes mixed inputs to the widest dtype (use_promote=True)");
  } else {
    c.notes.push_back("no auto_cast block: paddle.amp.auto_cast defaults (enable=True, level O1, float16)");
  }
  if (dec) {
    const Level dl = read_level(*dec, "level", Level::O1, true);
    const DType dd = read_amp_dtype(*dec, "dtype", DType::f16);
    if (dl == Level::O3) dec->fail("level", *dec->raw("level"), "\"O1\" or \"O2\"", "Paddle has no O3");
    if (ac && dl != level)
      throw ConfigError(dec->at("level") + " \"" + std::string(level_name(dl)) + "\" differs from " +
                        ac->at("level") + " \"" + std::string(level_name(level)) +
                        "\"; decorate and auto_cast must agree (O2 decorates the model and casts per op)");
    if (ac && dd != dtype)
      throw ConfigError(dec->at("dtype") + " \"" + std::string(dtype_long_name(dd)) + "\" differs from " +
                        ac->at("dtype") + " \"" + std::string(dtype_long_name(dtype)) +
                        "\"; they must agree");
    if (!ac) level = dl, dtype = dd;
    // decorate(master_weight=None): at O2 the optimizer keeps fp32 masters (multi_precision).
    if (auto mw = dec->boolean("master_weight")) c.amp.master_weight = *mw;
    if (dec->has("save_dtype")) {
      read_amp_dtype(*dec, "save_dtype", DType::f16);
      c.notes.push_back(dec->at("save_dtype") + ": only affects how Paddle saves the model; ignored");
    }
    if (dec->boolean("master_grad", false))
      c.notes.push_back(dec->at("master_grad") + ": ampcheck's masters receive fp32 gradients already");
    if (dec->has("excluded_layers"))
      c.notes.push_back(dec->at("excluded_layers") +
                        ": ignored; ampcheck's O2 keeps only normalisation layers fp32 (keep_norm_fp32)");
  } else if (level == Level::O2) {
    c.notes.push_back(
        "auto_cast level O2 without a decorate block: ampcheck's O2 decorates the model "
        "(Paddle would cast the fp32 parameters at every op instead)");
  }
  c.amp.level = enabled ? level : Level::O0;
  c.amp.dtype = dtype;
  if (!enabled) c.notes.push_back(ac->at("enable") + " is false: O0, everything in fp32");
  if (c.amp.level == Level::O2)
    c.notes.push_back("O2: BatchNorm/LayerNorm parameters stay fp32 (Paddle's decorate skips norm layers)" +
                      std::string(c.amp.master_weight ? ", fp32 master weights" : ", no master weights"));

  bool scaler_enabled = true;
  PaddleScaling s = kPaddleGradScalerDefaults;
  if (gs) {
    scaler_enabled = gs->boolean("enable", true);
    s = read_paddle_scaling(*gs, kPaddleGradScalerDefaults);
  }
  if (!scaler_enabled) {
    c.scaling = disabled_scaler();
    c.notes.push_back(gs->at("enable") + " is false: no loss scaling, and no step is skipped (minimize is a plain "
                      "optimizer step)");
  } else if (dtype == DType::bf16) {
    c.scaling = no_scaling();
    c.notes.push_back(
        "bf16: no loss scaling (paddle.amp.GradScaler turns dynamic loss scaling off for bfloat16)");
  } else {
    c.scaling = s;
    c.notes.push_back(std::string(gs ? "loss scaling: paddle.amp.GradScaler; keys not given take its defaults"
                                     : "no grad_scaler block: paddle.amp.GradScaler defaults") +
                      " (init_loss_scaling 65536, incr_every_n_steps 2000, decr_every_n_nan_or_inf 1, "
                      "incr_ratio 2, decr_ratio 0.5)");
  }
}

void read_paddle(const json& j, Config& c) {
  const auto is_one_of = [&j](const Keys& keys) {
    return std::any_of(keys.begin(), keys.end(), [&j](std::string_view k) { return j.contains(k); });
  };
  // A DistributedStrategy: its AMP keys, or only its other fields (detection reads those too).
  if (is_one_of({"amp", "amp_configs"}) || is_one_of(kPaddleStrategyOtherKeys)) {
    Keys known = kPaddleStrategyOtherKeys;
    known.insert(known.end(), {"framework", "amp", "amp_configs"});
    const Obj top(
        j, "", known,
        "accepted in a fleet DistributedStrategy: amp, amp_configs (and its other fields, ignored)");
    std::optional<bool> amp = top.boolean("amp");
    const auto cfg = top.object("amp_configs", kPaddleAmpConfigKeys);
    if (cfg) {
      read_paddle_amp_configs(*cfg, c);
    } else {
      c.notes.push_back("no amp_configs: fleet's AMPConfig defaults");
      read_paddle_amp_configs(Obj(json::object(), "amp_configs", kPaddleAmpConfigKeys), c);
    }
    if (!amp && !cfg) amp = false;  // fleet's default: a strategy that says nothing of AMP trains in fp32
    if (!amp) {
      c.notes.push_back(
          "no \"amp\" key: taken as amp=true (fleet's default is false, which would ignore amp_configs)");
    } else if (!*amp) {
      c.amp.level = Level::O0;
      c.scaling = no_scaling();
      c.notes.push_back(top.has("amp") ? "amp is false: fleet ignores amp_configs: O0, everything in fp32, no loss scaling"
                                       : "neither amp nor amp_configs: fleet's default amp=false: O0, everything in "
                                         "fp32, no loss scaling");
    }
    std::vector<std::string> ignored;
    for (const std::string& k : top.given())
      if (k != "amp" && k != "amp_configs" && k != "framework") ignored.push_back(k);
    if (!ignored.empty())
      c.notes.push_back("ignored DistributedStrategy fields that are not about AMP: " + quoted_list(ignored));
    return;
  }
  if (is_one_of(kPaddleDygraphBlocks)) {
    const Obj top(j, "", {"framework", "auto_cast", "decorate", "grad_scaler"},
                  "accepted in Paddle's dynamic-graph form: auto_cast, decorate, grad_scaler");
    read_paddle_dygraph(top, c);
    return;
  }
  Keys known = kPaddleAmpConfigKeys;
  known.push_back("framework");
  const Obj top(j, "", known);
  read_paddle_amp_configs(top, c);
}

// ---- PyTorch ---------------------------------------------------------------------------

// torch.autocast's default dtype per device (aten/src/ATen/autocast_mode.cpp, autocast_dtype).
std::optional<DType> torch_default_dtype(std::string_view device) {
  if (device == "cuda" || device == "xpu" || device == "mps") return DType::f16;
  if (device == "cpu" || device == "hpu") return DType::bf16;
  return std::nullopt;
}

// torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)
const Keys kTorchAutocastArgs = {"device_type", "dtype", "enabled", "cache_enabled"};
// torch.amp.GradScaler(device="cuda", init_scale=2.**16, growth_factor=2.0,
// backoff_factor=0.5, growth_interval=2000, enabled=True)
const Keys kTorchGradScalerArgs = {"device",         "init_scale",      "growth_factor",
                                   "backoff_factor", "growth_interval", "enabled"};
// A list of names at `key` of `o` (module paths, op names): each a non-empty string.
// `accepted` says what the list is, `item` what each entry is; `path` names the key in
// messages about an entry ("fp8.keep").
std::vector<std::string> read_names(const Obj& o, std::string_view key, const std::string& path,
                                    std::string_view accepted, std::string_view item) {
  std::vector<std::string> out;
  const json* list = o.raw(key);
  if (list == nullptr) return out;
  if (!list->is_array()) o.fail(key, *list, accepted);
  for (std::size_t i = 0; i < list->size(); ++i) {
    const json& e = (*list)[i];
    if (!e.is_string() || e.get<std::string>().empty()) Obj::fail_path(path + "[" + std::to_string(i) + "]", e, item);
    out.push_back(e.get<std::string>());
  }
  return out;
}

// "fp8": the recipe TransformerEngine's fp8_autocast gets, its constructor as the script
// writes it, or {"recipe": "...", "keep": [layers kept out of fp8]}; false or null: none.
void read_fp8(const Obj& top, Config& c) {
  const json* f = top.raw("fp8");
  if (f == nullptr || f->is_null() || (f->is_boolean() && !f->get<bool>())) return;
  constexpr std::string_view accepted =
      "a TransformerEngine recipe as your script constructs it, \"DelayedScaling(amax_history_len=16)\", or "
      "{\"recipe\": \"DelayedScaling(...)\", \"keep\": [\"head\"]}";
  const json* recipe = f;
  Fp8Settings s;
  if (f->is_object()) {
    const Obj o(*f, "fp8", {"recipe", "keep"});
    recipe = o.raw("recipe");
    if (recipe == nullptr) Obj::fail_path("fp8", *f, accepted, "\"recipe\" is missing");
    s.keep = read_names(o, "keep", "fp8.keep", "a list of linear layers (module paths) kept out of fp8, e.g. [\"head\"]",
                        "a module path (a non-empty string)");
  }
  if (!recipe->is_string()) Obj::fail_path(f->is_object() ? "fp8.recipe" : "fp8", *recipe, accepted);
  try {
    s.recipe = to_string(parse_fp8_recipe(recipe->get<std::string>()));
  } catch (const Fp8RecipeError& e) {
    throw ConfigError(std::string(f->is_object() ? "fp8.recipe: " : "fp8: ") + e.what());
  }
  c.fp8 = std::move(s);
}

const Keys kTorchBlocks = {"autocast", "grad_scaler"};

// {"autocast": {...}, "grad_scaler": {...}}, or GradScaler's keyword arguments written
// flat at the top level, as a user copies them from GradScaler(init_scale=..., ...).
void read_pytorch(const json& j, Config& c) {
  std::string flat_key;
  for (std::string_view k : kTorchGradScalerArgs)
    if (j.contains(k) && flat_key.empty()) flat_key = k;
  const bool flat = !flat_key.empty();
  for (std::string_view block : kTorchBlocks)
    if (flat && j.contains(block))
      throw ConfigError("\"" + flat_key + "\" (a GradScaler argument written flat) and the \"" + std::string(block) +
                        "\" block are both given; write GradScaler's arguments either all flat or all inside "
                        "\"grad_scaler\" (torch.autocast's go in \"autocast\")");
  Keys flat_keys = kTorchGradScalerArgs;
  flat_keys.push_back("framework");
  flat_keys.push_back("fp8");
  const Obj top = flat ? Obj(j, "", flat_keys,
                             "accepted flat: framework and torch.amp.GradScaler's arguments (" +
                                 join(kTorchGradScalerArgs) + "), or the blocks autocast and grad_scaler")
                       : Obj(j, "", {"framework", "autocast", "grad_scaler", "fp8"});
  read_fp8(top, c);
  const std::optional<Obj> ac = flat ? std::nullopt : top.object("autocast", kTorchAutocastArgs);
  const std::optional<Obj> gs = flat ? std::optional<Obj>(top) : top.object("grad_scaler", kTorchGradScalerArgs);
  constexpr std::string_view devices = "\"cuda\", \"cpu\", \"xpu\", \"mps\" or \"hpu\"";
  if (ac) {
    const std::string device = ac->string("device_type", devices).value_or("cuda");
    const auto device_dtype = torch_default_dtype(device);
    if (!device_dtype)
      ac->fail("device_type", *ac->raw("device_type"), devices, "a device type, without an index");
    if (!ac->has("device_type"))
      c.notes.push_back("autocast.device_type not given: \"cuda\" (torch.cuda.amp.autocast)");
    c.amp.dtype = read_amp_dtype(*ac, "dtype", *device_dtype);
    if (!ac->has("dtype"))
      c.notes.push_back("autocast.dtype not given: " + std::string(dtype_long_name(*device_dtype)) +
                        ", torch.autocast's default for device_type \"" + device + "\"");
    const bool enabled = ac->boolean("enabled", true);
    c.amp.level = enabled ? Level::O1 : Level::O0;
    c.notes.push_back(enabled
                          ? "autocast: PyTorch's autocast is ampcheck's O1 (per-op casts, parameters fp32)"
                          : "autocast.enabled is false: O0, everything in fp32");
    if (ac->boolean("cache_enabled") == false)
      c.notes.push_back(
          "autocast.cache_enabled is false: ampcheck still casts each fp32 parameter once per "
          "autocast scope (PyTorch's default, cache_enabled=True)");
  } else {
    c.amp.level = Level::O0;
    c.notes.push_back("no autocast block: PyTorch runs the model in fp32 (O0)");
  }

  if (gs) {
    if (gs->has("device")) {
      const std::string device = *gs->string("device", devices);
      if (!torch_default_dtype(device)) gs->fail("device", *gs->raw("device"), devices);
    }
    const TorchScaling s = read_torch_scaling(*gs, TorchScaling{});
    if (!gs->boolean("enabled", true)) {
      c.scaling = disabled_scaler();
      c.notes.push_back(gs->at("enabled") + " is false: no loss scaling and no step skipped (GradScaler's methods "
                        "become no-ops; step(optimizer) is optimizer.step())");
    } else {
      c.scaling = s;
      c.notes.push_back(
          "loss scaling: torch.amp.GradScaler; keys not given take its defaults (init_scale 65536, "
          "growth_factor 2, backoff_factor 0.5, growth_interval 2000)");
      if (c.amp.dtype == DType::bf16 && c.amp.level != Level::O0)
        c.notes.push_back("bf16 with a GradScaler: allowed, though bf16's range rarely needs loss scaling");
    }
  } else if (c.amp.dtype == DType::f16 && c.amp.level != Level::O0) {
    c.scaling = TorchScaling{};
    c.notes.push_back(
        "no grad_scaler block: torch.amp.GradScaler defaults (fp16 gradients need loss scaling)");
  } else {
    c.scaling = no_scaling();
    c.notes.push_back("no grad_scaler block: no loss scaling");
  }
}

// ---- Apex ------------------------------------------------------------------------------

// apex/amp/frontend.py: initialize(..., enabled=True, opt_level="O1", cast_model_type=None,
// patch_torch_functions=None, keep_batchnorm_fp32=None, master_weights=None,
// loss_scale=None, cast_model_outputs=None, num_losses=1, verbosity=1,
// min_loss_scale=None, max_loss_scale=2.**24).
const Keys kApexKeys = {
    "opt_level", "cast_model_type", "patch_torch_functions", "keep_batchnorm_fp32", "master_weights",
    "loss_scale", "cast_model_outputs", "num_losses", "verbosity", "min_loss_scale", "max_loss_scale"};

// `o` holds amp.initialize's keyword arguments; its "enabled" was read by the caller.
void read_apex_args(const Obj& o, bool enabled, Config& c) {
  constexpr std::string_view levels = "\"O0\", \"O1\", \"O2\" or \"O3\" (the letter O, then a digit)";
  const std::string opt_level = o.string("opt_level", levels).value_or("O1");
  if (opt_level.size() != 2 || opt_level[0] != 'O' || opt_level[1] < '0' || opt_level[1] > '3')
    o.fail("opt_level", *o.raw("opt_level"), levels);
  if (!o.has("opt_level"))
    c.notes.push_back(o.at("opt_level") + " not given: \"O1\", amp.initialize's default");
  const Level level = *parse_level(opt_level);

  // The O0-O3 property sets (frontend.py, classes O0..O3), then the user's overrides,
  // with the same consistency errors Apex raises (warn_or_err raises unless hard_override).
  bool patch = level == Level::O1;
  bool keep_bn = level == Level::O2;  // O3: false; O0/O1: None (unused)
  bool masters = level == Level::O2;
  bool dynamic = level == Level::O1 || level == Level::O2;
  double static_scale = 1.0;
  DType dtype = DType::f16;

  if (const json* v = o.raw("cast_model_type"); v && !(v->is_boolean() && !v->get<bool>())) {
    constexpr std::string_view accepted = "\"torch.float16\", \"torch.bfloat16\" or \"torch.float32\"";
    if (!v->is_string()) o.fail("cast_model_type", *v, accepted);
    const auto d = try_parse_dtype(v->get<std::string>());
    if (!d || !is_floating(*d) || *d == DType::f64) o.fail("cast_model_type", *v, accepted);
    if (*d == DType::f32) {
      if (level == Level::O2 || level == Level::O3)
        o.fail("cast_model_type", *v, "\"torch.float16\" or \"torch.bfloat16\" at " + opt_level,
               "O2 and O3 cast the model down; keep fp32 weights with opt_level O0 or O1");
    } else {
      if (level == Level::O1)
        o.fail("cast_model_type", *v, "null (not set) or \"torch.float32\" at O1",
               "Apex: O1 inserts casts around functions and keeps the weights fp32; use O2 or O3 to cast the "
               "model");
      if (level == Level::O0)
        o.fail("cast_model_type", *v, "null (not set) or \"torch.float32\" at O0", "O0 is pure fp32");
      dtype = *d;
    }
  }
  if (auto v = o.boolean("patch_torch_functions")) {
    if (*v && level != Level::O1)
      o.fail("patch_torch_functions", *o.raw("patch_torch_functions"),
             "false or null (not set) at " + opt_level,
             "Apex: patch_torch_functions=True should only be set by selecting opt_level O1");
    patch = *v;
  }
  if (const json* v = o.raw("keep_batchnorm_fp32")) {
    bool value = false;
    if (v->is_boolean())
      value = v->get<bool>();
    else if (v->is_string() && (v->get<std::string>() == "True" || v->get<std::string>() == "False"))
      value = v->get<std::string>() == "True";
    else
      o.fail("keep_batchnorm_fp32", *v, "true, false, \"True\", \"False\" or null");
    if (level == Level::O1)
      o.fail("keep_batchnorm_fp32", *v, "null (not set) at O1",
             "Apex: with O1, batchnorm functions are patched to run in fp32 already");
    keep_bn = value;
  }
  if (auto v = o.boolean("master_weights")) {
    if (level == Level::O1)
      o.fail("master_weights", *o.raw("master_weights"), "null (not set) at O1",
             "Apex: with O1 the model weights themselves stay fp32, so masters make no sense");
    masters = *v;
  }
  if (const json* v = o.raw("loss_scale")) {
    constexpr std::string_view accepted = "\"dynamic\", a number > 0, or a number in a string (\"128.0\")";
    if (v->is_string() && v->get<std::string>() == "dynamic") {
      dynamic = true;
    } else {
      double d = 0;
      if (v->is_number()) {
        d = v->get<double>();
      } else if (v->is_string()) {
        const std::string s = v->get<std::string>();
        const auto r = std::from_chars(s.data(), s.data() + s.size(), d);
        if (r.ec != std::errc() || r.ptr != s.data() + s.size()) o.fail("loss_scale", *v, accepted);
      } else {
        o.fail("loss_scale", *v, accepted);
      }
      if (!(std::isfinite(d) && d > 0)) o.fail("loss_scale", *v, accepted);
      dynamic = false;
      static_scale = d;
    }
  }
  const auto min_scale = o.number("min_loss_scale", {0, false}, {kInf, false});
  const double max_scale = o.number("max_loss_scale", {0, false}, {kInf, false}).value_or(16777216.0);
  if (min_scale && *min_scale > max_scale)
    throw ConfigError(o.at("min_loss_scale") + " " + num(*min_scale) + " is above " + o.at("max_loss_scale") +
                      " " + num(max_scale) + "; the minimum must not exceed the maximum");
  if (const json* v = o.raw("cast_model_outputs")) {
    const auto d = v->is_string() ? try_parse_dtype(v->get<std::string>()) : std::nullopt;
    if (!d || !is_floating(*d))
      o.fail("cast_model_outputs", *v, "a torch dtype such as \"torch.float32\", or null");
    c.notes.push_back(o.at("cast_model_outputs") +
                      ": ignored; ampcheck returns outputs in the dtype they ran in");
  }
  if (auto n = o.integer("num_losses", 1, kInt64Max); n && *n > 1)
    c.notes.push_back(o.at("num_losses") + " " + std::to_string(*n) +
                      ": ampcheck keeps one loss scaler for all losses");
  o.integer("verbosity", 0, kInt64Max);

  if (!enabled) {
    c.amp.level = Level::O0;
    c.scaling = no_scaling();
    c.notes.push_back("Apex enabled is false: every amp call is a no-op: O0, no loss scaling");
    return;
  }
  c.amp.dtype = dtype;
  switch (level) {
    case Level::O0:
      c.amp.level = Level::O0;
      c.notes.push_back("Apex O0: pure fp32");
      break;
    case Level::O1:
      c.amp.level = patch ? Level::O1 : Level::O0;
      c.notes.push_back(patch ? "Apex O1: casts around functions from its lists, weights fp32: ampcheck's O1"
                              : "Apex O1 with patch_torch_functions false: nothing is cast, so O0");
      break;
    case Level::O2:
      c.amp.level = Level::O2;
      c.amp.keep_norm_fp32 = keep_bn;
      c.amp.master_weight = masters;
      c.notes.push_back("Apex O2: model cast to " + std::string(dtype_long_name(dtype)) +
                        (c.amp.keep_norm_fp32 ? " except batchnorm" : "") +
                        (masters ? ", fp32 master weights" : ", no master weights") +
                        "; ampcheck's O2 also keeps its black-list ops in fp32, which Apex O2 runs low");
      if (c.amp.keep_norm_fp32)
        c.notes.push_back("keep_batchnorm_fp32: ampcheck's keep_norm_fp32 keeps LayerNorm fp32 too");
      break;
    case Level::O3:
      if (keep_bn)
        o.fail(
            "keep_batchnorm_fp32", *o.raw("keep_batchnorm_fp32"), "false or null (not set) at O3",
            "ampcheck's O3 casts every parameter, normalisation included; opt_level O2 keeps batchnorm fp32");
      if (masters)
        o.fail("master_weights", *o.raw("master_weights"), "false or null (not set) at O3",
               "ampcheck's O3 keeps no fp32 masters; opt_level O2 keeps them");
      c.amp.level = Level::O3;
      c.amp.keep_norm_fp32 = false;
      c.amp.master_weight = false;
      c.notes.push_back("Apex O3: everything in " + std::string(dtype_long_name(dtype)) +
                        ", no master weights");
      break;
  }
  ApexScaling s;
  s.dynamic = dynamic;
  s.loss_scale = dynamic ? 65536.0 : static_scale;  // apex/amp/scaler.py: init_scale=2.**16
  s.min_loss_scale = min_scale.value_or(0.0);
  s.max_loss_scale = max_scale;
  c.scaling = s;
  if (dynamic)
    c.notes.push_back(
        "loss scaling: Apex dynamic (apex/amp/scaler.py: starts at 2^16, x2 after 2000 clean steps, "
        "/2 on overflow, within [min_loss_scale, max_loss_scale])");
  else
    c.notes.push_back(
        "loss scaling: Apex static, scale " + num(static_scale) +
        (o.has("min_loss_scale") || o.has("max_loss_scale") ? "; min/max_loss_scale unused" : ""));
}

void read_apex(const json& j, Config& c) {
  Keys known = kApexKeys;
  known.insert(known.end(), {"framework", "enabled"});
  const Obj top(j, "", known);
  read_apex_args(top, top.boolean("enabled", true), c);
}

// ---- DeepSpeed -------------------------------------------------------------------------

// deepspeed/runtime/constants.py and the config sections DeepSpeed documents; accepted
// and ignored (they are not about precision, or not about AMP).
const Keys kDeepSpeedOtherKeys = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer",
    "scheduler", "zero_optimization", "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
    "memory_breakdown", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "sparse_attention",
    "sparse_gradients", "communication_data_type", "seq_parallel_communication_data_type",
    "prescale_gradients", "gradient_predivide_factor", "disable_allgather", "dump_state", "vocabulary_size",
    "eigenvalue", "progressive_layer_drop", "checkpoint", "data_types", "dataloader_drop_last",
    "activation_checkpointing", "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet",
    "comms_logger", "aio", "elasticity", "pipeline", "curriculum_learning", "data_efficiency",
    "compression_training", "autotuning", "graph_harvesting", "use_data_before_expert_parallelism", "nebula",
    "quantize_training", "weight_quantization", "hybrid_engine", "compile", "timers",
    "zero_optimization_stage", "amp_params"};
const Keys kDeepSpeedFp16Keys = {
    "enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
    "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads", "fused_mode"};
const Keys kDeepSpeedBf16Keys = {
    "enabled", "immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads",
    "bf16_optimizer_states"};
const Keys kDeepSpeedTorchAutocastKeys = {"enabled", "dtype", "lower_precision_safe_modules"};
const Keys kDeepSpeedBlocks = {"fp16", "bf16", "bfloat16", "amp", "torch_autocast"};

void read_deepspeed(const json& j, Config& c) {
  Keys known = kDeepSpeedOtherKeys;
  known.insert(known.end(), kDeepSpeedBlocks.begin(), kDeepSpeedBlocks.end());
  known.push_back("framework");
  const Obj top(j, "", known,
                "ampcheck reads fp16, bf16 (or bfloat16), amp and torch_autocast from a DeepSpeed config and "
                "ignores DeepSpeed's other documented keys");
  if (top.has("bf16") && top.has("bfloat16"))
    throw ConfigError(
        "bf16 and bfloat16 are both given; bfloat16 is DeepSpeed's old name for bf16: keep one");
  const auto fp16 = top.object("fp16", kDeepSpeedFp16Keys);
  const auto bf16 = top.object(top.has("bfloat16") ? "bfloat16" : "bf16", kDeepSpeedBf16Keys);
  const auto amp = [&top]() -> std::optional<Obj> {
    const json* v = top.raw("amp");
    if (!v) return std::nullopt;
    Keys k = kApexKeys;
    k.push_back("enabled");
    return Obj(*v, "amp", k,
               "accepted in amp: enabled and apex.amp.initialize's arguments: " + join(kApexKeys));
  }();
  const auto ta = top.object("torch_autocast", kDeepSpeedTorchAutocastKeys);

  const bool fp16_on = fp16 && fp16->boolean("enabled", false);
  const bool bf16_on = bf16 && bf16->boolean("enabled", false);
  const bool amp_on = amp && amp->boolean("enabled", false);
  const bool ta_on = ta && ta->boolean("enabled", false);
  // deepspeed/runtime/config.py asserts these exclusions.
  const std::vector<std::pair<bool, std::string>> on = {
      {fp16_on, "fp16.enabled"},
      {bf16_on, (bf16 ? bf16->path() : "bf16") + ".enabled"},
      {amp_on, "amp.enabled"},
      {ta_on, "torch_autocast.enabled"}};
  std::vector<std::string> enabled;
  for (const auto& [b, k] : on)
    if (b) enabled.push_back(k);
  if (enabled.size() > 1)
    throw ConfigError(quoted_list(enabled) + (enabled.size() == 2 ? " are both" : " are all") +
                      " true; DeepSpeed enables one precision mode at a time (\"bfloat16 and fp16 modes "
                      "cannot be simultaneously enabled\"): set one");

  // Read every block given, enabled or not, so a bad value is reported either way.
  DeepSpeedScaling ds;
  double loss_scale = 0;
  if (fp16) {
    fp16->boolean("auto_cast");
    fp16->boolean("fused_mode");
    loss_scale =
        fp16->number("loss_scale", {0, true}, {kInf, false}, "0 means dynamic loss scaling").value_or(0.0);
    ds = read_deepspeed_scaling(*fp16, DeepSpeedScaling{});
  }
  if (bf16)
    for (std::string_view k : {"immediate_grad_update", "check_grad_overflow", "bf16_optimizer_states"})
      bf16->boolean(k);
  if (ta) {
    read_amp_dtype(*ta, "dtype", DType::f16);
    if (const json* v = ta->raw("lower_precision_safe_modules");
        v &&
        (!v->is_array() || std::any_of(v->begin(), v->end(), [](const json& x) { return !x.is_string(); })))
      ta->fail("lower_precision_safe_modules", *v, "a list of module class names");
  }

  if (fp16_on) {
    // DeepSpeed calls module.half(): every parameter fp16, norms included; its fp16
    // optimizer keeps fp32 masters unless fp16_master_weights_and_grads.
    c.amp.level = Level::O2;
    c.amp.dtype = DType::f16;
    c.amp.keep_norm_fp32 = false;
    c.amp.master_weight = !fp16->boolean("fp16_master_weights_and_grads", false);
    c.notes.push_back(
        "fp16.enabled: DeepSpeed's fp16 mode is ampcheck's O2: the whole module in fp16 (norm "
        "layers included: keep_norm_fp32 false), fp32 master weights in the optimizer" +
        std::string(c.amp.master_weight ? "" : " (off: fp16_master_weights_and_grads)") +
        "; ampcheck's O2 also keeps its black-list ops in fp32, which DeepSpeed runs in fp16");
    if (fp16->boolean("auto_cast", false))
      c.notes.push_back("fp16.auto_cast: inputs are cast to fp16, as ampcheck's O2 does at each op");
    if (loss_scale > 0) {
      c.scaling = StaticScaling{loss_scale};
      c.notes.push_back("fp16.loss_scale " + num(loss_scale) + ": static loss scaling" +
                        std::string(fp16->has("initial_scale_power") || fp16->has("loss_scale_window") ||
                                            fp16->has("hysteresis") || fp16->has("min_loss_scale")
                                        ? "; the dynamic keys given are unused"
                                        : ""));
    } else {
      c.scaling = ds;
      c.notes.push_back(
          "fp16.loss_scale 0: DeepSpeed's dynamic loss scaling; keys not given take "
          "DeepSpeedFP16Config's defaults (initial_scale_power 16, loss_scale_window 1000, "
          "hysteresis 2, min_loss_scale 1, consecutive_hysteresis false)");
    }
  } else if (bf16_on) {
    c.amp.level = Level::O2;
    c.amp.dtype = DType::bf16;
    c.amp.keep_norm_fp32 = false;
    c.amp.master_weight = !bf16->boolean("bf16_master_weights_and_grads", false);
    c.scaling = no_scaling();
    c.notes.push_back(bf16->path() +
                      ".enabled: DeepSpeed's bf16 mode is ampcheck's O2 in bfloat16 (the whole "
                      "module cast, norms included), " +
                      std::string(c.amp.master_weight ? "fp32 master weights" : "no fp32 masters") +
                      ", no loss scaling (DeepSpeed scales only fp16)");
  } else if (amp_on) {
    c.style = ConfigStyle::apex;
    c.notes.push_back("amp.enabled: DeepSpeed hands the amp block to apex.amp.initialize: Apex semantics");
    read_apex_args(*amp, true, c);
  } else if (ta_on) {
    c.amp.level = Level::O1;
    c.amp.dtype = read_amp_dtype(*ta, "dtype", DType::f16);
    c.notes.push_back("torch_autocast.enabled: PyTorch autocast around the model: ampcheck's O1");
    if (!ta->has("dtype")) c.notes.push_back("torch_autocast.dtype not given: float16");
    if (ta->has("lower_precision_safe_modules"))
      c.notes.push_back(
          "torch_autocast.lower_precision_safe_modules: ignored; ampcheck's lists name ops, "
          "not module classes");
    if (c.amp.dtype == DType::f16) {
      c.scaling = TorchScaling{};
      c.notes.push_back("fp16 autocast: DeepSpeed adds a torch.amp.GradScaler with its defaults");
    } else {
      c.scaling = no_scaling();
    }
  } else {
    c.amp.level = Level::O0;
    c.scaling = no_scaling();
    c.notes.push_back(
        "no precision mode enabled (fp16, bf16, amp, torch_autocast): DeepSpeed trains in fp32 (O0)");
  }
  if (amp && !amp_on) {
    Config unused;
    read_apex_args(*amp, true, unused);
  }
  std::vector<std::string> ignored;
  for (const std::string& k : top.given())
    if (std::find(kDeepSpeedOtherKeys.begin(), kDeepSpeedOtherKeys.end(), k) != kDeepSpeedOtherKeys.end())
      ignored.push_back(k);
  if (!ignored.empty())
    c.notes.push_back("ignored DeepSpeed keys that are not about AMP: " + quoted_list(ignored));
}

// ---- ampcheck's own form ---------------------------------------------------------------

const Keys kAmpcheckKeys = {
    "framework", "level", "dtype", "custom_white_list", "custom_black_list", "fp32_modules",
    "keep_norm_fp32", "master_weight", "loss_scaling", "allow_inf", "fp8", "converted_from", "notes"};


std::optional<ConfigStyle> style_from_name(std::string_view s) {
  for (ConfigStyle st : {ConfigStyle::ampcheck, ConfigStyle::paddle, ConfigStyle::pytorch,
                         ConfigStyle::deepspeed, ConfigStyle::apex})
    if (style_name(st) == s) return st;
  return std::nullopt;
}

void read_ampcheck(const json& j, Config& c) {
  const Obj top(j, "", kAmpcheckKeys);
  read_fp8(top, c);
  if (!top.has("level")) c.notes.push_back("level not given: O1");
  c.amp.level = read_level(top, "level", Level::O1);
  if (!top.has("dtype")) c.notes.push_back("dtype not given: float16");
  c.amp.dtype = read_amp_dtype(top, "dtype", DType::f16);
  const auto white = read_op_list(top, "custom_white_list", ConfigStyle::ampcheck, c.notes);
  const auto black = read_op_list(top, "custom_black_list", ConfigStyle::ampcheck, c.notes);
  set_lists(c.amp, white, black, "custom_white_list", "custom_black_list");
  c.amp.fp32_modules = read_names(top, "fp32_modules", "fp32_modules",
                                  "a list of module paths, e.g. [\"encoder.layers.1.attn\"]",
                                  "a module path (a non-empty string)");
  c.amp.keep_norm_fp32 = top.boolean("keep_norm_fp32", true);
  c.amp.master_weight = top.boolean("master_weight", true);
  c.allow_inf = read_names(top, "allow_inf", "allow_inf",
                           "a list of op names or module paths whose Inf/-Inf is intended, e.g. [\"masked_fill\"]",
                           "an op name or a module path (a non-empty string)");

  constexpr std::string_view behaviours = "\"static\", \"pytorch\", \"paddle\", \"deepspeed\" or \"apex\"";
  if (const json* ls = top.raw("loss_scaling")) {
    if (!ls->is_object() || !ls->contains("behaviour"))
      Obj::fail_path("loss_scaling", *ls,
                     std::string("an object with a \"behaviour\": ") + std::string(behaviours));
    const json& b = (*ls)["behaviour"];
    const std::string name = b.is_string() ? b.get<std::string>() : "";
    const auto keys = [](Keys k) {
      k.insert(k.begin(), "behaviour");
      return k;
    };
    if (name == "static") {
      const Obj o(*ls, "loss_scaling", keys({"scale", "skip_nonfinite"}));
      c.scaling = StaticScaling{o.number("scale", {0, false}, {kInf, false}).value_or(1.0),
                                o.boolean("skip_nonfinite", true)};
    } else if (name == "pytorch") {
      c.scaling =
          read_torch_scaling(Obj(*ls, "loss_scaling",
                                 keys({"init_scale", "growth_factor", "backoff_factor", "growth_interval"})),
                             TorchScaling{});
    } else if (name == "paddle") {
      c.scaling =
          read_paddle_scaling(Obj(*ls, "loss_scaling",
                                  keys({"init_loss_scaling", "incr_ratio", "decr_ratio", "incr_every_n_steps",
                                        "decr_every_n_nan_or_inf", "use_dynamic_loss_scaling"})),
                              PaddleScaling{});
    } else if (name == "deepspeed") {
      const Obj o(*ls, "loss_scaling",
                  keys({"initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale",
                        "consecutive_hysteresis", "raise_error_at_min_scale"}));
      DeepSpeedScaling s = read_deepspeed_scaling(o, DeepSpeedScaling{});
      s.raise_error_at_min_scale = o.boolean("raise_error_at_min_scale", s.raise_error_at_min_scale);
      c.scaling = s;
    } else if (name == "apex") {
      const Obj o(*ls, "loss_scaling",
                  keys({"dynamic", "loss_scale", "min_loss_scale", "max_loss_scale", "scale_window"}));
      ApexScaling s;
      s.dynamic = o.boolean("dynamic", s.dynamic);
      s.loss_scale = o.number("loss_scale", {0, false}, {kInf, false}).value_or(s.loss_scale);
      s.min_loss_scale =
          o.number("min_loss_scale", {0, true}, {kInf, false}, "0: no minimum").value_or(s.min_loss_scale);
      s.max_loss_scale = o.number("max_loss_scale", {0, false}, {kInf, false}).value_or(s.max_loss_scale);
      s.scale_window = o.integer("scale_window", 1, kInt64Max).value_or(s.scale_window);
      if (s.min_loss_scale > s.max_loss_scale)
        throw ConfigError("loss_scaling.min_loss_scale " + num(s.min_loss_scale) +
                          " is above loss_scaling.max_loss_scale " + num(s.max_loss_scale) +
                          "; the minimum must not exceed the maximum");
      c.scaling = s;
    } else {
      Obj::fail_path("loss_scaling.behaviour", b, std::string(behaviours));
    }
  } else if (c.amp.dtype == DType::f16 && c.amp.level != Level::O0) {
    c.scaling = TorchScaling{};
    c.notes.push_back("loss_scaling not given: PyTorch's GradScaler rules and defaults");
  } else {
    c.scaling = no_scaling();
    c.notes.push_back("loss_scaling not given: none (static scale 1)");
  }
  if (c.amp.level == Level::O3 && (c.amp.keep_norm_fp32 || c.amp.master_weight) &&
      (top.has("keep_norm_fp32") || top.has("master_weight")))
    c.notes.push_back(
        "O3 casts every parameter and keeps no masters: keep_norm_fp32 and master_weight are unused");

  // A converted config keeps where it came from, so the round trip gives the same Config.
  if (const auto from = top.string("converted_from", "a framework name")) {
    const auto st = style_from_name(*from);
    if (!st || *st == ConfigStyle::ampcheck)
      top.fail("converted_from", *top.raw("converted_from"),
               "\"paddle\", \"pytorch\", \"deepspeed\" or \"apex\"");
    c.style = *st;
  }
  if (const json* n = top.raw("notes")) {
    if (!n->is_array() || std::any_of(n->begin(), n->end(), [](const json& x) { return !x.is_string(); }))
      top.fail("notes", *n, "a list of strings");
    c.notes.clear();
    for (const json& x : *n) c.notes.push_back(x.get<std::string>());
  }
}

// ---- style detection -------------------------------------------------------------------

struct Detected {
  ConfigStyle style;
  std::string reason;
};

// Where each framework's keys sit: its top level ("") and its blocks, as its reader above
// accepts them.
struct Place {
  ConfigStyle style;
  std::string_view block;
  Keys keys;
};

const std::vector<Place>& places() {
  static const std::vector<Place> table = [] {
    const auto cat = [](std::initializer_list<Keys> lists) {
      Keys out;
      for (const Keys& l : lists) out.insert(out.end(), l.begin(), l.end());
      return out;
    };
    Keys ampcheck_top = kAmpcheckKeys;
    ampcheck_top.erase(std::find(ampcheck_top.begin(), ampcheck_top.end(), "framework"));
    return std::vector<Place>{
        {ConfigStyle::paddle, "",
         cat({kPaddleStrategyOtherKeys, {"amp", "amp_configs"}, kPaddleDygraphBlocks, kPaddleAmpConfigKeys})},
        {ConfigStyle::paddle, "amp_configs", kPaddleAmpConfigKeys},
        {ConfigStyle::paddle, "auto_cast", kPaddleAutoCastArgs},
        {ConfigStyle::paddle, "decorate", kPaddleDecorateArgs},
        {ConfigStyle::paddle, "grad_scaler", kPaddleGradScalerArgs},
        {ConfigStyle::pytorch, "", cat({kTorchBlocks, kTorchGradScalerArgs, {"fp8"}})},
        {ConfigStyle::pytorch, "autocast", kTorchAutocastArgs},
        {ConfigStyle::pytorch, "grad_scaler", kTorchGradScalerArgs},
        {ConfigStyle::deepspeed, "", cat({kDeepSpeedOtherKeys, kDeepSpeedBlocks})},
        {ConfigStyle::deepspeed, "fp16", kDeepSpeedFp16Keys},
        {ConfigStyle::deepspeed, "bf16", kDeepSpeedBf16Keys},
        {ConfigStyle::deepspeed, "bfloat16", kDeepSpeedBf16Keys},
        {ConfigStyle::deepspeed, "amp", cat({kApexKeys, {"enabled"}})},
        {ConfigStyle::deepspeed, "torch_autocast", kDeepSpeedTorchAutocastKeys},
        {ConfigStyle::apex, "", cat({kApexKeys, {"enabled"}})},
        {ConfigStyle::ampcheck, "", ampcheck_top},
    };
  }();
  return table;
}

Detected detect_style(const json& j) {
  if (const auto it = j.find("framework"); it != j.end()) {
    constexpr std::string_view accepted = "\"ampcheck\", \"paddle\", \"pytorch\", \"deepspeed\" or \"apex\"";
    if (!it->is_string()) Obj::fail_path("framework", *it, accepted);
    const std::string s = it->get<std::string>();
    const auto st = style_from_name(s);
    if (!st) {
      std::string why;
      const std::string_view best = closest(s, {"ampcheck", "paddle", "pytorch", "deepspeed", "apex"});
      if (!best.empty()) why = "did you mean \"" + std::string(best) + "\"?";
      Obj::fail_path("framework", *it, accepted, why);
    }
    return {*st, "named by \"framework\""};
  }
  // A key tells the framework when that framework alone uses it where it sits.
  const auto owners = [](std::string_view block, std::string_view key) {
    std::vector<ConfigStyle> out;
    for (const Place& p : places())
      if (p.block == block && std::find(p.keys.begin(), p.keys.end(), key) != p.keys.end() &&
          std::find(out.begin(), out.end(), p.style) == out.end())
        out.push_back(p.style);
    return out;
  };
  std::vector<std::pair<ConfigStyle, std::string>> found;  // the first key per style
  const auto add = [&found](ConfigStyle st, const std::string& key) {
    for (const auto& f : found)
      if (f.first == st) return;
    found.emplace_back(st, key);
  };
  for (const auto& [key, value] : j.items()) {
    std::vector<ConfigStyle> top = owners("", key);
    // "amp" is a bool in a Paddle strategy and an Apex block in DeepSpeed.
    if (key == "amp") top = {value.is_object() ? ConfigStyle::deepspeed : ConfigStyle::paddle};
    if (top.size() == 1) add(top[0], key);
    if (!value.is_object()) continue;
    for (const auto& [inner, v] : value.items()) {
      const std::vector<ConfigStyle> in = owners(key, inner);
      if (in.size() == 1) add(in[0], key + "." + inner);
    }
  }
  if (found.size() == 1) return {found[0].first, "detected from the key \"" + found[0].second + "\""};
  const std::string hint =
      "; add \"framework\": \"paddle\" | \"pytorch\" | \"deepspeed\" | \"apex\" | \"ampcheck\"";
  if (found.empty()) {
    // Only the custom lists: they are amp_configs' keys first.
    if (j.contains("custom_white_list") || j.contains("custom_black_list"))
      return {ConfigStyle::paddle, "detected from the custom lists alone (PaddlePaddle's amp_configs keys)"};
    std::string keys;
    for (const auto& [k, v] : j.items()) {
      keys += (keys.empty() ? "\"" : ", \"") + k + "\"";
      const std::vector<ConfigStyle> shared = owners("", k);
      if (shared.size() < 2) continue;
      std::string names;
      for (std::size_t i = 0; i < shared.size(); ++i)
        names += std::string(i == 0 ? "" : i + 1 == shared.size() ? " and " : ", ") + std::string(style_name(shared[i]));
      keys += " (a key of " + names + ")";
    }
    throw ConfigError(
        "cannot tell which framework's config this is (keys: " + (keys.empty() ? std::string("none") : keys) +
        "); expected a PaddlePaddle amp_configs or strategy, PyTorch autocast/GradScaler arguments, a DeepSpeed "
        "config with fp16/bf16, Apex amp.initialize arguments with opt_level, or ampcheck's form" +
        hint);
  }
  std::string msg = "keys of more than one framework: ";
  for (std::size_t i = 0; i < found.size(); ++i)
    msg += (i ? ", \"" : "\"") + found[i].second + "\" (" + std::string(style_name(found[i].first)) + ")";
  throw ConfigError(msg + hint);
}

std::string style_description(ConfigStyle s) {
  switch (s) {
    case ConfigStyle::ampcheck:
      return "ampcheck's own form";
    case ConfigStyle::paddle:
      return "PaddlePaddle (fleet amp_configs, or auto_cast/decorate/GradScaler arguments)";
    case ConfigStyle::pytorch:
      return "PyTorch (torch.autocast and torch.amp.GradScaler arguments)";
    case ConfigStyle::deepspeed:
      return "DeepSpeed (the fp16/bf16 blocks of a DeepSpeed config)";
    case ConfigStyle::apex:
      return "NVIDIA Apex (amp.initialize arguments)";
  }
  return "?";
}

std::string_view level_description(Level l) {
  switch (l) {
    case Level::O0:
      return "everything in fp32 (the reference)";
    case Level::O1:
      return "per-op casts from the lists, parameters fp32";
    case Level::O2:
      return "parameters low (normalisation optionally fp32), fp32 masters, every op low except the black "
             "list";
    case Level::O3:
      return "everything low, no master weights";
  }
  return "?";
}

// The loss-scaling parameters in ampcheck's key names, in a fixed order.
ordered_json scaling_json(const ScalingOptions& s) {
  return std::visit(Overloaded{
                        [](const StaticScaling& o) {
                          return ordered_json{
                              {"behaviour", "static"}, {"scale", o.scale}, {"skip_nonfinite", o.skip_nonfinite}};
                        },
                        [](const TorchScaling& o) {
                          return ordered_json{{"behaviour", "pytorch"},
                                              {"init_scale", o.init_scale},
                                              {"growth_factor", o.growth_factor},
                                              {"backoff_factor", o.backoff_factor},
                                              {"growth_interval", o.growth_interval}};
                        },
                        [](const PaddleScaling& o) {
                          return ordered_json{{"behaviour", "paddle"},
                                              {"init_loss_scaling", o.init_loss_scaling},
                                              {"incr_ratio", o.incr_ratio},
                                              {"decr_ratio", o.decr_ratio},
                                              {"incr_every_n_steps", o.incr_every_n_steps},
                                              {"decr_every_n_nan_or_inf", o.decr_every_n_nan_or_inf},
                                              {"use_dynamic_loss_scaling", o.use_dynamic_loss_scaling}};
                        },
                        [](const DeepSpeedScaling& o) {
                          return ordered_json{{"behaviour", "deepspeed"},
                                              {"initial_scale_power", o.initial_scale_power},
                                              {"loss_scale_window", o.loss_scale_window},
                                              {"hysteresis", o.hysteresis},
                                              {"min_loss_scale", o.min_loss_scale},
                                              {"consecutive_hysteresis", o.consecutive_hysteresis},
                                              {"raise_error_at_min_scale", o.raise_error_at_min_scale}};
                        },
                        [](const ApexScaling& o) {
                          return ordered_json{{"behaviour", "apex"},
                                              {"dynamic", o.dynamic},
                                              {"loss_scale", o.loss_scale},
                                              {"min_loss_scale", o.min_loss_scale},
                                              {"max_loss_scale", o.max_loss_scale},
                                              {"scale_window", o.scale_window}};
                        },
                    },
                    s);
}

std::string_view behaviour_description(const ScalingOptions& s) {
  return std::visit(
      Overloaded{
          [](const StaticScaling& o) -> std::string_view {
            return o.scale == 1.0 ? "no loss scaling (a fixed scale of 1)" : "a fixed loss scale";
          },
          [](const TorchScaling&) -> std::string_view {
            return "PyTorch GradScaler: x growth_factor after growth_interval clean steps, x backoff_factor "
                   "on "
                   "Inf/NaN";
          },
          [](const PaddleScaling& o) -> std::string_view {
            return o.use_dynamic_loss_scaling
                       ? "PaddlePaddle: x incr_ratio after incr_every_n_steps clean steps, x decr_ratio "
                         "after "
                         "decr_every_n_nan_or_inf steps with Inf/NaN"
                       : "PaddlePaddle with use_dynamic_loss_scaling false: init_loss_scaling fixed";
          },
          [](const DeepSpeedScaling&) -> std::string_view {
            return "DeepSpeed DynamicLossScaler: starts at 2^initial_scale_power, x2 after loss_scale_window "
                   "clean steps, /2 on overflow once hysteresis is used up, never below min_loss_scale";
          },
          [](const ApexScaling& o) -> std::string_view {
            return o.dynamic ? "Apex dynamic: x2 after scale_window clean steps, /2 on overflow, within "
                               "[min_loss_scale, max_loss_scale]"
                             : "Apex static: loss_scale fixed";
          },
      },
      s);
}

std::string value_text(const ordered_json& v) {
  if (v.is_number_float()) return num(v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string list_text(const std::vector<std::string>& l) {
  if (l.empty()) return "(none)";
  std::string out;
  for (const std::string& s : l) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::string_view style_name(ConfigStyle s) {
  switch (s) {
    case ConfigStyle::ampcheck:
      return "ampcheck";
    case ConfigStyle::paddle:
      return "paddle";
    case ConfigStyle::pytorch:
      return "pytorch";
    case ConfigStyle::deepspeed:
      return "deepspeed";
    case ConfigStyle::apex:
      return "apex";
  }
  return "?";
}

Config parse_config(const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = parse_json_text(json_text, source);
  } catch (const JsonTextError& e) {
    throw ConfigError(e.what());  // names the source, the line and column, and the fix
  }
  try {
    if (!j.is_object())
      throw ConfigError("the top level is " + show(j) + ", not a JSON object { ... } of config keys");
    const Detected d = detect_style(j);
    Config c;
    c.style = d.style;
    c.notes.push_back("semantics: " + std::string(style_name(d.style)) + ", " + d.reason);
    switch (d.style) {
      case ConfigStyle::ampcheck:
        read_ampcheck(j, c);
        break;
      case ConfigStyle::paddle:
        read_paddle(j, c);
        break;
      case ConfigStyle::pytorch:
        read_pytorch(j, c);
        break;
      case ConfigStyle::deepspeed:
        read_deepspeed(j, c);
        break;
      case ConfigStyle::apex:
        read_apex(j, c);
        break;
    }
    return c;
  } catch (const ConfigError& e) {
    throw ConfigError(source + ": " + e.what());
  }
}

Config load_config(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw ConfigError(path + ": no such file");
  if (!std::filesystem::is_regular_file(path, ec)) throw ConfigError(path + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot be opened for reading");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(path + ": cannot be read");
  return parse_config(text.str(), path);
}

std::string to_json(const Config& c) {
  ordered_json j;
  j["framework"] = "ampcheck";
  if (c.style != ConfigStyle::ampcheck) j["converted_from"] = style_name(c.style);
  j["level"] = level_name(c.amp.level);
  j["dtype"] = dtype_long_name(c.amp.dtype);
  j["custom_white_list"] = c.amp.custom_white_list;
  j["custom_black_list"] = c.amp.custom_black_list;
  if (!c.amp.fp32_modules.empty()) j["fp32_modules"] = c.amp.fp32_modules;
  if (!c.allow_inf.empty()) j["allow_inf"] = c.allow_inf;
  if (c.fp8) j["fp8"] = {{"recipe", c.fp8->recipe}, {"keep", c.fp8->keep}};
  j["keep_norm_fp32"] = c.amp.keep_norm_fp32;
  j["master_weight"] = c.amp.master_weight;
  j["loss_scaling"] = scaling_json(c.scaling);
  j["notes"] = c.notes;
  return j.dump(2) + "\n";
}

std::string explain(const Config& c) {
  std::ostringstream out;
  const bool o2_flags_used = c.amp.level == Level::O2;
  out << "style:         " << style_name(c.style) << " -- " << style_description(c.style) << "\n"
      << "level:         " << level_name(c.amp.level) << " -- " << level_description(c.amp.level) << "\n"
      << "dtype:         " << dtype_long_name(c.amp.dtype)
      << (c.amp.level == Level::O0 ? " (unused at O0)" : "") << "\n"
      << "custom white:  " << list_text(c.amp.custom_white_list) << "\n"
      << "custom black:  " << list_text(c.amp.custom_black_list) << "\n"
      << (c.amp.fp32_modules.empty() ? "" : "fp32 modules:  " + list_text(c.amp.fp32_modules) + "\n")
      << (c.allow_inf.empty() ? "" : "allow inf:     " + list_text(c.allow_inf) + "\n")
      << (c.fp8 ? "fp8:           " + c.fp8->recipe + " on every linear layer whose sizes are multiples of 16" +
                      (c.fp8->keep.empty() ? std::string() : ", but " + list_text(c.fp8->keep)) + "\n"
                : "")
      << "O2 flags:      keep_norm_fp32 = " << (c.amp.keep_norm_fp32 ? "true" : "false")
      << ", master_weight = " << (c.amp.master_weight ? "true" : "false")
      << (o2_flags_used ? "" : " (used at O2 only)") << "\n"
      << "loss scaling:  " << behaviour_name(c.scaling) << " -- " << behaviour_description(c.scaling) << "\n";
  const ordered_json params = scaling_json(c.scaling);
  std::size_t width = 0;
  for (const auto& [k, v] : params.items()) width = std::max(width, k.size());
  for (const auto& [k, v] : params.items()) {
    if (k == "behaviour") continue;
    out << "  " << k << std::string(width - k.size() + 2, ' ') << value_text(v) << "\n";
  }
  if (std::holds_alternative<DeepSpeedScaling>(c.scaling))
    out << "  (initial scale "
        << num(std::ldexp(1.0, std::get<DeepSpeedScaling>(c.scaling).initial_scale_power)) << ")\n";
  if (!c.notes.empty()) {
    out << "notes:\n";
    for (const std::string& n : c.notes) out << "  - " << n << "\n";
  }
  return out.str();
}

}  // namespace ampcheck::amp
