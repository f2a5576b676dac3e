#include "inspector/profile_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "engine/dtype/dtype.h"
#include "inspector/kernel_class.h"
#include "profiles/kernel_names.h"

namespace ampcheck::inspector {
namespace {

namespace pf = profiles;

// ---------------------------------------------------------------------------------
// Framework ops: PyTorch's autocast lists (aten/src/ATen/autocast_mode.cpp: the
// lower_precision_fp ops mm, addmm, bmm, baddbmm, matmul, linear, convolutions,
// scaled_dot_product_attention, ...) and Paddle's AMP lists (python/paddle/amp/amp_lists.py:
// matmul_v2, conv2d, ...), each read as the op of ampcheck's own list that shares its AMP
// category, with the convention its "Input Dims" follow.

enum class Dims : std::uint8_t {
  none,            // no shapes read
  as_given,        // (A [..., M, K], B [..., K, N]): mm, matmul, bmm, Paddle's matmul
  skip_first,      // (self, A, B): addmm, baddbmm, addbmm, addmv
  linear,          // (x [..., K], W [N, K], bias): linear
  conv,            // (x [N, C, H, W], w [C_out, C_in/g, kh, kw], ...)
  conv_backward,   // (grad_out [N, C_out, OH, OW], x, w, ...): convolution_backward
  attention,       // (q [B, H, L, E], k [B, H, S, E], v [B, H, S, Ev], ...)
};

struct FrameworkOp {
  std::string_view name;
  Op op;
  Dims dims;
  int stride_at = -1, padding_at = -1, dilation_at = -1;  // conv: positions in "Concrete Inputs"
  int causal_at = -1;                                       // attention: is_causal's position
};

const std::vector<FrameworkOp>& framework_ops() {
  static const std::vector<FrameworkOp> kOps = {
      {"aten::mm", Op::matmul, Dims::as_given},
      {"aten::matmul", Op::matmul, Dims::as_given},
      {"aten::addmm", Op::linear, Dims::skip_first},
      {"aten::_addmm_activation", Op::linear, Dims::skip_first},
      {"aten::linear", Op::linear, Dims::linear},
      {"aten::bmm", Op::bmm, Dims::as_given},
      {"aten::baddbmm", Op::bmm, Dims::skip_first},
      {"aten::addbmm", Op::bmm, Dims::skip_first},
      {"aten::mv", Op::matmul, Dims::as_given},
      {"aten::addmv", Op::matmul, Dims::skip_first},
      {"aten::einsum", Op::matmul, Dims::none},
      {"aten::linalg_vecdot", Op::matmul, Dims::none},
      {"aten::chain_matmul", Op::matmul, Dims::none},
      {"aten::linalg_multi_dot", Op::matmul, Dims::none},
      {"aten::conv1d", Op::conv2d, Dims::conv, 3, 4, 5},
      {"aten::conv2d", Op::conv2d, Dims::conv, 3, 4, 5},
      {"aten::conv3d", Op::conv2d, Dims::conv, 3, 4, 5},
      {"aten::convolution", Op::conv2d, Dims::conv, 3, 4, 5},
      {"aten::_convolution", Op::conv2d, Dims::conv, 3, 4, 5},
      {"aten::cudnn_convolution", Op::conv2d, Dims::conv, 3, 2, 4},
      {"aten::conv_transpose1d", Op::conv2d, Dims::none},
      {"aten::conv_transpose2d", Op::conv2d, Dims::none},
      {"aten::conv_transpose3d", Op::conv2d, Dims::none},
      {"aten::cudnn_convolution_transpose", Op::conv2d, Dims::none},
      {"aten::convolution_backward", Op::conv2d, Dims::conv_backward},
      {"aten::cudnn_convolution_backward", Op::conv2d, Dims::none},
      {"aten::cudnn_convolution_backward_input", Op::conv2d, Dims::none},
      {"aten::cudnn_convolution_backward_weight", Op::conv2d, Dims::none},
      {"aten::scaled_dot_product_attention", Op::bmm, Dims::attention, -1, -1, -1, 5},
      {"aten::_scaled_dot_product_flash_attention", Op::bmm, Dims::attention, -1, -1, -1, 4},
      {"aten::_scaled_dot_product_efficient_attention", Op::bmm, Dims::attention, -1, -1, -1, 5},
      {"aten::_scaled_dot_product_cudnn_attention", Op::bmm, Dims::attention, -1, -1, -1, 6},
      {"aten::_flash_attention_forward", Op::bmm, Dims::attention},
      {"aten::_efficient_attention_forward", Op::bmm, Dims::attention},
      {"aten::_scaled_dot_product_flash_attention_backward", Op::bmm, Dims::none},
      {"aten::_scaled_dot_product_efficient_attention_backward", Op::bmm, Dims::none},
      {"aten::_flash_attention_backward", Op::bmm, Dims::none},
      {"aten::_efficient_attention_backward", Op::bmm, Dims::none},
      {"aten::native_layer_norm", Op::layer_norm, Dims::none},
      {"aten::native_batch_norm", Op::batch_norm, Dims::none},
      {"aten::cudnn_batch_norm", Op::batch_norm, Dims::none},
      {"aten::_softmax", Op::softmax, Dims::none},
      {"aten::_log_softmax", Op::log_softmax, Dims::none},
      {"aten::nll_loss_forward", Op::cross_entropy, Dims::none},
      {"aten::nll_loss_nd", Op::cross_entropy, Dims::none},
      // PaddlePaddle: its op (kernel) names.
      {"matmul_v2", Op::matmul, Dims::as_given},
      {"matmul", Op::matmul, Dims::as_given},
      {"mul", Op::matmul, Dims::as_given},  // Paddle's legacy "mul" is a matrix product
      {"bmm", Op::bmm, Dims::as_given},
      {"fc", Op::linear, Dims::as_given},   // Input [M, K], W [K, N]
      {"conv2d", Op::conv2d, Dims::conv},
      {"depthwise_conv2d", Op::conv2d, Dims::conv},
      {"conv3d", Op::conv2d, Dims::none},
      {"conv2d_transpose", Op::conv2d, Dims::none},
      {"flash_attn", Op::bmm, Dims::none},
  };
  return kOps;
}

const FrameworkOp* find_framework_op(std::string_view name) {
  for (const FrameworkOp& f : framework_ops())
    if (f.name == name) return &f;
  return nullptr;
}

// A name as ampcheck's lists know it: "aten::relu_" -> "relu", Paddle's "matmul_v2_grad" ->
// "matmul_v2".
std::string bare(std::string_view name) {
  if (name.starts_with("aten::")) name.remove_prefix(6);
  if (name.ends_with("_grad")) name.remove_suffix(5);
  while (!name.empty() && name.back() == '_') name.remove_suffix(1);
  return std::string(name);
}

// "[2, 2]", "2", "True"
std::vector<std::int64_t> int_list(std::string_view s) {
  std::vector<std::int64_t> out;
  std::int64_t v = 0;
  bool in = false, negative = false;
  for (const char c : s) {
    if (c >= '0' && c <= '9') {
      v = v * 10 + (c - '0');
      in = true;
    } else {
      if (in) out.push_back(negative ? -v : v);
      negative = c == '-';
      v = 0;
      in = false;
    }
  }
  if (in) out.push_back(negative ? -v : v);
  return out;
}

// The shapes of one call in the convention of its op (matrix_shape), its convolution's
// output size where known, and its multiply-adds.
struct CallShapes {
  std::vector<Shape> shapes;
  Shape out_spatial;
  double work = 0;  // multiply-adds; 0 when not known
};

CallShapes call_shapes(const FrameworkOp& f, const pf::OpInputs& in) {
  CallShapes c;
  const auto& d = in.dims;
  auto at = [&](std::size_t i) -> const Shape& {
    static const Shape none;
    return i < d.size() ? d[i] : none;
  };
  switch (f.dims) {
    case Dims::none: return c;
    case Dims::as_given: c.shapes = {at(0), at(1)}; break;
    case Dims::skip_first: c.shapes = {at(1), at(2)}; break;
    case Dims::linear: c.shapes = {at(0), at(1)}; break;
    case Dims::conv:
    case Dims::conv_backward: {
      const std::size_t x = f.dims == Dims::conv ? 0 : 1;
      c.shapes = {at(x), at(x + 1)};
      const Shape& input = at(x);
      const Shape& weight = at(x + 1);
      if (f.dims == Dims::conv_backward) {
        if (at(0).size() == 4) c.out_spatial = {at(0)[2], at(0)[3]};
      } else if (input.size() == 4 && weight.size() == 4 && f.stride_at >= 0 &&
                 static_cast<std::size_t>(f.dilation_at) < in.concrete.size()) {
        auto pair = [&](int i, std::int64_t fallback) {
          std::vector<std::int64_t> v = int_list(in.concrete[static_cast<std::size_t>(i)]);
          if (v.size() == 1) v.push_back(v[0]);
          return v.size() == 2 ? v : std::vector<std::int64_t>{fallback, fallback};
        };
        const auto stride = pair(f.stride_at, 1), padding = pair(f.padding_at, 0), dilation = pair(f.dilation_at, 1);
        if (in.concrete[static_cast<std::size_t>(f.padding_at)].find_first_of("sv") == std::string::npos) {
          Shape out(2);
          for (int i = 0; i < 2; ++i)
            out[static_cast<std::size_t>(i)] =
                (input[static_cast<std::size_t>(2 + i)] + 2 * padding[static_cast<std::size_t>(i)] -
                 dilation[static_cast<std::size_t>(i)] * (weight[static_cast<std::size_t>(2 + i)] - 1) - 1) /
                    std::max<std::int64_t>(stride[static_cast<std::size_t>(i)], 1) +
                1;
          if (out[0] > 0 && out[1] > 0) c.out_spatial = out;
        }
      }
      break;
    }
    case Dims::attention: {
      const Shape& q = at(0);
      const Shape& k = at(1);
      const Shape& v = at(2);
      if (q.size() == 4 && k.size() == 4 && v.size() == 4) {
        // Q K^T then P V: B H L S (E + Ev); a causal mask skips half.
        c.work = static_cast<double>(q[0] * q[1] * q[2]) * static_cast<double>(k[2]) *
                 static_cast<double>(q[3] + v[3]);
        if (f.causal_at >= 0 && static_cast<std::size_t>(f.causal_at) < in.concrete.size() &&
            in.concrete[static_cast<std::size_t>(f.causal_at)] == "True")
          c.work /= 2;
      }
      return c;
    }
  }
  // A convolution's work needs its output size (a stride changes it fourfold): without
  // the strides recorded, none is claimed.
  if (f.op == Op::conv2d && c.out_spatial.empty()) {
    c.work = 0;
    return c;
  }
  const MatrixShape m = matrix_shape(f.op, c.shapes, c.out_spatial);
  c.work = m.work;
  if (f.dims == Dims::conv_backward) c.work *= 2;  // the input's and the weight's gradients
  return c;
}

// The floating dtype of an op's tensor inputs as recorded; nothing when none or mixed.
std::optional<DType> inputs_dtype(const pf::OpInputs& in, std::string* text) {
  std::optional<DType> out;
  bool mixed = false;
  std::string listed;
  for (std::size_t i = 0; i < in.types.size(); ++i) {
    const auto d = recorded_dtype(in.types[i]);
    if (!d) continue;
    const bool tensor = i < in.dims.size() ? !in.dims[i].empty() : true;
    if (!tensor) continue;
    listed += (listed.empty() ? "" : ", ") + in.types[i];
    if (out && *out != *d) mixed = true;
    out = d;
  }
  if (text) *text = listed;
  return mixed ? std::nullopt : out;
}

// ---------------------------------------------------------------------------------
// Time by precision x tensor cores

struct Shares {
  std::map<std::pair<KernelPrecision, TensorCores>, std::int64_t> ns;
  void add(const KernelClass& c, std::int64_t t) { ns[{c.input, c.tensor_cores}] += t; }
  std::vector<reports::PrecisionShare> rows() const {
    std::vector<reports::PrecisionShare> out;
    for (const auto& [key, t] : ns) out.push_back({precision_name(key.first), tensor_cores_name(key.second), t});
    std::stable_sort(out.begin(), out.end(), [](const reports::PrecisionShare& a, const reports::PrecisionShare& b) {
      return a.ns > b.ns;
    });
    return out;
  }
};

std::string ms(std::int64_t ns) {
  const double v = static_cast<double>(ns) * 1e-6;
  if (ns < 1000) return fmt::format("{} ns", ns);
  if (v < 0.1) return fmt::format("{:.1f} us", v * 1e3);
  return v >= 100 ? fmt::format("{:.0f} ms", v) : v >= 10 ? fmt::format("{:.1f} ms", v) : fmt::format("{:.2f} ms", v);
}

// Whole percents, but never "100%" or "0%" for a part that is neither all nor nothing.
std::string percent(std::int64_t part, std::int64_t whole) {
  if (whole <= 0) return "-";
  const double p = 100.0 * static_cast<double>(part) / static_cast<double>(whole);
  if (part != whole && p > 99.5) return fmt::format("{:.1f}%", std::min(p, 99.9));
  if (part != 0 && p < 0.5) return fmt::format("{:.1f}%", std::max(p, 0.1));
  return fmt::format("{:.0f}%", p);
}

std::string dtype_word(DType d) { return std::string(info(d).long_name); }

KernelPrecision precision_of_dtype(DType d) {
  return d == DType::f16 ? KernelPrecision::f16 : d == DType::bf16 ? KernelPrecision::bf16 : KernelPrecision::f32;
}

std::string phase_label(pf::Phase p) { return p == pf::Phase::forward ? "" : std::string(" (") + pf::phase_name(p) + ")"; }

Phase engine_phase(pf::Phase p) {
  switch (p) {
    case pf::Phase::forward: return Phase::forward;
    case pf::Phase::backward: return Phase::backward;
    case pf::Phase::optimizer: return Phase::optimizer;
  }
  return Phase::forward;
}

// ---------------------------------------------------------------------------------
// Nsight Compute counters: the tensor pipes' metrics as ground truth

struct CounterVerdict {
  TensorCores tensor_cores = TensorCores::unknown;
  std::string precision;  // from sm__ops_path_tensor_src_<type>_dst_*: "bf16", "f16", ...
  std::string metrics;
};

CounterVerdict read_counters(const pf::Counters& c) {
  CounterVerdict v;
  if (!c.tensor_measured) return v;
  bool any = false;
  std::set<std::string> precisions;
  for (const auto& [metric, value] : c.tensor) {
    v.metrics += (v.metrics.empty() ? "" : ", ") + metric + "=" + fmt::format("{:.0f}", value);
    if (value <= 0) continue;
    any = true;
    const std::string_view m = metric;
    const auto src = m.find("_src_");
    if (src == std::string_view::npos) continue;
    std::string_view type = m.substr(src + 5);
    type = type.substr(0, type.find('_'));
    static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
        {"fp16", "f16"}, {"bf16", "bf16"}, {"tf32", "tf32"}, {"fp64", "f64"}, {"fp8", "fp8"}, {"int8", "int8"},
        {"fp4", "fp4"},  {"e4m3", "fp8"},  {"e5m2", "fp8"},  {"e2m1", "fp4"}};
    for (const auto& [spelled, name] : kNames)
      if (type == spelled) precisions.emplace(name);
  }
  v.tensor_cores = any ? TensorCores::yes : TensorCores::no;
  for (const std::string& p : precisions) v.precision += (v.precision.empty() ? "" : "+") + p;
  return v;
}

// ---------------------------------------------------------------------------------
// One profile

struct Instance {
  std::string name, type, module;
  pf::Phase phase = pf::Phase::forward;
  const FrameworkOp* framework = nullptr;
  std::optional<Op> op;
  std::int64_t calls = 0;
  std::int64_t launches = 0, total_ns = 0, matrix_ns = 0;
  double work = 0;  // multiply-adds over its calls
  bool work_known = true;
  Shares shares;
  std::uint32_t inputs = 0;  // of its last call
  std::uint32_t shape_op_inputs = 0;
  CallShapes last;
  // Its kernels by (name, grid, block).
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t,
                      std::uint32_t>,
           reports::GpuKernel>
      kernels;
  std::map<std::uint32_t, CheckedKernel> checked;  // by name
};

class Checker {
 public:
  Checker(const pf::Profile& p, const ProfileCheckOptions& o) : p_(p), o_(o) {}

