#include "cli/ops_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>

#include "cli/run_options.h"
#include "cli/usage_error.h"
#include "engine/amp/config.h"
#include "engine/amp/policy.h"
#include "engine/dtype/dtype.h"
#include "engine/ops/registry.h"
#include "reports/text_table.h"
#include "models/model_file.h"
#include "models/onnx_file.h"
#include "models/onnx_model.h"

namespace ampcheck::cli {
namespace {

using nlohmann::ordered_json;

// How a model feeds each input of an op: activations, parameters (which decorate makes
// low precision at O2/O3, normalisation layers' excepted when keep_norm_fp32), or
// integer labels, indices and masks, which no policy casts.
enum class Input { activation, parameter, integer };

std::vector<Input> inputs_of(Op op) {
  using enum Input;
  switch (op) {
    case Op::linear:
    case Op::fp8_linear:
    case Op::conv2d:
    case Op::layer_norm: return {activation, parameter, parameter};  // x, weight, bias
    case Op::batch_norm: return {activation, parameter, parameter, parameter, parameter};  // + running stats
    case Op::embedding: return {integer, parameter};         // indices, weight
    case Op::cross_entropy: return {activation, integer};    // logits, labels
    case Op::masked_fill: return {activation, integer};      // x, mask
    case Op::where: return {integer, activation, activation};  // condition, a, b
    case Op::scaled_dot_product_attention: return {activation, activation, activation};  // q, k, v
    case Op::lstm: return {activation, parameter, parameter, parameter, parameter, activation, activation};
    case Op::gru:
    case Op::rnn_tanh:
    case Op::rnn_relu: return {activation, parameter, parameter, parameter, parameter, activation};
    default: break;
  }
  const int arity = op_info(op).arity;
  return std::vector<Input>(static_cast<std::size_t>(arity < 0 ? 2 : arity), activation);
}

bool is_norm(Op op) { return op == Op::batch_norm || op == Op::layer_norm; }

// The inputs' dtypes: every float input fp32 (the model's data, O0/O1 parameters), or
// as they arrive inside a low-precision model: activations in the AMP dtype, parameters
// as decorate leaves them at this level.
std::vector<DType> input_dtypes(Op op, const amp::AmpOptions& o, bool low) {
  std::vector<DType> d;
  for (Input in : inputs_of(op)) {
    if (in == Input::integer) {
      d.push_back(DType::i64);
    } else if (!low) {
      d.push_back(DType::f32);
    } else if (in == Input::activation) {
      d.push_back(o.dtype);
    } else {
      const bool decorated = o.level == amp::Level::O3 ||
                             (o.level == amp::Level::O2 && !(is_norm(op) && o.keep_norm_fp32));
      d.push_back(decorated ? o.dtype : DType::f32);
    }
  }
  return d;
}

struct OpRow {
  Op op;
  amp::Reason reason;
  std::optional<DType> cast_to;
  std::optional<DType> from_fp32, from_low;  // nothing: not meaningful (see notes)
  std::vector<std::string_view> aliases;
};

std::vector<OpRow> rows_for(const amp::Policy& policy) {
  const amp::AmpOptions& o = policy.options();
  std::vector<OpRow> rows;
  for (int i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    OpRow r{op, policy.reason(op), policy.cast_target(op), std::nullopt, std::nullopt, amp::op_aliases(op)};
    if (op != Op::cast) {  // a cast's result dtype is its argument, not its input's
      r.from_fp32 = policy.compute_dtype(op, input_dtypes(op, o, false));
      // At O0 no op casts down and no parameter is low: no low-precision input arises.
      if (o.level != amp::Level::O0) r.from_low = policy.compute_dtype(op, input_dtypes(op, o, true));
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string long_name(DType d) { return std::string(info(d).long_name); }
std::string join(const std::vector<std::string_view>& v) {
  std::string s;
  for (std::string_view x : v) s += (s.empty() ? "" : ", ") + std::string(x);
  return s;
}
std::string join(const std::vector<std::string>& v) {
  return join(std::vector<std::string_view>(v.begin(), v.end()));
}

std::string ops_text(const amp::Policy& policy, const std::vector<OpRow>& rows) {
  const amp::AmpOptions& o = policy.options();
  const std::string low = long_name(o.dtype);
  std::string text = fmt::format("AMP {} {}", amp::level_name(o.level), low);
  if (!o.custom_white_list.empty()) text += "; custom white: " + join(o.custom_white_list);
  if (!o.custom_black_list.empty()) text += "; custom black: " + join(o.custom_black_list);
  text += "\n\n";
  reports::TextTable t({"op", "category", "reason", "casts to", "runs in, fp32 inputs",
                        "runs in, " + low + " inputs", "framework names"});
  for (std::size_t c = 0; c < 7; ++c) t.align(c, reports::TextTable::Align::left);
  for (const OpRow& r : rows) {
    auto shown = [](const std::optional<DType>& d) { return d ? long_name(*d) : std::string("-"); };
    t.add_row({std::string(op_name(r.op)), std::string(amp_category_name(op_info(r.op).amp)),
               std::string(amp::reason_name(r.reason)), shown(r.cast_to), shown(r.from_fp32),
               shown(r.from_low), join(r.aliases)});
  }
  text += t.render();
  text += "\ncategory: the op list's AMP slot (engine/ops/op_list.h); reason: why it runs in its dtype\n"
          "at this level with these lists. fp32 inputs: the model's data (and every parameter at\n"
          "O0/O1); " + low + " inputs: activations in " + low +
          ", parameters as decorate leaves them\n"
          "(O2: " + low + " except normalisation layers' with keep_norm_fp32; O3: all " + low + ").\n";
  if (o.level == amp::Level::O0) text += "O0: no op casts down, so no input is ever " + low + ".\n";
  text += "cast: the policy's own tool; its result dtype is its argument.\n";
  return text;
}

std::string snake(std::string_view s) {
  std::string r(s);
  std::replace(r.begin(), r.end(), ' ', '_');
  return r;
}

std::string ops_json(const amp::Policy& policy, const std::vector<OpRow>& rows) {
  const amp::AmpOptions& o = policy.options();
  auto dtype_or_null = [](const std::optional<DType>& d) -> ordered_json {
    if (d) return long_name(*d);
    return nullptr;
  };
  ordered_json ops = ordered_json::array();
  for (const OpRow& r : rows) {
    ops.push_back({{"op", op_name(r.op)},
                   {"category", amp_category_name(op_info(r.op).amp)},
                   {"reason", snake(amp::reason_name(r.reason))},
                   {"cast_to", dtype_or_null(r.cast_to)},
                   {"runs_in_fp32_inputs", dtype_or_null(r.from_fp32)},
                   {"runs_in_low_inputs", dtype_or_null(r.from_low)},
                   {"aliases", r.aliases}});
  }
  const ordered_json doc = {{"ampcheck_ops", 1},
                            {"level", amp::level_name(o.level)},
                            {"dtype", long_name(o.dtype)},
                            {"custom_white_list", o.custom_white_list},
                            {"custom_black_list", o.custom_black_list},
                            {"keep_norm_fp32", o.keep_norm_fp32},
                            {"ops", ops}};
  return doc.dump(2) + "\n";
}

amp::AmpOptions resolve_options(const OpsOptions& opts) {
  return amp_options_of(opts.config, opts.level, opts.dtype, opts.white, opts.black);
}

CLI::App* add_options(CLI::App& app, OpsOptions& o) {
  CLI::App* ops = app.add_subcommand(
      "ops", "Every op, its AMP category, and why and in what dtype it runs at a level");
  ops->add_option("--level,-l", o.level, "AMP level O0, O1, O2 or O3 (default: the config's, else O1)");
  ops->add_option("--dtype,-d", o.dtype,
                  "low-precision dtype: float16 or bfloat16 (default: the config's, else float16)");
  ops->add_option("--config,-c", o.config,
                  "an AMP config (PaddlePaddle, PyTorch, DeepSpeed, Apex or ampcheck keys); "
                  "--level, --dtype, --white and --black apply on top of it");
  ops->add_option("--white", o.white, "ops added to custom_white_list (run low), comma separated")
      ->delimiter(',');
  ops->add_option("--black", o.black, "ops added to custom_black_list (run fp32), comma separated")
      ->delimiter(',');
  ops->add_flag("--json", o.json, "print JSON instead of a table");
  ops->add_flag("--nodes", o.nodes, "list the node kinds of model files (docs/model-format.md) and their fields");
  ops->add_option("--onnx", o.onnx,
                  "an ONNX model: its op types, the ops each runs as and their AMP decisions, before anything runs");
  return ops;
}

// The model file's node kinds; fields marked * are required.
std::string nodes_text() {
  reports::TextTable t({"kind", "fields (* required)", "what it computes"});
  t.align(0, reports::TextTable::Align::left).align(1, reports::TextTable::Align::left).align(2, reports::TextTable::Align::left);
  for (const models::NodeKindInfo& k : models::node_kinds())
    t.add_row({std::string(k.kind), fmt::format("{}", fmt::join(k.fields, ", ")), std::string(k.summary)});
  return t.render();
}

std::string nodes_json() {
  ordered_json kinds = ordered_json::array();
  for (const models::NodeKindInfo& k : models::node_kinds())
    kinds.push_back({{"kind", k.kind}, {"fields", k.fields}, {"summary", k.summary}});
  return ordered_json{{"ampcheck_node_kinds", 1}, {"kinds", kinds}}.dump(2) + "\n";
}

// The model's ONNX op types, each with the registry ops it runs as and their decisions.
int onnx_ops(const OpsOptions& opts, const amp::Policy& policy, std::ostream& out, std::ostream& err) {
  models::onnx_file::Graph g;
  try {
    g = models::onnx_file::load(opts.onnx);
  } catch (const models::ModelFileError& e) {
    throw UsageError(std::string("--onnx: ") + e.what());
  }
  const std::vector<OpRow> rows = rows_for(policy);
  auto row_of = [&](std::string_view name) -> const OpRow* {
    for (const OpRow& r : rows)
      if (op_name(r.op) == name) return &r;
    return nullptr;
  };
  const auto uses = models::onnx_op_uses(g);
  std::int64_t params = 0, unsupported = 0, refused = 0;
  for (const auto& u : uses) refused += static_cast<std::int64_t>(u.refused.size());
  for (const std::string& name : g.initializer_order)
    if (models::initializer_role(g, name) == models::InitializerRole::parameter) params += g.initializers.at(name).numel();
  const amp::AmpOptions& o = policy.options();
  const std::string low = long_name(o.dtype);
  auto shown = [](const std::optional<DType>& d) { return d ? long_name(*d) : std::string("-"); };
  if (opts.json) {
    ordered_json types = ordered_json::array();
    for (const auto& u : uses) {
      ordered_json runs = ordered_json::array();
      if (u.info)
        for (std::string_view op : u.info->runs)
          if (const OpRow* r = row_of(op))
            runs.push_back({{"op", op},
                            {"reason", snake(amp::reason_name(r->reason))},
                            {"runs_in_fp32_inputs", r->from_fp32 ? ordered_json(long_name(*r->from_fp32)) : ordered_json()},
                            {"runs_in_low_inputs", r->from_low ? ordered_json(long_name(*r->from_low)) : ordered_json()}});
      ordered_json refusals = ordered_json::array();
      for (const auto& [node, r] : u.refused)
        refusals.push_back({{"node", node->name}, {"attribute", r.attribute}, {"reason", r.reason}, {"fix", r.fix}});
      types.push_back({{"op_type", u.op_type},
                       {"nodes", u.count},
                       {"supported", u.info != nullptr},
                       {"host", u.info && u.info->runs.empty()},
                       {"runs", runs},
                       {"modules", u.modules},
                       {"refused", refusals}});
      unsupported += u.info ? 0 : 1;
    }
    out << ordered_json{{"ampcheck_onnx_ops", 1},
                        {"model", opts.onnx},
                        {"producer", g.producer},
                        {"producer_version", g.producer_version},
                        {"opset", g.opset},
                        {"nodes", g.nodes.size()},
                        {"parameters", params},
                        {"level", amp::level_name(o.level)},
                        {"dtype", low},
                        {"op_types", types}}
               .dump(2)
        << "\n";
  } else {
    out << fmt::format("{}: {} nodes, {} op types, {} parameters; ONNX opset {}{}\n", opts.onnx, g.nodes.size(), uses.size(),
                       params, g.opset,
                       g.producer.empty() ? "" : ", from " + g.producer + (g.producer_version.empty() ? "" : " " + g.producer_version));
    if (!g.check_note.empty()) out << "note: " << g.check_note << "\n";
    out << fmt::format("AMP {} {}\n\n", amp::level_name(o.level), low);
    reports::TextTable t({"ONNX op", "nodes", "runs as", "reason", "runs in, fp32 inputs", "runs in, " + low + " inputs",
                          "modules (first)"});
    for (std::size_t c : {0, 2, 3, 4, 5, 6}) t.align(c, reports::TextTable::Align::left);
    for (const auto& u : uses) {
      const std::string modules = join(u.modules) + (u.modules.size() == 3 ? ", ..." : "");
      if (!u.info) {
        ++unsupported;
        t.add_row({u.op_type, std::to_string(u.count), "NOT SUPPORTED", "-", "-", "-", modules});
        continue;
      }
      if (u.info->runs.empty()) {
        t.add_row({u.op_type, std::to_string(u.count), "(host)", "-", "-", "-", modules});
        continue;
      }
      bool first = true;
      for (std::string_view op : u.info->runs) {
        const OpRow* r = row_of(op);
        if (!r) continue;
        t.add_row({first ? u.op_type : "", first ? std::to_string(u.count) : "", std::string(op),
                   std::string(amp::reason_name(r->reason)), shown(r->from_fp32), shown(r->from_low), first ? modules : ""});
        first = false;
      }
    }
    out << t.render();
    out << "\nruns as: the registry ops a node of that type runs (`ampcheck ops` lists them); a type with several\n"
           "runs one of them per node, by its attributes and operands (docs/onnx.md). (host): computed on the CPU\n"
           "from shapes, constants and integer data, not an op of the model.\n";
    if (refused > 0) {
      // The same check `run` makes before anything runs (models::onnx_refusal).
      out << "\nrefused: " << refused << " node(s) of supported types, for an attribute:\n";
      for (const auto& u : uses)
        for (const auto& [node, r] : u.refused) out << "  " << models::refusal_message(*node, r) << "\n";
    }
  }
  if (unsupported > 0) {
    err << "ampcheck: " << opts.onnx << ": " << unsupported
        << " op type(s) the importer does not support; the model cannot run (docs/onnx.md lists what is supported)\n";
    return 2;
  }
  if (refused > 0) {
    err << "ampcheck: " << opts.onnx << ": " << refused
        << " node(s) refused for an attribute (listed above with the fix); the model cannot run\n";
    return 2;
  }
  return 0;
}

int run_ops(const OpsOptions& opts, std::ostream& out, std::ostream& err) {
  if (!opts.onnx.empty() && opts.nodes) throw UsageError("--onnx and --nodes: give one");
  if (opts.nodes) {
    out << (opts.json ? nodes_json() : nodes_text());
    return 0;
  }
  const amp::AmpOptions options = resolve_options(opts);
  std::optional<amp::Policy> policy;
  try {
    policy.emplace(options);
  } catch (const amp::PolicyError& e) {
    throw UsageError(e.what());
  }
  if (!opts.onnx.empty()) return onnx_ops(opts, *policy, out, err);
  const std::vector<OpRow> rows = rows_for(*policy);
  out << (opts.json ? ops_json(*policy, rows) : ops_text(*policy, rows));
  return 0;
}

}  // namespace

Command add_ops_command(CLI::App& app) {
  auto options = std::make_shared<OpsOptions>();
  return {add_options(app, *options),
          [options](std::ostream& out, std::ostream& err) { return run_ops(*options, out, err); }};
}

}  // namespace ampcheck::cli
