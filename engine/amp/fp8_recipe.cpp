#include "engine/amp/fp8_recipe.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>

#include "kernels/fp8_kernels.h"  // fp8_scale_from_amax: TE's compute_scale_from_amax

namespace ampcheck::amp {

std::string_view role_name(Fp8Role role) {
  switch (role) {
    case Fp8Role::input: return "input";
    case Fp8Role::weight: return "weight";
    case Fp8Role::grad_output: return "grad_output";
  }
  return "?";
}

Fp8Format format_for(Fp8RecipeFormat format, Fp8Role role) {
  return format == Fp8RecipeFormat::hybrid && role == Fp8Role::grad_output ? Fp8Format::e5m2 : Fp8Format::e4m3;
}

float fp8_max(Fp8Format format) { return format == Fp8Format::e4m3 ? 448.0f : 57344.0f; }

// ---- the recipe as written in a script
namespace {

// A value of the constructor's grammar: a number, a string, a name (True, Format.HYBRID),
// or a call (QParams(...)).
struct Argument;
struct Value {
  enum Kind { number, string, name, call, lambda } kind = name;
  std::string text;              // the number's, string's, name's or lambda's text
  std::vector<Argument> args;    // a call's keyword arguments
  std::string written;           // as it was written, for messages
};
struct Argument {
  std::string key;
  Value value;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Value parse_whole() {
    Value v = value();
    skip();
    if (i_ != s_.size()) fail("unexpected '" + std::string(s_.substr(i_, 12)) + "' after the recipe");
    if (v.kind != Value::call) fail("expected a recipe constructor such as DelayedScaling(...), not '" + v.written + "'");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw Fp8RecipeError("fp8 recipe " + quoted_source(s_) + ": " + why);
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  std::string dotted_name() {
    std::string out;
    for (;;) {
      skip();
      const std::size_t start = i_;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
      if (i_ == start) fail(out.empty() ? "expected a name" : "expected a name after '" + out + ".'");
      out += s_.substr(start, i_ - start);
      if (i_ < s_.size() && s_[i_] == '.') {
        ++i_;
        out += '.';
        continue;
      }
      return out;
    }
  }
  Value value() {
    // Recipes nest one call deep (QParams): deeper is refused, not recursed into.
    if (++depth_ > 8) fail("calls nested more than 8 deep");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    skip();
    if (i_ >= s_.size()) fail("the text ends where a value is expected");
    const std::size_t start = i_;
    Value v;
    const char c = s_[i_];
    if (c == '"' || c == '\'') {
      const std::size_t end = s_.find(c, i_ + 1);
      if (end == std::string_view::npos) fail("a string is not closed");
      v.kind = Value::string;
      v.text = s_.substr(i_ + 1, end - i_ - 1);
      i_ = end + 1;
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.') {
      ++i_;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                                ((s_[i_] == '-' || s_[i_] == '+') && (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E'))))
        ++i_;
      v.kind = Value::number;
      v.text = s_.substr(start, i_ - start);
    } else if (s_.substr(i_, 6) == "lambda" &&
               (i_ + 6 == s_.size() || !(std::isalnum(static_cast<unsigned char>(s_[i_ + 6])) || s_[i_ + 6] == '_'))) {
      // A lambda runs to the ',' or ')' that closes its keyword argument, after the ':'
      // that ends its parameters (whose commas are its own): its parentheses and strings
      // are passed over. Its grammar is Fp8ScaleFunction's.
      const std::size_t colon = s_.find(':', i_);
      if (colon == std::string_view::npos) fail("a lambda needs ':' after its parameters");
      i_ = colon + 1;
      int depth = 0;
      for (; i_ < s_.size(); ++i_) {
        const char d = s_[i_];
        if (d == '"' || d == '\'') {
          const std::size_t end = s_.find(d, i_ + 1);
          if (end == std::string_view::npos) fail("a string is not closed");
          i_ = end;
        } else if (d == '(' || d == '[') {
          ++depth;
        } else if ((d == ')' || d == ']') && depth-- == 0) {
          break;
        } else if (d == ',' && depth == 0) {
          break;
        }
      }
      v.kind = Value::lambda;
      v.text = s_.substr(start, i_ - start);
      while (!v.text.empty() && std::isspace(static_cast<unsigned char>(v.text.back()))) v.text.pop_back();
    } else {
      v.text = dotted_name();
      v.kind = Value::name;
      if (eat('(')) {
        v.kind = Value::call;
        if (!eat(')')) {
          do {
            skip();
            const std::size_t arg_start = i_;
            std::string key = dotted_name();
            if (!eat('=')) {
              fail("arguments are given by keyword, as TransformerEngine's documentation writes them: '" +
                   std::string(s_.substr(arg_start, i_ - arg_start)) + "' has no '='");
            }
            if (key.find('.') != std::string::npos) fail("'" + key + "' is not a keyword");
            v.args.push_back(Argument{std::move(key), value()});
          } while (eat(','));
          if (!eat(')')) fail("expected ',' or ')' in the arguments of " + v.text);
        }
      }
    }
    v.written = std::string(s_.substr(start, i_ - start));
    return v;
  }

  std::string_view s_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

// The last component of a dotted name: transformer_engine.common.recipe.DelayedScaling,
// recipe.Format.HYBRID.
std::string last_part(const std::string& name) {
  const std::size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

class Keywords {
 public:
  Keywords(const Value& call, std::string recipe, std::vector<std::string> known)
      : recipe_(std::move(recipe)), known_(std::move(known)) {
    for (const auto& [key, value] : call.args) {
      if (std::find(known_.begin(), known_.end(), key) == known_.end()) {
        std::string list;
        for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
        fail(key, "is not a keyword of " + recipe_ + " (its keywords: " + list + ")");
      }
      if (!values_.emplace(key, &value).second) fail(key, "is given twice");
    }
  }
  const Value* get(const std::string& key) const {
    auto it = values_.find(key);
    return it == values_.end() ? nullptr : it->second;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw Fp8RecipeError(recipe_ + ": " + key + " " + why);
  }
  bool boolean(const std::string& key, bool fallback) const {
    const Value* v = get(key);
    if (!v) return fallback;
    if (v->kind == Value::name && (v->text == "True" || v->text == "False")) return v->text == "True";
    fail(key, "must be True or False, not " + v->written);
  }
  double number(const std::string& key, double fallback) const {
    const Value* v = get(key);
    if (!v) return fallback;
    if (v->kind == Value::number) {
      std::istringstream in(v->text);
      in.imbue(std::locale::classic());
      double x = 0;
      if (in >> x && in.peek() == std::char_traits<char>::eof() && std::isfinite(x)) return x;
    }
    fail(key, "must be a finite number, not " + v->written);
  }
  std::int64_t integer(const std::string& key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) const {
    const Value* v = get(key);
    if (!v) return fallback;
    const double x = number(key, 0);
    if (x != std::floor(x) || x < static_cast<double>(lo) || x > static_cast<double>(hi)) {
      fail(key, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], not " + v->written);
    }
    return static_cast<std::int64_t>(x);
  }
  Fp8RecipeFormat format(Fp8RecipeFormat fallback) const {
    const Value* v = get("fp8_format");
    if (!v) return fallback;
    const std::string f = v->kind == Value::name ? last_part(v->text) : v->text;
    if (f == "E4M3") return Fp8RecipeFormat::e4m3;
    if (f == "HYBRID") return Fp8RecipeFormat::hybrid;
    if (f == "E5M2") fail("fp8_format", "Format.E5M2: pure E5M2 training is not supported (TransformerEngine refuses it too); use Format.HYBRID for e5m2 gradients");
    fail("fp8_format", "must be Format.E4M3 or Format.HYBRID, not " + v->written);
  }
  // A keyword of a feature ampcheck does not model, accepted at its default only.
  void only_default(const std::string& key, const std::string& value, const std::string& why) const {
    const Value* v = get(key);
    if (v && v->written != value) fail(key, "=" + v->written + ": " + why + "; only " + key + "=" + value + " is run");
  }

 private:
  std::string recipe_;
  std::vector<std::string> known_;
  std::map<std::string, const Value*> values_;
};

// QParams(power_2_scale=..., amax_epsilon=...): the features of NVFP4 refused.
std::pair<bool, float> qparams(const Keywords& recipe, const std::string& key, bool default_pow2) {
  const Value* v = recipe.get(key);
  if (!v) return {default_pow2, 0.0f};
  if (v->kind != Value::call || last_part(v->text) != "QParams") recipe.fail(key, "must be QParams(...), not " + v->written);
  const Keywords q(*v, "QParams",
                   {"power_2_scale", "amax_epsilon", "random_hadamard_transform", "stochastic_rounding", "fp4_2d_quantization"});
  for (const char* fp4 : {"random_hadamard_transform", "stochastic_rounding", "fp4_2d_quantization"})
    q.only_default(fp4, "False", "an NVFP4 feature, not part of fp8 current scaling");
  const double eps = q.number("amax_epsilon", 0.0);
  if (eps < 0) q.fail("amax_epsilon", "must not be negative");
  return {q.boolean("power_2_scale", default_pow2), kernels::f64_to_f32(eps)};
}

}  // namespace

Fp8Recipe parse_fp8_recipe(std::string_view text) {
  const Value call = Parser(text).parse_whole();
  const std::string name = last_part(call.text);
  const std::string attention = "fp8 attention (FusedAttention) is not part of ampcheck's engine";
  if (name == "DelayedScaling") {
    const Keywords k(call, name,
                     {"margin", "fp8_format", "amax_history_len", "amax_compute_algo", "scaling_factor_compute_algo",
                      "reduce_amax", "fp8_dpa", "fp8_mha", "backward_override"});
    DelayedScaling r;
    r.margin = static_cast<int>(k.integer("margin", 0, -64, 64));
    r.fp8_format = k.format(r.fp8_format);
    r.amax_history_len = k.integer("amax_history_len", r.amax_history_len, 1, 1 << 20);
    if (const Value* a = k.get("amax_compute_algo")) {
      if (a->kind == Value::string && a->text == "max") {
        r.amax_compute_algo = AmaxComputeAlgo::max;
      } else if (a->kind == Value::string && a->text == "most_recent") {
        r.amax_compute_algo = AmaxComputeAlgo::most_recent;
      } else {
        k.fail("amax_compute_algo", "must be \"max\" or \"most_recent\" (a Python callable cannot run here), not " + a->written);
      }
    }
    if (const Value* f = k.get("scaling_factor_compute_algo"); f && !(f->kind == Value::name && f->text == "None")) {
      if (f->kind != Value::lambda)
        k.fail("scaling_factor_compute_algo",
               "must be None or a lambda (lambda amax, scale, fp8_max, recipe: ...), not " + f->written +
                   ": a function defined elsewhere in your script cannot be read here; write its body as a lambda");
      try {
        r.scaling_factor_compute_algo = std::make_shared<const Fp8ScaleFunction>(Fp8ScaleFunction::parse(f->text));
      } catch (const std::invalid_argument& e) {
        throw Fp8RecipeError(std::string("DelayedScaling: ") + e.what());
      }
    }
    r.reduce_amax = k.boolean("reduce_amax", true);
    k.only_default("fp8_dpa", "False", attention);
    k.only_default("fp8_mha", "False", attention);
    k.only_default("backward_override", "None", "delayed scaling only supports backward_override=None (TransformerEngine)");
    return r;
  }
  if (name == "Float8CurrentScaling") {
    const Keywords k(call, name,
                     {"use_power_2_scales", "fp8_format", "fp8_quant_fwd_inp", "fp8_quant_fwd_weight", "fp8_quant_bwd_grad",
                      "fp8_gemm_fprop", "fp8_gemm_dgrad", "fp8_gemm_wgrad", "fp8_dpa", "fp8_mha", "backward_override"});
    Float8CurrentScaling r;
    r.fp8_format = k.format(r.fp8_format);
    const bool pow2 = k.boolean("use_power_2_scales", false);
    const auto inp = qparams(k, "fp8_quant_fwd_inp", pow2);
    const auto weight = qparams(k, "fp8_quant_fwd_weight", pow2);
    const auto grad = qparams(k, "fp8_quant_bwd_grad", pow2);
    if (inp != weight || inp != grad) {
      k.fail("fp8_quant_fwd_inp", "and fp8_quant_fwd_weight and fp8_quant_bwd_grad differ: ampcheck runs one QParams for the three");
    }
    r.use_power_2_scales = inp.first;
    r.amax_epsilon = inp.second;
    for (const char* gemm : {"fp8_gemm_fprop", "fp8_gemm_dgrad", "fp8_gemm_wgrad"})
      if (k.get(gemm)) k.fail(gemm, "(the GEMM's accumulation) is not chosen per recipe in ampcheck: leave it at TransformerEngine's default");
    k.only_default("fp8_dpa", "False", attention);
    k.only_default("fp8_mha", "False", attention);
    k.only_default("backward_override", "None", "ampcheck's backward runs the recipe's fp8 GEMMs");
    return r;
  }
  if (name == "MXFP8BlockScaling") {
    const Keywords k(call, name, {"margin", "fp8_format", "fp8_dpa", "fp8_mha", "backward_override"});
    MXFP8BlockScaling r;
    r.fp8_format = k.format(r.fp8_format);
    k.only_default("margin", "0", "MXFP8's E8M0 scales take no margin");
    k.only_default("fp8_dpa", "False", attention);
    k.only_default("fp8_mha", "False", attention);
    k.only_default("backward_override", "None", "ampcheck's backward runs the recipe's fp8 GEMMs");
    return r;
  }
  throw Fp8RecipeError("fp8 recipe " + quoted_source(text) + ": " + call.text +
                       " is not a recipe ampcheck runs (DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling)");
}

namespace {
const char* format_text(Fp8RecipeFormat f) { return f == Fp8RecipeFormat::e4m3 ? "Format.E4M3" : "Format.HYBRID"; }
std::string float_text(float x) {
  std::ostringstream out;
  out.imbue(std::locale::classic());
  out.precision(9);
  out << x;
  return out.str();
}
}  // namespace

std::string to_string(const Fp8Recipe& recipe) {
  if (const auto* d = std::get_if<DelayedScaling>(&recipe)) {
    return "DelayedScaling(margin=" + std::to_string(d->margin) + ", fp8_format=" + format_text(d->fp8_format) +
           ", amax_history_len=" + std::to_string(d->amax_history_len) + ", amax_compute_algo=\"" +
           (d->amax_compute_algo == AmaxComputeAlgo::max ? "max" : "most_recent") +
           "\", reduce_amax=" + (d->reduce_amax ? "True" : "False") +
           (d->scaling_factor_compute_algo ? ", scaling_factor_compute_algo=" + d->scaling_factor_compute_algo->text() : "") + ")";
  }
  if (const auto* c = std::get_if<Float8CurrentScaling>(&recipe)) {
    const std::string q = std::string("QParams(power_2_scale=") + (c->use_power_2_scales ? "True" : "False") +
                          ", amax_epsilon=" + float_text(c->amax_epsilon) + ")";
    return std::string("Float8CurrentScaling(fp8_format=") + format_text(c->fp8_format) + ", fp8_quant_fwd_inp=" + q +
           ", fp8_quant_fwd_weight=" + q + ", fp8_quant_bwd_grad=" + q + ")";
  }
  const auto& m = std::get<MXFP8BlockScaling>(recipe);
  return std::string("MXFP8BlockScaling(fp8_format=") + format_text(m.fp8_format) + ")";
}

// ---- delayed scaling
DelayedScalingState initial_state(const DelayedScaling& recipe) {
  DelayedScalingState s;
  s.amax_history.assign(static_cast<std::size_t>(std::max<std::int64_t>(1, recipe.amax_history_len)), 0.0f);
  return s;
}

void record_amax(DelayedScalingState& state, float amax) {
  state.amax_history.at(0) = std::fmax(state.amax_history[0], amax);
}

DelayedScalingUpdate update(DelayedScalingState& state, const DelayedScaling& recipe, Fp8Format format,
                            std::optional<float> reduced_amax) {
  auto& h = state.amax_history;
  const std::size_t length = h.size();
  DelayedScalingUpdate u;
  u.scale_before = state.scale;
  if (recipe.scaling_factor_compute_algo) {  // TE's Python path
    if (reduced_amax) h[0] = *reduced_amax;
    u.step_amax = h[0];
    float amax = h[0];
    if (recipe.amax_compute_algo == AmaxComputeAlgo::max)
      for (const float a : h) amax = std::isnan(a) || std::isnan(amax) ? std::numeric_limits<float>::quiet_NaN() : std::max(amax, a);
    std::rotate(h.begin(), h.begin() + 1, h.end());  // torch.roll(h, -1): slot 0 moves to the end
    h[0] = 0.0f;
    u.rolled = true;
    u.amax_used = amax;
    state.scale = (*recipe.scaling_factor_compute_algo)(amax, state.scale, fp8_max(format), recipe.margin,
                                                          recipe.amax_history_len);
    state.scale_inv = 1.0f / state.scale;
    u.scale_after = state.scale;
    return u;
  }
  // The step's amax: the reduction's where it gave one that is not 0, else the local slot.
  const float last_amax = reduced_amax && *reduced_amax != 0.0f ? *reduced_amax : h[0];
  u.step_amax = last_amax;
  float amax = 0.0f;
  if (last_amax != 0.0f) {
    // Roll by one to the left, this step's amax entering last; slot 0 is cleared for the
    // next step. The max runs over the rolled window (fmaxf: a NaN is passed over).
    for (std::size_t i = 0; i < length; ++i) {
      const float a = i + 1 < length ? h[i + 1] : last_amax;
      amax = std::fmax(amax, a);
    }
    std::rotate(h.begin(), h.begin() + 1, h.end());
    h[length - 1] = last_amax;
    h[0] = 0.0f;  // the oldest value leaves the window (with one slot, this step's)
    u.rolled = true;
  }
  if (recipe.amax_compute_algo == AmaxComputeAlgo::most_recent) amax = last_amax;
  const float scaled_max = fp8_max(format) * std::pow(2.0f, static_cast<float>(-recipe.margin));
  float scale;
  if (std::isfinite(amax) && amax > 0.0f) {
    scale = scaled_max / amax;
    u.amax_used = amax;
  } else {
    scale = state.scale;
    u.kept_scale = true;
  }
  if (std::isinf(scale)) {
    scale = std::numeric_limits<float>::max();
    u.clamped_to_max = true;
  }
  state.scale = scale;
  state.scale_inv = 1.0f / scale;
  u.scale_after = scale;
  return u;
}

// ---- current scaling
float current_scale(float amax, Fp8Format format, const Float8CurrentScaling& recipe) {
  return kernels::fp8_scale_from_amax(amax, fp8_max(format), recipe.use_power_2_scales, recipe.amax_epsilon);
}

}  // namespace ampcheck::amp