  reports::ProfileRank run() {
    classify_all();
    precision_from_launchers();
    r_.source = p_.source;
    r_.format = pf::format_name(p_.format);
    r_.rank = p_.rank;
    r_.devices = p_.devices;
    r_.notes = p_.notes;
    attribution();
    const bool kernels_only = !p_.links || !p_.has_ops();
    build_instances(kernels_only);
    decide_expectation();
    check(kernels_only);
    tables();
    costs();
    counters();
    verdict(kernels_only);
    return std::move(r_);
  }

 private:
  // One class per kernel name (a trace names the same kernel thousands of times), one
  // more per kernel whose Nsight Compute counters overrule its name.
  void classify_all() {
    class_of_.assign(p_.kernels.size(), 0);
    classes_.emplace_back();  // [0]: copies and memsets, which multiply nothing
    std::unordered_map<std::uint32_t, std::uint32_t> by_name;
    for (std::size_t i = 0; i < p_.kernels.size(); ++i) {
      const pf::Kernel& k = p_.kernels[i];
      if (k.kind != pf::ActivityKind::kernel) continue;
      auto it = by_name.find(k.name);
      if (it == by_name.end()) {
        it = by_name.emplace(k.name, static_cast<std::uint32_t>(classes_.size())).first;
        classes_.push_back(classify_kernel_name(p_.str(k.name)));
      }
      class_of_[i] = it->second;
      if (k.counters < 0) continue;
      const CounterVerdict v = read_counters(p_.counters[static_cast<std::size_t>(k.counters)]);
      if (v.tensor_cores == TensorCores::unknown || v.tensor_cores == classes_[it->second].tensor_cores) continue;
      KernelClass c = classes_[it->second];
      c.tensor_cores = v.tensor_cores;
      c.why += std::string(c.why.empty() ? "" : "; ") + "Nsight Compute's tensor-pipe counters: tensor cores " +
               tensor_cores_name(v.tensor_cores);
      class_of_[i] = static_cast<std::uint32_t>(classes_.size());
      classes_.push_back(std::move(c));
    }
  }
  const KernelClass& cls(std::size_t kernel) const { return classes_[class_of_[kernel]]; }

