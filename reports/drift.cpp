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

// Mean and sample standard deviation of the finite values.
struct Stats {
  std::size_t n = 0;
  double min = 0, max = 0, mean = 0, sd = 0;
};
Stats stats_of(const std::vector<double>& values) {
  Stats s;
  double sum = 0;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    s.min = s.n == 0 ? v : std::min(s.min, v);
    s.max = s.n == 0 ? v : std::max(s.max, v);
    sum += v;
    ++s.n;
  }
  if (s.n == 0) return s;
  s.mean = sum / static_cast<double>(s.n);
  double sq = 0;
  for (double v : values)
    if (std::isfinite(v)) sq += (v - s.mean) * (v - s.mean);
  s.sd = s.n > 1 ? std::sqrt(sq / static_cast<double>(s.n - 1)) : 0;
  return s;
}

// The last quarter of a run's step losses (at least 10 steps, all of them when fewer).
std::vector<double> tail_losses(const Report& r, std::int64_t& tail) {
  const std::int64_t n = static_cast<std::int64_t>(r.steps.size());
  tail = std::min(n, std::max<std::int64_t>(10, n / 4));
  std::vector<double> out;
  for (std::int64_t i = n - tail; i < n; ++i) out.push_back(r.steps[static_cast<std::size_t>(i)].loss);
  return out;
}

std::string seed_list(const std::vector<std::uint64_t>& seeds) {
  std::string out;
  for (std::uint64_t s : seeds) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out;
}

