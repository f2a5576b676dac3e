#include "reports/drift.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <utility>

#include "common/json_text.h"
#include "reports/text_table.h"

namespace ampcheck::reports {
namespace {

using nlohmann::ordered_json;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Levenshtein distance, for did-you-mean (reports/ depends on nothing else of the
// project, so it does not borrow engine/util/strings.h).
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string_view closest_rule(std::string_view word) {
  std::string normal(word);  // the CLI's spelling of a rule is close enough to suggest it
  std::replace(normal.begin(), normal.end(), '-', '_');
  std::string_view best;
  std::size_t best_distance = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (std::string_view name : rule_names()) {
    const std::size_t d = edit_distance(normal, name);
    if (d < best_distance) best = name, best_distance = d;
  }
  return best;
}

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return fmt::format("{:.6g}", v);
}

// Both values, with all their digits when six would print them alike.
std::pair<std::string, std::string> nums(double b, double c) {
  std::pair<std::string, std::string> out{num(b), num(c)};
  if (out.first == out.second && b != c) out = {fmt::format("{}", b), fmt::format("{}", c)};
  return out;
}

std::string percent(double v) {
  if (!std::isfinite(v)) return num(v);
  return fmt::format("{:.3g}%", v * 100);
}

std::string join(const std::vector<std::string>& items) {
  if (items.empty()) return "[]";
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::string describe(const DtypeCounts& c) {
  std::string out;
  auto add = [&](std::string_view name, std::int64_t n) {
    if (n != 0) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", name, n);
  };
  add("fp16", c.fp16);
  add("bf16", c.bf16);
  add("fp32", c.fp32);
  add("other", c.other);
  return out.empty() ? "no calls" : out;
}

// The same share of calls in each dtype (a run twice as long keeps its mix).
bool same_mix(const DtypeCounts& a, const DtypeCounts& b) {
  const std::int64_t ta = a.total(), tb = b.total();
  return a.fp16 * tb == b.fp16 * ta && a.bf16 * tb == b.bf16 * ta && a.fp32 * tb == b.fp32 * ta &&
         a.other * tb == b.other * ta && (ta == 0) == (tb == 0);
}

std::string describe(const std::optional<NanEvent>& e) {
  if (!e) return "none";
  return fmt::format("{}{} ({}, step {})", e->op, e->module.empty() ? "" : " in " + e->module,
                     e->phase, e->step);
}

std::string describe(const std::vector<Failure>& failures) {
  if (failures.empty()) return "none";
  std::string out;
  const std::size_t shown = std::min<std::size_t>(failures.size(), 3);
  for (std::size_t i = 0; i < shown; ++i)
    out += fmt::format("{}{} at step {}", i ? ", " : "", failures[i].kind, failures[i].step);
  if (failures.size() > shown) out += fmt::format(", +{} more", failures.size() - shown);
  return out;
}

bool has_nonfinite(const NonFinite& n) { return n.producer.has_value() || !n.failures.empty(); }

bool has_numerics(const Report& r) {
  if (!r.tensors.empty()) return true;
  return std::any_of(r.ops.begin(), r.ops.end(), [](const OpInstance& op) { return !op.numerics.empty(); });
}

// The fp16 and bf16 counts of every op output and tensor, by a stable key.
std::map<std::string, std::pair<LowPrecisionCounts, LowPrecisionCounts>> low_precision_counts(
    const Report& r) {
  std::map<std::string, std::pair<LowPrecisionCounts, LowPrecisionCounts>> out;
  for (const OpInstance& op : r.ops)
    for (const NamedNumerics& n : op.numerics)
      out[op.name + " " + n.role] = {n.numerics.f16, n.numerics.bf16};
  for (const TensorNumerics& t : r.tensors) out[t.key] = {t.numerics.f16, t.numerics.bf16};
  return out;
}

class Checker {
 public:
  Checker(const Report& baseline, const Report& current, const DriftRules& rules)
      : b_(baseline), c_(current), rules_(rules) {}

  DriftResult run() {
    result_.rules = rules_;
    settings();
    dtypes();
    final_loss();
    accuracy();
    skipped();
    nonfinite();
    overflow();
    local_error();
    sort();
    return std::move(result_);
  }

 private:
  void add(std::string_view rule, std::string subject, std::string baseline, std::string current,
           std::string detail, bool failing) {
    result_.findings.push_back({std::string(rule), std::move(subject), std::move(baseline),
                                std::move(current), std::move(detail), failing});
  }
  void checked(std::string_view rule) { result_.checked.emplace_back(rule); }
  void not_checked(std::string_view rule, std::string why) {
    add(rule, "-", "", "", "not checked: " + std::move(why), false);
  }

  void settings() {
    checked("settings_must_match");
    const RunInfo &b = b_.run, &c = c_.run;
    const std::vector<std::tuple<std::string, std::string, std::string>> fields = {
        {"run.command", b.command, c.command},
        {"run.model", b.model, c.model},
        {"run.level", b.level, c.level},
        {"run.dtype", b.dtype, c.dtype},
        {"run.device", b.device, c.device},
        {"run.seed", std::to_string(b.seed), std::to_string(c.seed)},
        {"run.steps", std::to_string(b.steps), std::to_string(c.steps)},
        {"run.batch", std::to_string(b.batch), std::to_string(c.batch)},
        {"run.lr", fmt::format("{}", b.lr), fmt::format("{}", c.lr)},
        {"run.optimizer", b.optimizer, c.optimizer},
        {"run.inspect", b.inspect, c.inspect},
        {"run.amp.semantics", b.amp.semantics, c.amp.semantics},
        {"run.amp.custom_white_list", join(b.amp.custom_white_list), join(c.amp.custom_white_list)},
        {"run.amp.custom_black_list", join(b.amp.custom_black_list), join(c.amp.custom_black_list)},
        {"run.amp.fp32_modules", join(b.amp.fp32_modules), join(c.amp.fp32_modules)},
        {"run.amp.loss_scaling", b.amp.loss_scaling, c.amp.loss_scaling},
        {"run.amp.init_loss_scaling", fmt::format("{}", b.amp.init_loss_scaling),
         fmt::format("{}", c.amp.init_loss_scaling)},
    };
    for (const auto& [subject, bv, cv] : fields) {
      if (bv == cv) continue;
      add("settings_must_match", subject, bv, cv,
          rules_.settings_must_match
              ? "settings changed: the baseline is not like for like; run with its settings or record a new baseline"
              : "settings changed (allowed)",
          rules_.settings_must_match);
    }
    // An interrupted run covers fewer steps than its settings say: not like for like with
    // a complete one (nor with one interrupted elsewhere), whatever its numbers look like.
    const std::string bi = completion(b_), ci = completion(c_);
    if (bi != ci)
      add("settings_must_match", "interrupted", bi, ci,
          rules_.settings_must_match
              ? "an interrupted run covers only the steps it ran: finish it (or the baseline) before comparing"
              : "an interrupted run covers only the steps it ran (allowed)",
          rules_.settings_must_match);
  }
  static std::string completion(const Report& r) {
    if (!r.interrupted) return "no";
    const Interruption& i = *r.interrupted;
    return i.bisect_run > 1 ? fmt::format("bisect-nan run {} after {} of {} steps", i.bisect_run, i.steps_run,
                                          i.steps_requested)
                            : fmt::format("after {} of {} steps", i.steps_run, i.steps_requested);
  }

  void dtypes() {
    if (b_.op_types.empty() || c_.op_types.empty()) {
      not_checked("dtype_change", fmt::format("needs the op dtype table in both runs (--inspect trace or above; "
                                              "baseline: {}, current: {})",
                                              b_.run.inspect, c_.run.inspect));
      return;
    }
    checked("dtype_change");
    std::map<std::string, std::pair<const DtypeCounts*, const DtypeCounts*>> types;
    for (const OpTypeRow& row : b_.op_types) types[row.type].first = &row.calls;
    for (const OpTypeRow& row : c_.op_types) types[row.type].second = &row.calls;
    const bool fail = rules_.dtype_change;
    for (const auto& [type, counts] : types) {
      const auto [b, c] = counts;
      if (b && c && *b == *c) continue;
      const std::string bv = b ? describe(*b) : "absent", cv = c ? describe(*c) : "absent";
      if (!b) {
        add("dtype_change", type, bv, cv, "op type only in the current run", fail);
      } else if (!c) {
        add("dtype_change", type, bv, cv, "op type only in the baseline", fail);
      } else if (same_mix(*b, *c)) {
        add("dtype_change", type, bv, cv, "same dtype mix, other call counts", false);
      } else {
        add("dtype_change", type, bv, cv,
            fail ? "runs in other dtypes: the AMP policy changed" : "runs in other dtypes (allowed)", fail);
      }
    }
  }

  void final_loss() {
    checked("final_loss_rel");
    const double b = b_.summary.final_loss, c = c_.summary.final_loss;
    double rel;
    if (b == c || (std::isnan(b) && std::isnan(c))) rel = 0;
    else if (b == 0 || !std::isfinite(b)) rel = kInf;
    else rel = std::fabs(c - b) / std::fabs(b);
    if (std::isnan(rel)) rel = kInf;  // a finite baseline, a NaN now
    const bool fail = !(rel <= rules_.final_loss_rel);
    const std::string change =
        rel == 0 ? "unchanged" : fmt::format("{}{}", c > b ? "+" : c < b ? "-" : "", percent(rel));
    auto [bv, cv] = nums(b, c);
    add("final_loss_rel", "summary.final_loss", std::move(bv), std::move(cv),
        fmt::format("{} ({} {})", change, fail ? "limit" : "within", percent(rules_.final_loss_rel)),
        fail);
  }

  void accuracy() {
    checked("accuracy_drop");
    const double b = b_.summary.accuracy, c = c_.summary.accuracy;
    const double drop = b == c ? 0 : b - c;
    const bool fail = !(drop <= rules_.accuracy_drop);
    const std::string change = drop == 0 ? "unchanged" : drop > 0 ? "dropped " + num(drop) : "rose " + num(-drop);
    auto [bv, cv] = nums(b, c);
    add("accuracy_drop", "summary.accuracy", std::move(bv), std::move(cv),
        fmt::format("{} ({} {} drop)", change, fail ? "limit" : "within", num(rules_.accuracy_drop)), fail);
  }

  void skipped() {
    checked("skipped_increase");
    const std::int64_t b = b_.summary.skipped_steps, c = c_.summary.skipped_steps;
    const bool fail = c - b > rules_.skipped_increase;
    const std::string change = c == b ? "unchanged" : fmt::format("{:+}", c - b);
    add("skipped_increase", "summary.skipped_steps", std::to_string(b), std::to_string(c),
        fmt::format("{} ({} +{})", change, fail ? "limit" : "within", rules_.skipped_increase),
        fail);
  }

  void nonfinite() {
    checked("new_nonfinite");
    const bool before = has_nonfinite(b_.nonfinite), now = has_nonfinite(c_.nonfinite);
    const bool fail = !before && now && rules_.new_nonfinite;
    const std::string why = !before && now ? (fail ? "non-finite values the baseline did not have"
                                                   : "non-finite values the baseline did not have (allowed)")
                            : before && now ? "the baseline had non-finite values too"
                                            : "the current run has none";
    const std::string bp = describe(b_.nonfinite.producer), cp = describe(c_.nonfinite.producer);
    if (bp != cp) add("new_nonfinite", "nonfinite.producer", bp, cp, why, fail && c_.nonfinite.producer);
    const std::string bf = describe(b_.nonfinite.failures), cf = describe(c_.nonfinite.failures);
    // a failure without a producer (a scaler failure) still fails the rule
    if (bf != cf) add("new_nonfinite", "nonfinite.failures", bf, cf, why, fail && !c_.nonfinite.failures.empty());
  }

  void overflow() {
    if (!has_numerics(b_) || !has_numerics(c_)) {
      not_checked("new_overflow",
                  fmt::format("needs numerics in both runs (--inspect stats or full; baseline: {}, current: {})",
                              b_.run.inspect, c_.run.inspect));
      return;
    }
    checked("new_overflow");
    const auto before = low_precision_counts(b_), now = low_precision_counts(c_);
    std::map<std::string, std::pair<LowPrecisionCounts, LowPrecisionCounts>> keys = before;
    for (const auto& [key, counts] : now) keys.emplace(key, counts);
    const LowPrecisionCounts zero;
    for (const auto& [key, unused] : keys) {
      const auto bi = before.find(key), ci = now.find(key);
      for (const bool f16 : {true, false}) {
        const LowPrecisionCounts& b =
            bi == before.end() ? zero : (f16 ? bi->second.first : bi->second.second);
        const LowPrecisionCounts& c = ci == now.end() ? zero : (f16 ? ci->second.first : ci->second.second);
        for (const bool over : {true, false}) {
          const std::int64_t bn = over ? b.overflow : b.underflow, cn = over ? c.overflow : c.underflow;
          if (bn == cn) continue;
          const std::string subject = fmt::format("{}: {} {}", key, f16 ? "f16" : "bf16", over ? "overflow" : "underflow");
          const bool fresh = bn == 0;
          const bool fail = fresh && rules_.new_overflow;
          add("new_overflow", subject, std::to_string(bn), std::to_string(cn),
              fresh ? (fail ? "new: none in the baseline" : "new: none in the baseline (allowed)")
                    : cn == 0 ? "gone" : "the baseline had some too",
              fail);
        }
      }
    }
  }

  void local_error() {
    if (b_.run.inspect != "full" || c_.run.inspect != "full") {
      not_checked("error_growth", fmt::format("needs --inspect full in both runs (baseline: {}, current: {})",
                                              b_.run.inspect, c_.run.inspect));
      return;
    }
    checked("error_growth");
    std::map<std::string, std::pair<const LocalError*, const LocalError*>> ops;
    for (const OpInstance& op : b_.ops)
      if (op.local_error) ops[op.name].first = &*op.local_error;
    for (const OpInstance& op : c_.ops)
      if (op.local_error) ops[op.name].second = &*op.local_error;
    const std::string allowed = "x" + num(rules_.error_growth);
    for (const auto& [name, errors] : ops) {
      const auto [b, c] = errors;
      if (!c) {
        add("error_growth", name, num(b->mean), "not measured",
            "no longer measured: runs in fp32 now, or is gone", false);
        continue;
      }
      if (!b) {
        add("error_growth", name, "not measured", num(c->mean),
            "newly runs in low precision (not measured in the baseline)", true);
        continue;
      }
      if (b->mean == c->mean) continue;
      double growth = b->mean == 0 ? kInf : c->mean / b->mean;
      if (std::isnan(growth)) growth = kInf;
      const bool fail = !(growth <= rules_.error_growth);
      auto [bv, cv] = nums(b->mean, c->mean);
      add("error_growth", name, std::move(bv), std::move(cv),
          fmt::format("mean relative error x{} ({} {})", num(growth), fail ? "limit" : "within", allowed), fail);
    }
  }

  void sort() {
    auto index = [](const std::string& rule) {
      const auto& names = rule_names();
      return std::find(names.begin(), names.end(), rule) - names.begin();
    };
    std::stable_sort(result_.findings.begin(), result_.findings.end(), [&](const Finding& x, const Finding& y) {
      return std::tuple(index(x.rule), std::string_view(x.subject), std::string_view(x.detail)) <
             std::tuple(index(y.rule), std::string_view(y.subject), std::string_view(y.detail));
    });
  }

  const Report& b_;
  const Report& c_;
  const DriftRules& rules_;
  DriftResult result_;
};

ordered_json rules_json(const DriftRules& r) {
  return {{"settings_must_match", r.settings_must_match},
          {"dtype_change", r.dtype_change},
          {"final_loss_rel", r.final_loss_rel},
          {"accuracy_drop", r.accuracy_drop},
          {"skipped_increase", r.skipped_increase},
          {"new_nonfinite", r.new_nonfinite},
          {"new_overflow", r.new_overflow},
          {"error_growth", r.error_growth}};
}

}  // namespace

const std::vector<std::string_view>& rule_names() {
  static const std::vector<std::string_view> names = {
      "settings_must_match", "dtype_change", "final_loss_rel", "accuracy_drop",
      "skipped_increase",    "new_nonfinite", "new_overflow",  "error_growth"};
  return names;
}

void validate(const DriftRules& r) {
  auto check = [](bool ok, std::string_view rule, std::string_view need, const std::string& got) {
    if (!ok) throw RulesError(fmt::format("rule {} must be {} (got {})", rule, need, got));
  };
  check(r.final_loss_rel >= 0 && std::isfinite(r.final_loss_rel), "final_loss_rel",
        "a relative change >= 0, e.g. 0.05 for 5%", num(r.final_loss_rel));
  check(r.accuracy_drop >= 0 && std::isfinite(r.accuracy_drop), "accuracy_drop",
        "an absolute drop >= 0, e.g. 0.02 for 2 points", num(r.accuracy_drop));
  check(r.error_growth >= 1 && std::isfinite(r.error_growth), "error_growth",
        "a factor >= 1, e.g. 2 (below 1 an unchanged run would fail)", num(r.error_growth));
  check(r.skipped_increase >= 0, "skipped_increase", "a step count >= 0", std::to_string(r.skipped_increase));
}

DriftRules rules_from_json(std::string_view text, std::string_view source) {
  nlohmann::json doc;
  try {
    doc = parse_json_text(text, source);
  } catch (const JsonTextError& e) {
    throw RulesError(e.what());
  }
  if (!doc.is_object())
    throw RulesError(fmt::format("{}: a rules file is a JSON object of rule names to values, e.g. "
                                 "{{\"final_loss_rel\": 0.1}}; got a {}",
                                 source, doc.type_name()));
  DriftRules rules;
  for (const auto& [key, value] : doc.items()) {
    auto wrong = [&](std::string_view need) {
      return RulesError(fmt::format("{}: rule \"{}\" must be {} (got {} {})", source, key, need,
                                    value.type_name(), value.dump()));
    };
    auto number = [&](double& field) {
      if (!value.is_number()) throw wrong("a number");
      field = value.get<double>();
    };
    auto flag = [&](bool& field) {
      if (!value.is_boolean()) throw wrong("true or false");
      field = value.get<bool>();
    };
    if (key == "settings_must_match") flag(rules.settings_must_match);
    else if (key == "dtype_change") flag(rules.dtype_change);
    else if (key == "final_loss_rel") number(rules.final_loss_rel);
    else if (key == "accuracy_drop") number(rules.accuracy_drop);
    else if (key == "error_growth") number(rules.error_growth);
    else if (key == "new_overflow") flag(rules.new_overflow);
    else if (key == "new_nonfinite") flag(rules.new_nonfinite);
    else if (key == "skipped_increase") {
      if (!value.is_number_integer()) throw wrong("a whole number of steps");
      rules.skipped_increase = value.get<std::int64_t>();
    } else {
      const std::string_view best = closest_rule(key);
      std::string names;
      for (std::string_view n : rule_names()) names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
      throw RulesError(fmt::format("{}: unknown rule \"{}\"{}; rules: {}", source, key,
                                   best.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", best), names));
    }
  }
  try {
    validate(rules);
  } catch (const RulesError& e) {
    throw RulesError(fmt::format("{}: {}", source, e.what()));
  }
  return rules;
}

DriftRules load_rules(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    throw RulesError(std::filesystem::exists(path, ec)
                         ? fmt::format("cannot read the rules file {}", path.string())
                         : fmt::format("rules file {} does not exist", path.string()));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return rules_from_json(text.str(), path.string());
}

bool DriftResult::drifted() const { return failing() > 0; }

std::size_t DriftResult::failing() const {
  return static_cast<std::size_t>(
      std::count_if(findings.begin(), findings.end(), [](const Finding& f) { return f.failing; }));
}

DriftResult compare_reports(const Report& baseline, const Report& current, const DriftRules& rules) {
  validate(rules);
  return Checker(baseline, current, rules).run();
}

std::string drift_text(const DriftResult& result) {
  TextTable t({"", "rule", "subject", "baseline", "current", "detail"});
  for (std::size_t c = 0; c < 6; ++c) t.align(c, TextTable::Align::left);
  for (const Finding& f : result.findings) {
    const bool checked = std::find(result.checked.begin(), result.checked.end(), f.rule) != result.checked.end();
    t.add_row({f.failing ? "FAIL" : checked ? "ok" : "skip", f.rule, f.subject, f.baseline, f.current, f.detail});
  }
  std::string out = t.render();
  const std::size_t failing = result.failing();
  if (failing == 0) {
    out += fmt::format("\nno drift: {} rules checked, no failing finding\n", result.checked.size());
  } else {
    std::vector<std::string> rules;
    for (const Finding& f : result.findings)
      if (f.failing && std::find(rules.begin(), rules.end(), f.rule) == rules.end()) rules.push_back(f.rule);
    std::string names;
    for (const std::string& r : rules) names += (names.empty() ? "" : ", ") + r;
    out += fmt::format("\nDRIFT: {} failing finding{} ({}); the rules are in docs/diff.md\n", failing,
                       failing == 1 ? "" : "s", names);
  }
  return out;
}

std::string drift_json(const DriftResult& result) {
  ordered_json findings = ordered_json::array();
  for (const Finding& f : result.findings)
    findings.push_back({{"rule", f.rule},
                        {"subject", f.subject},
                        {"baseline", f.baseline},
                        {"current", f.current},
                        {"detail", f.detail},
                        {"failing", f.failing}});
  const ordered_json doc = {{"ampcheck_diff", 1},
                            {"drifted", result.drifted()},
                            {"failing", result.failing()},
                            {"rules", rules_json(result.rules)},
                            {"checked", result.checked},
                            {"findings", findings}};
  return doc.dump(2) + "\n";
}

}  // namespace ampcheck::reports