  // A multiplying kernel whose name carries no type (Triton's and Inductor's triton_tem_*,
  // a user's own kernel): its operands' precision is its launching op's recorded input
  // type, where the profile recorded one and the op's floating inputs agree (Inductor
  // launches each Triton kernel inside a record of its own name, with its tensor
  // arguments' types under record_shapes). Only float16 and bfloat16 are taken: float32
  // operands may be multiplied in TF32 (Triton's default for tl.dot, Inductor's under
  // allow_tf32), which the type does not tell. Tensor cores stay unread: the name does not say.
  void precision_from_launchers() {
    std::map<std::pair<std::uint32_t, DType>, std::uint32_t> made;  // (class, dtype) -> class
    for (std::size_t i = 0; i < p_.kernels.size(); ++i) {
      const pf::Kernel& k = p_.kernels[i];
      const KernelClass& c = cls(i);
      if (k.kind != pf::ActivityKind::kernel || k.op < 0 || !multiplies(c.kind) || c.input != KernelPrecision::unknown)
        continue;
      const pf::Op& launcher = p_.ops[static_cast<std::size_t>(k.op)];
      if (launcher.inputs == 0) continue;
      std::string types;
      const std::optional<DType> d = inputs_dtype(p_.inputs[launcher.inputs], &types);
      if (!d || (*d != DType::f16 && *d != DType::bf16)) continue;
      auto [it, fresh] = made.try_emplace({class_of_[i], *d}, static_cast<std::uint32_t>(classes_.size()));
      if (fresh) {
        KernelClass read = c;
        read.input = precision_of_dtype(*d);
        read.why += std::string(read.why.empty() ? "" : "; ") + "operands " + precision_name(read.input) +
                    " from the launching op's recorded input types (" + types + ")";
        classes_.push_back(std::move(read));
      }
      class_of_[i] = it->second;
    }
  }