Noise noise_of(const Report& b, const Report& c) {
  Noise n;
  const Report* with = b.spread && b.spread->seeds.size() >= 2 ? &b : c.spread && c.spread->seeds.size() >= 2 ? &c : nullptr;
  if (with) {
    const Spread& sp = *with->spread;
    std::vector<double> losses, accuracies;
    for (const SeedOutcome& o : sp.seeds) {
      n.seeds.push_back(o.seed);
      losses.push_back(o.final_loss);
      accuracies.push_back(o.accuracy);
      n.skipped_max = std::max(n.skipped_max, o.skipped_steps);
    }
    const Stats l = stats_of(losses), a = stats_of(accuracies);
    n.source = "spread";
    n.loss_min = l.min, n.loss_max = l.max, n.loss_sd = l.sd;
    n.accuracy_min = a.min, n.accuracy_sd = a.sd;
    n.description = fmt::format(
        "training noise from the {}'s {} seeds ({}): final loss {}..{} (sd {}), accuracy from {} (sd {}), "
        "skipped steps up to {}",
        with == &b ? "baseline" : "current run", sp.seeds.size(), seed_list(n.seeds), num(l.min), num(l.max),
        num(l.sd), num(a.min), num(a.sd), n.skipped_max);
    return n;
  }
  if (b.run.seed != c.run.seed) {
    std::int64_t tb = 0, tc = 0;
    const Stats sb = stats_of(tail_losses(b, tb)), sc = stats_of(tail_losses(c, tc));
    n.source = "jitter";
    n.loss_sd = std::max(sb.sd, sc.sd);
    n.tail_steps = std::max(tb, tc);
    n.description = fmt::format(
        "training noise estimated: the seeds differ ({} vs {}) and neither report has a spread, so the final loss "
        "is judged against the scatter of the last {} step losses (sd {}) and the accuracy, skipped steps and "
        "overflow counts are not judged; record the baseline with --seeds N for a measured spread",
        b.run.seed, c.run.seed, n.tail_steps, num(n.loss_sd));
    return n;
  }
  n.description = "no training noise allowed: the same seed and no spread recorded, so the runs must reproduce "
                  "each other (they are bit-reproducible) within the rules";
  return n;
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
      : b_(baseline), c_(current), rules_(rules), noise_(noise_of(baseline, current)) {}

  DriftResult run() {
    result_.rules = rules_;
    result_.noise = noise_;
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
    // Another seed is the same configuration: what it changes is training noise, which the
    // numbers are judged against (Noise), not a reason to refuse the comparison.
    if (b.seed != c.seed)
      add("settings_must_match", "run.seed", std::to_string(b.seed), std::to_string(c.seed),
          "another seed: the numbers are judged against the training noise", false);
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
    const std::string change =
        rel == 0 ? "unchanged" : fmt::format("{}{}", c > b ? "+" : c < b ? "-" : "", percent(rel));
    auto [bv, cv] = nums(b, c);
    const double own = rules_.final_loss_rel * std::fabs(b);  // the rule's own tolerance
    bool fail = !(rel <= rules_.final_loss_rel);
    std::string detail = fmt::format("{} ({} {})", change, fail ? "limit" : "within", percent(rules_.final_loss_rel));
    if (noise_.source == "spread" && std::isfinite(b) && std::isfinite(c)) {
      // Beyond the seeds' range by more than the rule or two standard deviations.
      const double w = std::max(own, 2 * noise_.loss_sd);
      const double lo = noise_.loss_min - w, hi = noise_.loss_max + w;
      fail = !(c >= lo && c <= hi);
      detail = fmt::format("{} ({} {}..{}: the seeds' {}..{} widened by {})", change, fail ? "outside" : "within",
                           num(lo), num(hi), num(noise_.loss_min), num(noise_.loss_max), num(w));
    } else if (noise_.source == "jitter" && std::isfinite(b) && std::isfinite(c)) {
      // One draw each: their difference within three of the steps' standard deviations.
      const double w = std::max(own, 3 * noise_.loss_sd);
      fail = !(std::fabs(c - b) <= w);
      detail = fmt::format("{} ({} +-{}: 3 sd of the last {} step losses, or the rule's {})", change,
                           fail ? "beyond" : "within", num(w), noise_.tail_steps, percent(rules_.final_loss_rel));
    }
    add("final_loss_rel", "summary.final_loss", std::move(bv), std::move(cv), std::move(detail), fail);
  }

  void accuracy() {
    const double b = b_.summary.accuracy, c = c_.summary.accuracy;
    // A run that measured no accuracy (a recorded script that never called set_accuracy)
    // has "nan": two such runs have nothing to compare, and a baseline without one says
    // nothing of a drop. A NaN now against a measured baseline is a lost accuracy: judged.
    if (std::isnan(b)) {
      auto [bv, cv] = nums(b, c);
      add("accuracy_drop", "summary.accuracy", std::move(bv), std::move(cv),
          std::isnan(c) ? "not checked: both runs' accuracy is nan (neither measured one; a recorded script reports "
                          "it with rec.set_accuracy)"
                        : "not checked: the baseline's accuracy is nan (not measured), so a drop cannot be told",
          false);
      return;
    }
    if (noise_.source == "jitter") {  // one run says nothing of how far a seed moves it
      auto [bv, cv] = nums(b, c);
      add("accuracy_drop", "summary.accuracy", std::move(bv), std::move(cv),
          "not judged: another seed moves the accuracy by an amount one run cannot show; record the baseline "
          "with --seeds N",
          false);
      return;
    }
    checked("accuracy_drop");
    const double drop = b == c ? 0 : b - c;
    const std::string change = drop == 0 ? "unchanged" : drop > 0 ? "dropped " + num(drop) : "rose " + num(-drop);
    auto [bv, cv] = nums(b, c);
    bool fail = !(drop <= rules_.accuracy_drop);
    std::string detail = fmt::format("{} ({} {} drop)", change, fail ? "limit" : "within", num(rules_.accuracy_drop));
    if (noise_.source == "spread") {
      // Below the seeds' lowest by more than the rule or two standard deviations.
      const double floor = noise_.accuracy_min - std::max(rules_.accuracy_drop, 2 * noise_.accuracy_sd);
      fail = !(c >= floor);
      detail = fmt::format("{} ({} {}: the seeds' lowest {} less {})", change, fail ? "below" : "at least", num(floor),
                           num(noise_.accuracy_min), num(noise_.accuracy_min - floor));
    }
    add("accuracy_drop", "summary.accuracy", std::move(bv), std::move(cv), std::move(detail), fail);
  }

  void skipped() {
    const std::int64_t b = b_.summary.skipped_steps, c = c_.summary.skipped_steps;
    if (noise_.source == "jitter") {
      add("skipped_increase", "summary.skipped_steps", std::to_string(b), std::to_string(c),
          "not judged: which steps overflow depends on the data of the seed; record the baseline with --seeds N",
          false);
      return;
    }
    checked("skipped_increase");
    const std::string change = c == b ? "unchanged" : fmt::format("{:+}", c - b);
    bool fail = c - b > rules_.skipped_increase;
    std::string detail = fmt::format("{} ({} +{})", change, fail ? "limit" : "within", rules_.skipped_increase);
    if (noise_.source == "spread") {
      const std::int64_t most = std::max(b, noise_.skipped_max) + rules_.skipped_increase;
      fail = c > most;
      detail = fmt::format("{} ({} {}: the seeds' most {} plus {})", change, fail ? "above" : "at most", most,
                           std::max(b, noise_.skipped_max), rules_.skipped_increase);
    }
    add("skipped_increase", "summary.skipped_steps", std::to_string(b), std::to_string(c), std::move(detail), fail);
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
    if (noise_.source == "jitter") {
      not_checked("new_overflow",
                  "the seeds differ and neither report has a spread: which values overflow or underflow depends "
                  "on the data; record the baseline with --seeds N to check it");
      return;
    }
    if (!has_numerics(b_) || !has_numerics(c_)) {
      not_checked("new_overflow",
                  fmt::format("needs numerics in both runs (--inspect full; baseline: {}, current: {})",
                              b_.run.inspect, c_.run.inspect));
      return;
    }
    checked("new_overflow");
    auto before = low_precision_counts(b_);
    const auto now = low_precision_counts(c_);
    // A count some seed saw is training noise, not new: the baseline side takes the largest.
    if (noise_.source == "spread")
      for (const Report* r : {&b_, &c_})
        if (r->spread)
          for (const LowPrecisionSeen& seen : r->spread->low_precision) {
            auto& [f16, bf16] = before[seen.key];
            f16.overflow = std::max(f16.overflow, seen.f16.overflow);
            f16.underflow = std::max(f16.underflow, seen.f16.underflow);
            bf16.overflow = std::max(bf16.overflow, seen.bf16.overflow);
            bf16.underflow = std::max(bf16.underflow, seen.bf16.underflow);
          }
    std::map<std::string, std::pair<LowPrecisionCounts, LowPrecisionCounts>> keys = before;
    for (const auto& [key, counts] : now) keys.emplace(key, counts);
    const LowPrecisionCounts zero;
    for (const auto& [key, unused] : keys) {
      const auto bi = std::as_const(before).find(key);
      const auto ci = now.find(key);
      for (const bool f16 : {true, false}) {
        const LowPrecisionCounts& b =
            bi == before.end() ? zero : (f16 ? bi->second.first : bi->second.second);
        const LowPrecisionCounts& c = ci == now.end() ? zero : (f16 ? ci->second.first : ci->second.second);
        for (const bool over : {true, false}) {
          const std::int64_t bn = over ? b.overflow : b.underflow, cn = over ? c.overflow : c.underflow;
          if (bn == cn) continue;
          const std::string subject = fmt::format("{}: {} {}", key, f16 ? "f16" : "bf16", over ? "overflow" : "underflow");
          const bool fresh = bn == 0;
          // Across seeds, a value that lands just below the range in one run and not in
          // another is the data's doing: a new underflow no seed saw is shown, not judged.
          // A new overflow is judged: no seed of the spread had one there.
          const bool noise = fresh && !over && noise_.source == "spread";
          const bool fail = fresh && rules_.new_overflow && !noise;
          add("new_overflow", subject, std::to_string(bn), std::to_string(cn),
              noise   ? "new, not judged: no seed of the spread underflowed here, and which values underflow moves "
                        "with the seed"
              : fresh ? (fail ? "new: none in the baseline" : "new: none in the baseline (allowed)")
              : cn == 0 ? "gone"
                        : "the baseline had some too",
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
    // With a spread, an op's baseline error is the largest any seed measured.
    std::map<std::string, double> seen;
    if (noise_.source == "spread")
      for (const Report* r : {&b_, &c_})
        if (r->spread)
          for (const LocalErrorSeen& e : r->spread->local_error) seen[e.name] = std::max(seen[e.name], e.mean);
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
      const auto noisy = seen.find(name);
      const double base = noisy == seen.end() ? b->mean : std::max(b->mean, noisy->second);
      if (b->mean == c->mean) continue;
      double growth = base == 0 ? (c->mean == 0 ? 1 : kInf) : c->mean / base;
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
  const Noise noise_;
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

ordered_json noise_json(const Noise& n) {
  ordered_json j = {{"source", n.source}, {"description", n.description}};
  if (n.source == "spread") {
    j["seeds"] = n.seeds;
    j["final_loss"] = {{"min", n.loss_min}, {"max", n.loss_max}, {"sd", n.loss_sd}};
    j["accuracy"] = {{"min", n.accuracy_min}, {"sd", n.accuracy_sd}};
    j["skipped_steps_max"] = n.skipped_max;
  } else if (n.source == "jitter") {
    j["final_loss"] = {{"sd", n.loss_sd}, {"tail_steps", n.tail_steps}};
  }
  return j;
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
  for (const auto& item : doc.items()) {
    // Named, not structured bindings: the lambdas capture them (clang 14 cannot capture bindings).
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
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

Spread spread_of(const std::vector<Report>& runs) {
  if (runs.size() < 2)
    throw std::invalid_argument(fmt::format("a spread needs at least 2 runs, got {}", runs.size()));
  const RunInfo& first = runs.front().run;
  for (const Report& r : runs) {
    const RunInfo& i = r.run;
    if (i.model != first.model || i.level != first.level || i.dtype != first.dtype || i.steps != first.steps ||
        i.batch != first.batch || i.inspect != first.inspect)
      throw std::invalid_argument(fmt::format("a spread is of one configuration: seed {} ran {} {} {} steps, seed {} "
                                              "{} {} {} steps",
                                              first.seed, first.model, first.level, first.steps, i.seed, i.model,
                                              i.level, i.steps));
  }
  Spread sp;
  std::map<std::string, LowPrecisionSeen> low;
  std::map<std::string, double> errors;
  auto most = [](LowPrecisionCounts& into, const LowPrecisionCounts& c) {
    into.overflow = std::max(into.overflow, c.overflow);
    into.rounds_to_max = std::max(into.rounds_to_max, c.rounds_to_max);
    into.underflow = std::max(into.underflow, c.underflow);
    into.subnormal = std::max(into.subnormal, c.subnormal);
  };
  for (const Report& r : runs) {
    sp.seeds.push_back({r.run.seed, r.summary.final_loss, r.summary.accuracy, r.summary.skipped_steps, r.summary.verdict});
    for (const auto& [key, counts] : low_precision_counts(r)) {
      const auto& [f16, bf16] = counts;
      if (f16.overflow == 0 && f16.underflow == 0 && bf16.overflow == 0 && bf16.underflow == 0) continue;
      LowPrecisionSeen& seen = low[key];
      seen.key = key;
      most(seen.f16, f16);
      most(seen.bf16, bf16);
    }
    for (const OpInstance& op : r.ops)
      if (op.local_error) errors[op.name] = std::max(errors[op.name], op.local_error->mean);
  }
  for (auto& [key, seen] : low) sp.low_precision.push_back(std::move(seen));
  for (const auto& [name, mean] : errors) sp.local_error.push_back({name, mean});
  return sp;
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
  std::string out = "noise: " + result.noise.description + "\n\n" + t.render();
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
                            {"noise", noise_json(result.noise)},
                            {"findings", findings}};
  return doc.dump(2) + "\n";
}

}  // namespace ampcheck::reports