  void attribution() {
    const pf::AttributionStats& a = p_.attribution;
    r_.kernels = a.kernels;
    r_.kernel_ns = a.kernel_ns;
    r_.attributed = a.attributed;
    r_.attributed_ns = a.attributed_ns;
    r_.launched_ns = a.launched_ns;
    r_.by_external_id = a.by_external_id;
    r_.no_links = p_.links ? "" : p_.no_links_why;
    if (a.external_id_differs > 0)
      r_.notes.push_back(fmt::format("{} kernels' External id named another op than their launch's time did: the launch "
                                     "time was taken (HTA's rule)",
                                     a.external_id_differs));
    reports::Kernels& k = r_.check;
    k.traced = true;
    for (const pf::Kernel& g : p_.kernels) {
      (g.kind == pf::ActivityKind::kernel ? k.kernels : g.kind == pf::ActivityKind::memcpy ? k.memcpys : k.memsets)++;
      (g.op >= 0 ? k.attributed : k.unattributed)++;
    }
    // The kernels no op can be named for, by reason, each with its largest.
    std::map<pf::NoOp, std::map<std::uint32_t, std::int64_t>> by_reason;
    for (const pf::Kernel& g : p_.kernels)
      if (g.kind == pf::ActivityKind::kernel && g.op < 0) by_reason[g.no_op][g.name] += g.duration_ns;
    for (const pf::NoOp reason : {pf::NoOp::no_launch, pf::NoOp::outside_ops, pf::NoOp::no_links}) {
      const auto it = by_reason.find(reason);
      if (it == by_reason.end()) continue;
      reports::Unattributable u;
      u.reason = pf::no_op_name(reason);
      std::vector<std::pair<std::int64_t, std::uint32_t>> top;
      for (const auto& [name, t] : it->second) top.emplace_back(t, name);
      std::stable_sort(top.begin(), top.end(), [&](const auto& x, const auto& y) {
        return x.first != y.first ? x.first > y.first : p_.str(x.second) < p_.str(y.second);
      });
      for (const pf::Kernel& g : p_.kernels)
        if (g.kind == pf::ActivityKind::kernel && g.op < 0 && g.no_op == reason) {
          u.kernels += g.instances;
          u.ns += g.duration_ns;
        }
      for (std::size_t i = 0; i < top.size() && i < 5; ++i)
        u.top.push_back(kernel_label(p_.str(top[i].second)) + ": " + ms(top[i].first));
      if (reason != pf::NoOp::no_links) {
        for (std::size_t i = 0; i < top.size() && k.outside.size() < 20; ++i) {
          std::int64_t launches = 0;
          for (const pf::Kernel& g : p_.kernels)
            if (g.kind == pf::ActivityKind::kernel && g.op < 0 && g.no_op == reason && g.name == top[i].second)
              launches += g.instances;
          k.outside.push_back({p_.str(top[i].second), u.reason, launches, top[i].first,
                               kind_name(classify_kernel_name(p_.str(top[i].second)).kind)});
        }
      }
      r_.unattributable.push_back(std::move(u));
    }
  }

  // The op a kernel's launcher is read as: the launcher; where it launched a multiplying
  // kernel and the lists do not know it (aten::_scaled_mm under aten::linear), the nearest
  // op around it that they know. A cast's copy kernel under aten::linear stays a copy.
  const FrameworkOp* framework_of(std::int32_t op, bool multiplies_matrices_here, std::int32_t& mapped_op,
                                  std::optional<Op>& engine_op) const {
    engine_op.reset();
    mapped_op = -1;
    for (std::int32_t o = op; o >= 0; o = multiplies_matrices_here ? p_.ops[static_cast<std::size_t>(o)].parent : -1) {
      const pf::Op& x = p_.ops[static_cast<std::size_t>(o)];
      if (x.kind == pf::OpKind::step || x.kind == pf::OpKind::module) break;
      const std::string& name = p_.str(x.name);
      if (const FrameworkOp* f = find_framework_op(name)) {
        mapped_op = o;
        engine_op = f->op;
        return f;
      }
      const FrameworkOp* paddle = name.starts_with("aten::") ? nullptr : find_framework_op(bare(name));
      if (const FrameworkOp* f = paddle) {  // Paddle's "matmul_v2_grad"
        mapped_op = o;
        engine_op = f->op;
        return f;
      }
      if (o == op) {
        if (const auto e = framework_op(name)) {
          mapped_op = o;
          engine_op = e;
          return nullptr;
        }
      }
    }
    return nullptr;
  }

  void build_instances(bool kernels_only) {
    // The calls that launched GPU work, in time order, and their kernels.
    std::map<std::int32_t, std::vector<std::size_t>> calls;
    for (std::size_t i = 0; i < p_.kernels.size(); ++i)
      if (p_.kernels[i].kind == pf::ActivityKind::kernel && p_.kernels[i].op >= 0)
        calls[p_.kernels[i].op].push_back(i);
    if (kernels_only) {
      // No op on record: one pseudo-instance per kernel name.
      std::map<std::uint32_t, std::size_t> by_name;
      for (std::size_t i = 0; i < p_.kernels.size(); ++i) {
        const pf::Kernel& k = p_.kernels[i];
        if (k.kind != pf::ActivityKind::kernel) continue;
        auto [it, fresh] = by_name.try_emplace(k.name, instances_.size());
        if (fresh) {
          Instance& in = instances_.emplace_back();
          in.name = kernel_label(p_.str(k.name));
          in.type = "(kernel)";
          in.work_known = false;
        }
        add_kernel(instances_[it->second], i);
        instances_[it->second].calls += k.instances;
      }
      return;
    }
    struct Call {
      std::int64_t step_begin;
      std::int64_t begin;
      std::uint32_t thread;
      std::int32_t op;
    };
    // The profiler's step ranges (ProfilerStep#N) are on the main thread; the autograd
    // engine's thread runs inside their time: a call's step is the one whose time holds it.
    std::vector<std::pair<std::int64_t, std::int64_t>> steps;
    for (const pf::Op& o : p_.ops)
      if (o.kind == pf::OpKind::step) steps.emplace_back(o.begin_ns, o.end_ns);
    std::sort(steps.begin(), steps.end());
    auto step_of = [&](std::int64_t ns) -> std::int64_t {
      auto it = std::upper_bound(steps.begin(), steps.end(), std::pair{ns, INT64_MAX});
      if (it == steps.begin()) return -1;
      --it;
      return ns <= it->second ? it->first : -1;
    };
    std::vector<Call> order;
    for (const auto& [op, ks] : calls) {
      const pf::Op& x = p_.ops[static_cast<std::size_t>(op)];
      order.push_back({step_of(x.begin_ns), x.begin_ns, x.thread, op});
    }
    std::stable_sort(order.begin(), order.end(), [](const Call& a, const Call& b) {
      return std::tie(a.step_begin, a.begin, a.thread, a.op) < std::tie(b.step_begin, b.begin, b.thread, b.op);
    });
    // Occurrence within its step of each (module, op, phase): the op instance, as `run` keys them.
    std::map<std::tuple<std::int64_t, std::uint32_t, std::uint32_t, pf::Phase>, std::int64_t> seen;
    std::map<std::tuple<std::uint32_t, std::uint32_t, pf::Phase, std::int64_t>, std::size_t> index;
    for (const Call& c : order) {
      const pf::Op& x = p_.ops[static_cast<std::size_t>(c.op)];
      const std::int64_t k = seen[{c.step_begin, x.module, x.name, x.phase}]++;
      auto [it, fresh] = index.try_emplace({x.module, x.name, x.phase, k}, instances_.size());
      if (fresh) {
        Instance& in = instances_.emplace_back();
        in.type = p_.str(x.name);
        in.module = p_.str(x.module);
        in.phase = x.phase;
        in.name = (in.module.empty() ? "" : in.module + "/") + in.type + "#" + std::to_string(k) + phase_label(x.phase);
      }
      Instance& in = instances_[it->second];
      ++in.calls;
      std::int32_t mapped = -1;
      std::optional<Op> eop;
      bool multiplying = false;
      for (const std::size_t ki : calls[c.op]) multiplying = multiplying || multiplies(cls(ki).kind);
      const FrameworkOp* f = framework_of(c.op, multiplying, mapped, eop);
      in.framework = f;
      in.op = eop;
      in.inputs = x.inputs;
      if (mapped >= 0) in.shape_op_inputs = p_.ops[static_cast<std::size_t>(mapped)].inputs;
      if (f != nullptr && in.shape_op_inputs != 0) {
        in.last = call_shapes(*f, p_.inputs[in.shape_op_inputs]);
        if (in.last.work > 0) in.work += in.last.work;
        else in.work_known = false;
      } else {
        in.work_known = false;
      }
      for (const std::size_t ki : calls[c.op]) add_kernel(in, ki);
    }
  }

  void add_kernel(Instance& in, std::size_t i) {
    const pf::Kernel& k = p_.kernels[i];
    const KernelClass& c = cls(i);
    in.launches += k.instances;
    in.total_ns += k.duration_ns;
    if (multiplies(c.kind)) {
      in.shares.add(c, k.duration_ns);
      in.matrix_ns += k.duration_ns;
    }
    auto [it, fresh] = in.kernels.try_emplace({k.name, k.grid.x, k.grid.y, k.grid.z, k.block.x, k.block.y, k.block.z});
    reports::GpuKernel& g = it->second;
    const std::int64_t each = k.instances > 0 ? k.duration_ns / k.instances : k.duration_ns;
    if (fresh) {
      g.name = p_.str(k.name);
      if (k.grid.known()) g.grid = {k.grid.x, k.grid.y, k.grid.z};
      if (k.block.known()) g.block = {k.block.x, k.block.y, k.block.z};
      g.min_ns = each;
      g.max_ns = each;
      g.input = precision_name(c.input);
      g.accumulate = precision_name(c.accumulate);
      g.tensor_cores = tensor_cores_name(c.tensor_cores);
      g.kind = kind_name(c.kind);
    }
    g.launches += k.instances;
    g.total_ns += k.duration_ns;
    g.min_ns = std::min(g.min_ns, each);
    g.max_ns = std::max(g.max_ns, each);
    CheckedKernel& ck = in.checked[k.name];
    if (ck.name.empty()) {
      ck.name = p_.str(k.name);
      ck.cls = c;
    }
    ck.launches += k.instances;
    ck.total_ns += static_cast<std::uint64_t>(k.duration_ns);
  }

  // auto: the low-precision dtype the profile's matrix work mostly took.
  void decide_expectation() {
    expect_ = o_.expect;
    if (!expect_.automatic) {
      r_.expect = expect_.name;
      return;
    }
    std::int64_t f16 = 0, bf16 = 0, all = 0;
    for (std::size_t i = 0; i < p_.kernels.size(); ++i) {
      const KernelClass& c = cls(i);
      if (p_.kernels[i].kind != pf::ActivityKind::kernel || !multiplies(c.kind)) continue;
      all += p_.kernels[i].duration_ns;
      if (c.input == KernelPrecision::f16) f16 += p_.kernels[i].duration_ns;
      if (c.input == KernelPrecision::bf16) bf16 += p_.kernels[i].duration_ns;
    }
    if (f16 + bf16 == 0) {
      auto_off_ = true;
      r_.expect = "none";
      r_.expect_note = "auto: none of the matrix work ran in float16 or bfloat16, so no AMP policy is assumed";
      return;
    }
    expect_.dtype = bf16 > f16 ? DType::bf16 : DType::f16;
    expect_.name = bf16 > f16 ? "autocast-bf16" : "autocast-fp16";
    r_.expect = expect_.name;
    r_.expect_note = fmt::format("auto: {} of the matrix work took {} ({} of {}): checked against {} (give --expect to "
                                 "choose)",
                                 percent(std::max(f16, bf16), all), bf16 > f16 ? "bfloat16" : "float16",
                                 ms(std::max(f16, bf16)), ms(all), expect_.name);
  }

  std::optional<DType> expected_of(const Instance& in, amp::Reason& reason, bool kernels_only) const {
    if (auto_off_) return std::nullopt;
    if (expect_.fp32) {
      reason = amp::Reason::off;
      return DType::f32;
    }
    if (kernels_only) {  // every GEMM, convolution and attention is on the policy's low list
      reason = amp::Reason::white;
      return expect_.dtype;
    }
    if (!in.op) return std::nullopt;
    const amp::Policy policy(amp::AmpOptions{expect_.level, expect_.dtype, {}, {}, {}, true, true});
    reason = policy.reason(*in.op);
    return policy.cast_target(*in.op);
  }

  void check(bool kernels_only) {
    std::vector<CheckedInstance> checked;
    expected_.resize(instances_.size());
    for (std::size_t i = 0; i < instances_.size(); ++i) {
      const Instance& in = instances_[i];
      CheckedInstance c;
      c.name = in.name;
      c.type = in.type;
      c.op = in.op.value_or(Op::matmul);
      c.phase = engine_phase(in.phase);
      c.module = in.module;
      c.intended = true;
      amp::Reason reason = amp::Reason::off;
      c.expected = expected_of(in, reason, kernels_only);
      c.reason = reason;
      if (!kernels_only && !in.op) c.expected.reset();
      expected_[i] = c.expected;
      if (in.framework != nullptr && in.framework->dims != Dims::attention) c.shapes = in.last.shapes;
      if (in.shape_op_inputs != 0) {
        std::string text;
        c.recorded_inputs = inputs_dtype(p_.inputs[in.shape_op_inputs], &text);
        c.recorded_types = text;
      }
      for (const auto& [name, k] : in.checked) c.kernels.push_back(k);
      checked.push_back(std::move(c));
    }
    check_ = check_kernels(checked);
    r_.check.instances_checked = check_.instances_checked;
    r_.check.kernels_unread = check_.kernels_unread;
    for (const KernelFinding& f : check_.findings) {
      r_.check.findings.push_back({severity_name(f.severity), kernel_problem_name(f.problem), f.instance, f.type,
                                   f.module, std::string(phase_name(f.phase)), dtype_word(f.expected), f.kernel,
                                   precision_name(f.cls.input), precision_name(f.cls.accumulate),
                                   tensor_cores_name(f.cls.tensor_cores), f.launches, f.reason, f.text()});
      if (f.severity == Severity::warning) fallback_names_.insert(f.instance);
    }
  }

  std::string policy_text(const Instance& in, const std::optional<DType>& expected) const {
    if (!in.op) return {};
    if (expect_.fp32 || auto_off_) return std::string(op_name(*in.op));
    const amp::Policy policy(amp::AmpOptions{expect_.level, expect_.dtype, {}, {}, {}, true, true});
    return std::string(op_name(*in.op)) + ": " + std::string(amp::reason_name(policy.reason(*in.op))) +
           (expected ? "" : " (follows its inputs)");
  }

  reports::ProfileOp row(const Instance& in, std::size_t i, bool instance) const {
    reports::ProfileOp o;
    o.name = instance ? in.name : in.type + phase_label(in.phase);
    o.type = in.type;
    o.phase = pf::phase_name(in.phase);
    o.module = instance ? in.module : "";
    o.policy = policy_text(in, expected_[i]);
    o.expected = expected_[i] ? dtype_word(*expected_[i]) : "";
    o.calls = in.calls;
    o.launches = in.launches;
    o.total_ns = in.total_ns;
    o.matrix_ns = in.matrix_ns;
    o.shares = in.shares.rows();
    o.flops = in.work_known ? 2 * in.work : 0;
    if (instance) {
      const std::uint32_t inputs = in.shape_op_inputs != 0 ? in.shape_op_inputs : in.inputs;
      if (inputs != 0) {
        o.input_dims = p_.inputs[inputs].dims;
        o.input_types = p_.inputs[inputs].types;
      }
      for (const auto& [key, g] : in.kernels) o.kernels.push_back(g);
      std::sort(o.kernels.begin(), o.kernels.end(), [](const reports::GpuKernel& a, const reports::GpuKernel& b) {
        return std::tie(a.name, a.grid, a.block) < std::tie(b.name, b.grid, b.block);
      });
    }
    return o;
  }

  void tables() {
    Shares all;
    std::map<std::pair<std::string, pf::Phase>, std::pair<reports::ProfileOp, Shares>> types;
    for (std::size_t i = 0; i < instances_.size(); ++i) {
      const Instance& in = instances_[i];
      r_.instances.push_back(row(in, i, true));
      auto [it, fresh] = types.try_emplace({in.type, in.phase});
      reports::ProfileOp& t = it->second.first;
      if (fresh) {
        t = row(in, i, false);
        it->second.second = in.shares;
      } else {
        t.calls += in.calls;
        t.launches += in.launches;
        t.total_ns += in.total_ns;
        t.matrix_ns += in.matrix_ns;
        t.flops = (t.flops > 0 && in.work_known) ? t.flops + 2 * in.work : 0;
        for (const auto& [key, ns] : in.shares.ns) it->second.second.ns[key] += ns;
      }
    }
    for (auto& [key, t] : types) {
      t.first.shares = t.second.rows();
      r_.types.push_back(std::move(t.first));
    }
    for (std::size_t i = 0; i < p_.kernels.size(); ++i) {
      if (p_.kernels[i].kind != pf::ActivityKind::kernel || !multiplies(cls(i).kind)) continue;
      all.add(cls(i), p_.kernels[i].duration_ns);
      r_.matrix_ns += p_.kernels[i].duration_ns;
    }
    r_.shares = all.rows();
    auto by_time = [](const reports::ProfileOp& a, const reports::ProfileOp& b) {
      return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
    };
    std::stable_sort(r_.types.begin(), r_.types.end(), by_time);
    std::stable_sort(r_.instances.begin(), r_.instances.end(), by_time);
    // The run report's per-type rows, for the shared kernels section.
    for (const reports::ProfileOp& t : r_.types) {
      reports::KernelTypeRow k;
      k.type = t.name;
      k.launches = t.launches;
      k.total_ns = t.total_ns;
      for (std::size_t i = 0; i < instances_.size(); ++i) {
        const Instance& in = instances_[i];
        if (in.type + phase_label(in.phase) != t.name) continue;
        for (const auto& [name, ck] : in.checked) {
          if (!multiplies_matrices(ck.cls.kind)) continue;
          k.matrix_ns += static_cast<std::int64_t>(ck.total_ns);
          if (ck.cls.tensor_cores == TensorCores::yes) k.tensor_core_ns += static_cast<std::int64_t>(ck.total_ns);
          if (ck.cls.tensor_cores == TensorCores::no) k.cuda_core_ns += static_cast<std::int64_t>(ck.total_ns);
        }
      }
      r_.check.by_type.push_back(k);
    }
  }

  // The tensor-core rate each op type measured in this profile (aten::mm's, aten::addmm's),
  // and what each fallback would take at its op's rate; where its op never ran clean, at
  // the rate of all the clean GEMM and convolution work (attention is its own kind of work
  // and never stands in for a GEMM).
  void costs() {
    if (expect_.fp32 || auto_off_) return;
    const KernelPrecision want = precision_of_dtype(expect_.dtype);
    std::map<std::string, std::pair<double, std::int64_t>> per_type;  // FLOPs, ns
    double all_flops = 0;
    std::int64_t all_ns = 0;
    auto attention = [](const Instance& in) { return in.framework != nullptr && in.framework->dims == Dims::attention; };
    for (const Instance& in : instances_) {
      if (!in.op || !in.work_known || in.work <= 0 || fallback_names_.count(in.name)) continue;
      bool clean = in.matrix_ns > 0;
      for (const auto& [name, ck] : in.checked)
        if (multiplies(ck.cls.kind) && !(ck.cls.input == want && ck.cls.tensor_cores == TensorCores::yes)) clean = false;
      if (!clean) continue;
      per_type[in.type].first += 2 * in.work;
      per_type[in.type].second += in.matrix_ns;
      if (attention(in)) continue;
      all_flops += 2 * in.work;
      all_ns += in.matrix_ns;
    }
    std::int64_t estimated = 0;
    bool any = false;
    std::int64_t not_estimated = 0;
    for (const Instance& in : instances_) {
      if (!fallback_names_.count(in.name)) continue;
      reports::FallbackCost c;
      c.op = in.name;
      c.gpu_ns = in.total_ns;
      c.flops = in.work_known ? 2 * in.work : 0;
      r_.fallback_ns += in.total_ns;
      double flops_per_ns = 0;
      std::string basis;
      if (const auto it = per_type.find(in.type); it != per_type.end() && it->second.second > 0) {
        flops_per_ns = it->second.first / static_cast<double>(it->second.second);
        basis = in.type;
      } else if (all_ns > 0 && !attention(in)) {
        flops_per_ns = all_flops / static_cast<double>(all_ns);
        basis = "all its GEMM and convolution work";
      }
      if (c.flops > 0 && flops_per_ns > 0) {
        c.at_rate_ns = static_cast<std::int64_t>(std::llround(c.flops / flops_per_ns));
        c.rate = fmt::format("{:.1f} TFLOP/s, measured on {} in {} on tensor cores in this profile",
                             flops_per_ns * 1e-3, basis, precision_name(want));
        estimated += c.at_rate_ns;
        any = true;
      } else {
        ++not_estimated;
      }
      r_.fallbacks.push_back(std::move(c));
    }
    std::stable_sort(r_.fallbacks.begin(), r_.fallbacks.end(), [](const reports::FallbackCost& a, const reports::FallbackCost& b) {
      return a.gpu_ns != b.gpu_ns ? a.gpu_ns > b.gpu_ns : a.op < b.op;
    });
    if (r_.fallbacks.empty()) return;
    if (any) r_.fallback_at_rate_ns = estimated;
    r_.cost_text = fmt::format("AMP fallbacks: {} of {} GPU time", ms(r_.fallback_ns), ms(r_.kernel_ns));
    if (any)
      r_.cost_text += fmt::format("; at this profile's {} tensor-core rate ~{}", precision_name(want), ms(estimated));
    if (not_estimated > 0)
      r_.cost_text += fmt::format(" ({} of {} not estimated: no shapes recorded, or no tensor-core rate to compare with)",
                                  not_estimated, r_.fallbacks.size());
  }

  void counters() {
    std::set<std::uint32_t> done;
    for (std::size_t i = 0; i < p_.kernels.size(); ++i) {
      const pf::Kernel& k = p_.kernels[i];
      if (k.counters < 0 || !done.insert(k.name).second) continue;
      const CounterVerdict v = read_counters(p_.counters[static_cast<std::size_t>(k.counters)]);
      if (v.tensor_cores == TensorCores::unknown) continue;
      const KernelClass named = classify_kernel_name(p_.str(k.name));
      // The counters judge matrix kernels (and what the name says runs on tensor cores):
      // Hopper's tensor-pipe counters are not zero in kernels that multiply no matrix
      // (measured on an H200: batch norm, pooling, softmax, fp16 copies and reductions
      // show HMMA-pipe instructions), so they cannot overrule a name that says elementwise.
      const bool matrix = named.tensor_cores == TensorCores::yes || named.kind == KernelKind::gemm ||
                          named.kind == KernelKind::gemv || named.kind == KernelKind::conv_fprop ||
                          named.kind == KernelKind::conv_dgrad || named.kind == KernelKind::conv_wgrad ||
                          named.kind == KernelKind::conv || named.kind == KernelKind::attention;
      reports::CounterCheck c;
      c.kernel = p_.str(k.name);
      c.name_tensor_cores = tensor_cores_name(named.tensor_cores);
      c.counters_tensor_cores = tensor_cores_name(v.tensor_cores);
      c.name_precision = precision_name(named.input);
      c.counters_precision = v.precision;
      c.metrics = v.metrics;
      const bool tc_agrees = named.tensor_cores == TensorCores::unknown || named.tensor_cores == v.tensor_cores ||
                             (!matrix && named.tensor_cores == TensorCores::no);
      const bool precision_agrees = v.precision.empty() || named.input == KernelPrecision::unknown ||
                                    v.precision == precision_name(named.input);
      c.agrees = tc_agrees && precision_agrees;
      r_.counter_disagreements += !c.agrees;
      r_.counters.push_back(std::move(c));
    }
  }

  void verdict(bool kernels_only) {
    std::int64_t low = 0, low_tc = 0;
    for (const reports::PrecisionShare& s : r_.shares) {
      if (s.precision == "f16" || s.precision == "bf16" || s.precision == "fp8" || s.precision == "fp4") {
        low += s.ns;
        if (s.tensor_cores == "yes") low_tc += s.ns;
      }
    }
    auto wide = [&] {
      std::string parts;
      for (const reports::PrecisionShare& s : r_.shares)
        if (!(s.precision == "f16" || s.precision == "bf16" || s.precision == "fp8" || s.precision == "fp4"))
          parts += (parts.empty() ? "" : ", ") +
                   (s.precision == "unknown" ? std::string("kernels whose names do not say their precision")
                                             : s.precision + (s.tensor_cores == "yes"  ? " on tensor cores"
                                                              : s.tensor_cores == "no" ? " on CUDA cores"
                                                                                       : " (tensor cores not read)")) +
                   " " + ms(s.ns);
      return parts;
    };
    // Ops whose kernels took wider operands than the policy's but whose input types the
    // profile did not record: said, and not judged.
    std::int64_t unseen = 0;
    for (const KernelFinding& f : check_.findings) unseen += f.inputs_unseen;
    const std::string unseen_text =
        unseen == 0 ? std::string()
                    : fmt::format("; {} finding(s) on ops whose input types were not recorded (record_shapes=True "
                                  "records them): what their kernels took is listed, no fallback is claimed",
                                  unseen);
    const std::int64_t warnings = r_.check.warnings();
    const std::string scope = kernels_only ? " (kernel names only: " +
                                                 (p_.links ? std::string("the profile records no ops") : r_.no_links) + ")"
                                           : "";
    if (r_.matrix_ns == 0) {
      r_.verdict = "no_matrix_work";
      r_.verdict_text = "no GEMM, convolution or attention kernel in the profile: nothing for AMP to speed up" + scope;
    } else if (expect_.fp32) {
      // Every matrix kernel that took fewer bits than float32, by time: TF32's are named.
      std::map<std::string, std::int64_t> narrower;  // precision -> ns
      std::map<std::uint32_t, std::int64_t> tf32_kernels;
      for (std::size_t i = 0; i < p_.kernels.size(); ++i) {
        const KernelClass& c = cls(i);
        if (p_.kernels[i].kind != pf::ActivityKind::kernel || !multiplies(c.kind)) continue;
        if (c.input == KernelPrecision::f32 || c.input == KernelPrecision::f64 || c.input == KernelPrecision::unknown)
          continue;
        narrower[precision_name(c.input)] += p_.kernels[i].duration_ns;
        if (c.input == KernelPrecision::tf32) tf32_kernels[p_.kernels[i].name] += p_.kernels[i].duration_ns;
      }
      std::int64_t fewer = 0;
      std::string parts;
      for (const auto& [precision, ns] : narrower) {
        fewer += ns;
        parts += (parts.empty() ? "" : ", ") + precision + " " + percent(ns, r_.matrix_ns);
      }
      if (fewer > 0 || warnings > 0) {
        std::vector<std::pair<std::int64_t, std::uint32_t>> top;
        for (const auto& [name, ns] : tf32_kernels) top.emplace_back(ns, name);
        std::stable_sort(top.begin(), top.end(), [&](const auto& a, const auto& b) {
          return a.first != b.first ? a.first > b.first : p_.str(a.second) < p_.str(b.second);
        });
        std::string named;
        for (std::size_t i = 0; i < top.size() && i < 3; ++i)
          named += (named.empty() ? "" : ", ") + kernel_label(p_.str(top[i].second)) + " " + ms(top[i].first);
        if (top.size() > 3) named += fmt::format(" and {} more", top.size() - 3);
        r_.verdict = "not_fp32";
        r_.verdict_text = fmt::format(
            "NOT float32 as expected: {} of the {} matrix work took fewer bits ({}){}; {} finding(s){}", ms(fewer),
            ms(r_.matrix_ns), parts.empty() ? std::string("see the findings") : parts,
            named.empty() ? std::string()
                          : "; TF32 (10 mantissa bits of each float32 input; torch.backends.cuda.matmul.allow_tf32 / "
                            "torch.backends.cudnn.allow_tf32) in " + named,
            warnings, scope);
      } else {
        r_.verdict = "fp32";
        r_.verdict_text = "float32 as expected: AMP is off" + scope;
      }
    } else if (low == 0) {
      r_.verdict = "amp_off";
      r_.verdict_text = fmt::format("AMP is NOT on: none of the {} of GEMM/convolution/attention time ran in float16 or "
                                    "bfloat16 ({}){}",
                                    ms(r_.matrix_ns), wide(), scope);
    } else if (warnings > 0) {
      r_.verdict = "fallbacks";
      r_.verdict_text = fmt::format("AMP is on with {} fallback(s): {} of the matrix work in fp16/bf16/fp8 on tensor "
                                    "cores; {}{}",
                                    warnings, percent(low_tc, r_.matrix_ns), r_.cost_text + unseen_text, scope);
    } else {
      r_.verdict = "amp_on";
      r_.verdict_text = fmt::format("AMP is on: {} of the {} matrix work ran in fp16/bf16/fp8 on tensor cores; {}{}",
                                    percent(low_tc, r_.matrix_ns), ms(r_.matrix_ns),
                                    unseen == 0 ? std::string("no fallback") : unseen_text.substr(2), scope);
    }
  }

  const pf::Profile& p_;
  const ProfileCheckOptions& o_;
  Expectation expect_;
  bool auto_off_ = false;
  std::vector<KernelClass> classes_;   // per name (and per counter override)
  std::vector<std::uint32_t> class_of_;  // per kernel
  std::vector<Instance> instances_;
  std::vector<std::optional<DType>> expected_;
  KernelCheck check_;
  std::set<std::string> fallback_names_;
  reports::ProfileRank r_;
};

// The dominant precision x tensor-core bucket of a row: "bf16 on tensor cores".
std::string dominant(const reports::ProfileOp& t) {
  if (t.shares.empty()) return "no matrix work";
  const reports::PrecisionShare& s = t.shares.front();
  return s.precision + (s.tensor_cores == "yes" ? " on tensor cores" : s.tensor_cores == "no" ? " on CUDA cores" : "");
}

int verdict_rank(const std::string& v) {
  if (v == "amp_off" || v == "not_fp32") return 3;
  if (v == "fallbacks") return 2;
  if (v == "no_matrix_work") return 0;
  return 1;
}

}  // namespace

Expectation parse_expectation(std::string_view text) {
  Expectation e;
  e.name = std::string(text);
  e.automatic = false;
  if (text == "auto") {
    e.automatic = true;
  } else if (text == "autocast-fp16" || text == "paddle-O1") {
    e.dtype = DType::f16;
  } else if (text == "autocast-bf16") {
    e.dtype = DType::bf16;
  } else if (text == "paddle-O2") {
    e.level = amp::Level::O2;
    e.dtype = DType::f16;
  } else if (text == "fp32") {
    e.fp32 = true;
  } else {
    throw std::invalid_argument("--expect \"" + std::string(text) + "\" is not a policy; give one of " +
                                expectation_choices());
  }
  return e;
}

std::string expectation_choices() { return "auto, autocast-fp16, autocast-bf16, paddle-O1, paddle-O2, fp32"; }

std::optional<Op> framework_op(std::string_view name) {
  if (const FrameworkOp* f = find_framework_op(name)) return f->op;
  const std::string b = bare(name);
  // The table's bare names are Paddle's ("mul" is its matrix product); aten's go by ampcheck's.
  if (!name.starts_with("aten::"))
    if (const FrameworkOp* f = find_framework_op(b)) return f->op;
  if (b.empty() || b.find("::") != std::string::npos) return std::nullopt;
  try {
    return amp::resolve_op_name(b, "op");
  } catch (const amp::PolicyError&) {
    return std::nullopt;
  }
}

std::optional<DType> recorded_dtype(std::string_view t) {
  if (t == "float" || t == "float32") return DType::f32;
  if (t == "c10::Half" || t == "float16" || t == "half") return DType::f16;
  if (t == "c10::BFloat16" || t == "bfloat16") return DType::bf16;
  if (t == "double" || t == "float64") return DType::f64;
  return std::nullopt;
}

reports::ProfileRank check_profile(const profiles::Profile& profile, const ProfileCheckOptions& options) {
  return Checker(profile, options).run();
}

reports::KernelsReport check_profiles(const std::vector<profiles::Profile>& profiles,
                                      const ProfileCheckOptions& options, const std::string& path) {
  reports::KernelsReport r;
  r.profile = path;
  r.expect = options.expect.name;
  for (const profiles::Profile& p : profiles) r.ranks.push_back(check_profile(p, options));
  if (r.ranks.empty()) return r;
  // The worst rank speaks for the run.
  const reports::ProfileRank* worst = &r.ranks.front();
  for (const reports::ProfileRank& rank : r.ranks)
    if (verdict_rank(rank.verdict) > verdict_rank(worst->verdict)) worst = &rank;
  r.verdict = worst->verdict;
  r.verdict_text = r.ranks.size() == 1 ? worst->verdict_text
                                       : fmt::format("{} ({} profiles; the worst: {})", worst->verdict_text,
                                                     r.ranks.size(), worst->source);
  if (r.ranks.size() < 2) return r;
  // What differs between ranks: each op type's dominant precision, the verdicts, the
  // findings and the GPU time.
  auto per_rank = [&](auto text) {
    std::vector<std::string> out;
    for (const reports::ProfileRank& rank : r.ranks) out.push_back(text(rank));
    return out;
  };
  auto differ = [](const std::vector<std::string>& v) {
    return std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) != v.end();
  };
  if (const auto v = per_rank([](const reports::ProfileRank& x) { return x.verdict; }); differ(v))
    r.differences.push_back({"verdict", v});
  if (const auto v = per_rank([](const reports::ProfileRank& x) { return std::to_string(x.check.warnings()) + " warning(s)"; });
      differ(v))
    r.differences.push_back({"kernel check", v});
  std::set<std::string> types;
  for (const reports::ProfileRank& rank : r.ranks)
    for (const reports::ProfileOp& t : rank.types)
      if (t.matrix_ns > 0) types.insert(t.name);
  for (const std::string& type : types) {
    const auto v = per_rank([&](const reports::ProfileRank& x) {
      for (const reports::ProfileOp& t : x.types)
        if (t.name == type) return dominant(t);
      return std::string("not run");
    });
    if (differ(v)) r.differences.push_back({type, v});
  }
  std::int64_t lo = INT64_MAX, hi = 0;
  for (const reports::ProfileRank& rank : r.ranks) {
    lo = std::min(lo, rank.kernel_ns);
    hi = std::max(hi, rank.kernel_ns);
  }
  // Ranks of one data-parallel step do the same work: more than a tenth apart is a straggler.
  if (lo > 0 && static_cast<double>(hi) > 1.1 * static_cast<double>(lo))
    r.differences.push_back({"GPU kernel time (more than 10% apart)", per_rank([](const reports::ProfileRank& x) {
                               return ms(x.kernel_ns);
                             })});
  return r;
}

std::size_t join_counters(profiles::Profile& timeline, const profiles::Profile& ncu) {
  std::unordered_map<std::string, std::int32_t> by_key;
  for (const profiles::Kernel& k : ncu.kernels)
    if (k.counters >= 0) by_key.try_emplace(profiles::kernel_name_key(ncu.str(k.name)), k.counters);
  std::unordered_map<std::uint32_t, std::int32_t> by_name;  // timeline name -> its counters in `timeline`
  std::size_t joined = 0;
  for (profiles::Kernel& k : timeline.kernels) {
    if (k.kind != profiles::ActivityKind::kernel) continue;
    auto it = by_name.find(k.name);
    if (it == by_name.end()) {
      std::int32_t index = -1;
      if (const auto m = by_key.find(profiles::kernel_name_key(timeline.str(k.name))); m != by_key.end()) {
        index = static_cast<std::int32_t>(timeline.counters.size());
        timeline.counters.push_back(ncu.counters[static_cast<std::size_t>(m->second)]);
      }
      it = by_name.emplace(k.name, index).first;
    }
    if (it->second >= 0) {
      k.counters = it->second;
      ++joined;
    }
  }
  return joined;
}

}  // namespace ampcheck::inspector
