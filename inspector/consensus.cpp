#include "inspector/consensus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <stdexcept>
#include <string_view>

namespace ampcheck::inspector {
namespace {

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string list(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

std::string encode_steps(const std::vector<DataParallelStep>& steps) {
  std::ostringstream s;
  s << std::hexfloat;
  for (const DataParallelStep& e : steps)
    s << e.step << '\t' << e.rank << '\t' << e.world << '\t' << e.local_found_inf << '\t' << e.found_inf << '\t'
      << e.reduced << '\t' << e.scale << '\t' << e.local_loss << '\t' << e.shard_rows << '\t' << e.checksum << '\t'
      << e.skipped << '\t' << (e.overflow.empty() ? "-" : e.overflow) << '\n';
  // Each fp8 tensor on a line of its own after its step's (its name, which may hold
  // spaces, last).
  for (const DataParallelStep& e : steps)
    for (const Fp8ScaleRecord& f : e.fp8)
      s << "fp8\t" << e.step << '\t' << static_cast<double>(f.amax) << '\t' << static_cast<double>(f.scale) << '\t'
        << f.tensor << '\n';
  return s.str();
}

std::vector<DataParallelStep> decode_steps(const std::string& text) {
  std::vector<DataParallelStep> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("fp8\t", 0) == 0) {
      std::istringstream f(line.substr(4));
      std::int64_t step = 0;
      std::string amax, scale, name;
      const bool numbers = static_cast<bool>(f >> step >> amax >> scale);
      if (numbers) std::getline(f >> std::ws, name);
      auto owner = std::find_if(out.begin(), out.end(), [&](const DataParallelStep& e) { return e.step == step; });
      if (!numbers || owner == out.end() || name.empty())
        throw std::runtime_error("consensus: a rank's fp8 record is malformed: " + line);
      owner->fp8.push_back({name, static_cast<float>(std::strtod(amax.c_str(), nullptr)),
                            static_cast<float>(std::strtod(scale.c_str(), nullptr))});
      continue;
    }
    std::istringstream f(line);
    DataParallelStep e;
    std::string scale, loss, overflow;
    f >> e.step >> e.rank >> e.world >> e.local_found_inf >> e.found_inf >> e.reduced >> scale >> loss >> e.shard_rows >>
        e.checksum >> e.skipped >> overflow;
    if (!f) throw std::runtime_error("consensus: a rank's step record is malformed: " + line);
    e.scale = std::strtod(scale.c_str(), nullptr);
    e.local_loss = std::strtod(loss.c_str(), nullptr);
    e.overflow = overflow == "-" ? "" : overflow;
    out.push_back(std::move(e));
  }
  return out;
}

reports::Distributed consensus(const std::vector<std::vector<DataParallelStep>>& ranks, const std::string& runtime) {
  reports::Distributed d;
  d.world_size = static_cast<std::int64_t>(ranks.size());
  d.runtime = runtime;
  std::size_t steps = ranks.empty() ? 0 : ranks[0].size();
  for (const auto& r : ranks) steps = std::min(steps, r.size());
  for (const auto& r : ranks)
    for (const DataParallelStep& e : r) d.found_inf_reduced = d.found_inf_reduced && e.reduced;
  for (std::size_t k = 0; k < steps; ++k) {
    std::vector<std::int64_t> skipped, applied;
    std::set<std::uint64_t> checksums;
    std::set<double> scales;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      const DataParallelStep& e = ranks[r][k];
      if (e.local_found_inf) d.local_overflows.push_back({static_cast<std::int64_t>(r), e.step, e.overflow});
      (e.skipped ? skipped : applied).push_back(static_cast<std::int64_t>(r));
      checksums.insert(e.checksum);
      scales.insert(e.scale);
    }
    const std::int64_t step = ranks[0][k].step;
    if (!skipped.empty() && !applied.empty()) {
      std::string why;
      for (std::int64_t r : skipped) {
        const DataParallelStep& e = ranks[static_cast<std::size_t>(r)][k];
        if (e.local_found_inf)
          why += (why.empty() ? "" : "; ") + ("rank " + std::to_string(r) + "'s own gradient of " +
                                               (e.overflow.empty() ? std::string("a parameter") : e.overflow) + " overflowed");
      }
      d.disagreements.push_back(
          {step, skipped, applied,
           "rank" + std::string(skipped.size() > 1 ? "s " : " ") + list(skipped) + " skipped the update that rank" +
               (applied.size() > 1 ? "s " : " ") + list(applied) + " applied" + (why.empty() ? "" : " (" + why + ")") +
               (d.found_inf_reduced ? "" : "; found_inf was not reduced over the ranks")});
    }
    if (scales.size() > 1 && d.first_divergence == 0) {
      d.first_divergence = step;
      d.divergence = "the ranks' loss scales differ at step " + std::to_string(step);
    }
    // fp8: every rank's scale and amax of each scaled tensor (the same tensors, in the same
    // order, on every rank: one model). The first that differs is named with the groups of
    // ranks that agree: amaxes reduced over the wrong group (Megatron-LM PR 442's bug).
    if (d.first_divergence == 0) {
      const std::vector<Fp8ScaleRecord>& first = ranks[0][k].fp8;
      for (std::size_t t = 0; t < first.size() && d.first_divergence == 0; ++t) {
        std::map<std::pair<float, float>, std::vector<std::int64_t>> groups;
        bool complete = true;
        for (std::size_t r = 0; r < ranks.size(); ++r) {
          const auto& mine = ranks[r][k].fp8;
          if (mine.size() != first.size() || mine[t].tensor != first[t].tensor) {
            complete = false;
            break;
          }
          groups[{mine[t].scale, mine[t].amax}].push_back(static_cast<std::int64_t>(r));
        }
        if (!complete) {
          d.first_divergence = step;
          d.divergence = "the ranks' fp8 layers differ at step " + std::to_string(step) + " (not the same scaled tensors)";
        } else if (groups.size() > 1) {
          d.first_divergence = step;
          std::string parts;
          for (const auto& [sa, members] : groups) {
            char buf[96];
            std::snprintf(buf, sizeof buf, ": scale %.6g from amax %.6g", static_cast<double>(sa.first),
                          static_cast<double>(sa.second));
            parts += (parts.empty() ? "" : " vs ") + ("ranks " + list(members) + buf);
          }
          d.divergence = "the ranks' fp8 scales of " + first[t].tensor + " differ after step " + std::to_string(step) +
                         " (" + parts + "): its amax was not reduced over every rank (an amax reduction over the wrong "
                         "process group); the replicas quantize differently from here on";
        }
      }
    }
    if (checksums.size() > 1 && d.first_divergence == 0) {
      d.first_divergence = step;
      std::map<std::uint64_t, std::vector<std::int64_t>> groups;
      for (std::size_t r = 0; r < ranks.size(); ++r) groups[ranks[r][k].checksum].push_back(static_cast<std::int64_t>(r));
      // The groups in the order of their first rank: "rank 0, 2, 3 vs rank 1".
      std::vector<std::vector<std::int64_t>> ordered;
      for (const auto& entry : groups) ordered.push_back(entry.second);
      std::sort(ordered.begin(), ordered.end());
      std::string parts;
      for (const auto& members : ordered)
        parts += (parts.empty() ? "" : " vs ") + std::string(members.size() > 1 ? "ranks " : "rank ") + list(members);
      d.divergence = "the replicas' parameters differ after step " + std::to_string(step) + " (" + parts + ")" +
                     (d.disagreements.empty() || d.disagreements.back().step != step ? "" : ": " + d.disagreements.back().detail);
    }
  }
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    reports::RankSummary s;
    s.rank = static_cast<std::int64_t>(r);
    for (std::size_t k = 0; k < steps; ++k) {
      const DataParallelStep& e = ranks[r][k];
      s.rows += e.shard_rows;
      s.local_overflows += e.local_found_inf;
      s.skipped += e.skipped;
    }
    if (steps > 0) s.final_checksum = hex(ranks[r][steps - 1].checksum);
    d.ranks.push_back(s);
  }
  d.in_agreement = d.disagreements.empty() && d.first_divergence == 0;
  return d;
}

namespace {

std::vector<std::uint64_t> unpack_words(const std::string& text) {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<std::uint8_t> bytes;
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : text) {
    if (c == '=') break;
    const auto at = kAlphabet.find(c);
    if (at == std::string_view::npos) throw std::invalid_argument("a checksum is not base64: " + text.substr(0, 40));
    acc = (acc << 6) | static_cast<std::uint32_t>(at);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<std::uint8_t>((acc >> bits) & 0xff));
    }
  }
  if (bytes.size() % 8 != 0) throw std::invalid_argument("checksums of a partial word: " + text.substr(0, 40));
  std::vector<std::uint64_t> words(bytes.size() / 8);
  for (std::size_t i = 0; i < words.size(); ++i)
    for (int b = 7; b >= 0; --b) words[i] = (words[i] << 8) | bytes[i * 8 + static_cast<std::size_t>(b)];
  return words;
}

// The recorder's combination (distributed.py, combine): FNV-1a over 64-bit words.
std::uint64_t combine(const std::vector<std::uint64_t>& words, const std::vector<bool>& keep) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < words.size(); ++i)
    if (keep[i]) h = (h ^ words[i]) * 0x100000001b3ull;
  return h;
}

int dtype_bits(const std::string& dtype) {
  if (dtype == "float64") return 64;
  if (dtype == "float32") return 32;
  if (dtype == "float16" || dtype == "bfloat16") return 16;
  if (dtype.rfind("float8", 0) == 0) return 8;
  return 0;  // not a floating dtype: no precision to compare
}

std::string ranks_text(const std::vector<std::int64_t>& r) {
  return (r.size() == 1 ? "rank " : "ranks ") + list(r);
}

std::string where_text(const reports::CollectiveRow& c) {
  std::string s = c.function.empty() ? "" : " in the backward of autograd.Function " + c.function;
  return s + (c.module.empty() ? " outside any module" : " in '" + c.module + "'");
}

}  // namespace

reports::Distributed consensus_of_recordings(const std::vector<reports::Report>& ranks) {
  if (ranks.empty()) throw std::invalid_argument("no rank reports");
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].rank) throw std::invalid_argument("report " + std::to_string(r) + " is no rank's recording");
    if (ranks[r].rank->rank != static_cast<std::int64_t>(r))
      throw std::invalid_argument("the reports are not ranks 0.." + std::to_string(ranks.size() - 1) + " in order");
  }
  const reports::RankRecording& first = *ranks.front().rank;
  // Replicas: parameters whose checksums agree on every rank before the first update.
  const std::size_t n = first.params.size();
  std::vector<std::vector<std::uint64_t>> initial;
  bool hashed = !first.initial_hashes.empty() && n > 0;
  for (const reports::Report& r : ranks) {
    hashed = hashed && r.rank->params == first.params && !r.rank->initial_hashes.empty();
    if (hashed) initial.push_back(unpack_words(r.rank->initial_hashes));
    hashed = hashed && initial.back().size() == n;
  }
  std::vector<bool> replica(n, hashed);
  if (hashed)
    for (std::size_t i = 0; i < n; ++i)
      for (const auto& words : initial) replica[i] = replica[i] && words[i] == initial.front()[i];
  const auto words_of = [&](const std::optional<std::string>& packed) {
    std::vector<std::uint64_t> w = packed ? unpack_words(*packed) : std::vector<std::uint64_t>{};
    if (w.size() != n) w.assign(n, 0);
    return w;
  };

  // The engine's consensus on what each rank decided, on the replicas' checksum.
  std::vector<std::vector<DataParallelStep>> steps(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const reports::Report& rep = ranks[r];
    std::size_t update = 0;
    for (const reports::StepRecord& st : rep.steps) {
      DataParallelStep e;
      e.step = st.step;
      e.rank = static_cast<int>(r);
      e.world = static_cast<int>(ranks.size());
      e.found_inf = st.found_inf;
      e.reduced = rep.rank->found_inf_reduced;
      // Unreduced, a rank's decision is its own gradients'; reduced, every rank's is the job's.
      e.local_found_inf = st.found_inf && !e.reduced;
      e.scale = st.loss_scale;
      e.local_loss = st.loss;
      e.checksum = hashed ? combine(words_of(st.param_hashes), replica) : 0;
      e.skipped = st.skipped;
      if (st.skipped) {
        ++update;
        for (const reports::SkippedUpdate& u : rep.nonfinite.skips)
          if (u.update == static_cast<std::int64_t>(update) && !u.param_names.empty()) e.overflow = u.param_names.front();
      } else {
        ++update;
      }
      steps[r].push_back(std::move(e));
    }
  }
  const std::string runtime = first.launcher + (first.backend.empty() ? "" : " (" + first.backend + ")");
  reports::Distributed d = consensus(steps, runtime);
  if (hashed) {
    d.compared_params = static_cast<std::int64_t>(std::count(replica.begin(), replica.end(), true));
    d.sharded_params = static_cast<std::int64_t>(n) - *d.compared_params;
  }
  std::size_t common = steps.front().size();
  for (const auto& r : steps) common = std::min(common, r.size());

  // The replica that diverged first, and whether its gradient differed already.
  if (hashed && d.first_divergence > 0) {
    for (std::size_t k = 0; k < common; ++k) {
      if (ranks.front().steps[k].step != d.first_divergence) continue;
      std::vector<std::vector<std::uint64_t>> p, g;
      for (const reports::Report& r : ranks) {
        p.push_back(words_of(r.steps[k].param_hashes));
        g.push_back(words_of(r.steps[k].grad_hashes));
      }
      std::vector<std::string> names;
      bool grads_differ = false;
      for (std::size_t i = 0; i < n; ++i) {
        if (!replica[i]) continue;
        bool same = true, same_grad = true;
        for (std::size_t r = 1; r < ranks.size(); ++r) {
          same = same && p[r][i] == p[0][i];
          same_grad = same_grad && g[r][i] == g[0][i];
        }
        if (!same) {
          if (names.empty()) grads_differ = !same_grad;
          names.push_back(first.params[i]);
        }
      }
      if (!names.empty())
        d.divergence += "; " + names.front() + (names.size() > 1 ? " and " + std::to_string(names.size() - 1) + " more" : "") +
                        " first" + (grads_differ ? ": its gradient already differed after the reduction (it was not "
                                                   "all-reduced over the ranks: a parameter outside DDP's buckets, one "
                                                   "added after DDP(model) was built, or a reduction over the wrong group)"
                                                 : "");
      break;
    }
  }
  // Gradients of replicas that differ after the reduction, where the parameters still agree
  // (the update skipped, or not yet applied): a finding of its own.
  if (hashed) {
    for (std::size_t k = 0; k < common; ++k) {
      const std::int64_t step = ranks.front().steps[k].step;
      if (d.first_divergence > 0 && step >= d.first_divergence) break;
      std::vector<std::vector<std::uint64_t>> g;
      for (const reports::Report& r : ranks) g.push_back(words_of(r.steps[k].grad_hashes));
      std::vector<std::string> names;
      for (std::size_t i = 0; i < n; ++i) {
        if (!replica[i]) continue;
        for (std::size_t r = 1; r < ranks.size(); ++r)
          if (g[r][i] != g[0][i]) {
            names.push_back(first.params[i]);
            break;
          }
      }
      if (names.empty()) continue;
      std::vector<std::int64_t> all;
      for (std::size_t r = 0; r < ranks.size(); ++r) all.push_back(static_cast<std::int64_t>(r));
      d.findings.push_back({"gradients_differ", false, step, all,
                            "the gradients of " + names.front() +
                                (names.size() > 1 ? " and " + std::to_string(names.size() - 1) + " more" : "") +
                                " differ across the ranks after the reduction at step " + std::to_string(step) +
                                " while the replicas still agree: not all-reduced over the ranks"});
      break;
    }
  }

  // Gradient reductions narrower than a wrapper was asked for, and comm hooks that reduce
  // in low precision.
  std::string asked_dtype, asked_by;
  for (const reports::Report& r : ranks)
    for (const reports::MixedPrecisionAsked& a : r.rank->asked) {
      if (a.reduce_dtype.empty() || dtype_bits(a.reduce_dtype) <= dtype_bits(asked_dtype)) continue;
      asked_dtype = a.reduce_dtype;
      asked_by = a.api == "fully_shard"
                     ? "fully_shard(..., mp_policy=MixedPrecisionPolicy(reduce_dtype=torch." + a.reduce_dtype + "))"
                     : a.api + "(..., mixed_precision=...(reduce_dtype=torch." + a.reduce_dtype + "))";
      if (!a.modules.empty())
        asked_by += " on " + (a.modules.front().empty() ? std::string("the model") : "'" + a.modules.front() + "'") +
                    (a.modules.size() > 1 ? " and others" : "");
    }
  // Merge every rank's collectives.
  for (std::size_t r = 0; r < ranks.size(); ++r)
    for (const reports::CollectiveRow& c : ranks[r].rank->collectives) {
      auto it = std::find_if(d.collectives.begin(), d.collectives.end(), [&](const reports::CollectiveRow& x) {
        return x.op == c.op && x.aten == c.aten && x.dtype == c.dtype && x.phase == c.phase && x.module == c.module &&
               x.function == c.function;
      });
      if (it == d.collectives.end()) {
        reports::CollectiveRow row = c;
        row.ranks = 1;
        d.collectives.push_back(row);
      } else {
        it->calls += c.calls;
        it->elements += c.elements;
        it->first_step = std::min(it->first_step, c.first_step);
        *it->ranks += 1;
      }
    }
  const auto is_reduction = [](const reports::CollectiveRow& c) {
    return c.phase == "backward" && (c.op == "all_reduce" || c.op == "reduce_scatter" || c.op == "reduce");
  };
  if (!asked_dtype.empty())
    for (const reports::CollectiveRow& c : d.collectives) {
      if (!is_reduction(c) || dtype_bits(c.dtype) == 0 || dtype_bits(c.dtype) >= dtype_bits(asked_dtype)) continue;
      std::vector<std::int64_t> who;
      for (std::size_t r = 0; r < ranks.size(); ++r)
        for (const reports::CollectiveRow& x : ranks[r].rank->collectives)
          if (x.aten == c.aten && x.dtype == c.dtype && x.phase == c.phase && x.module == c.module &&
              x.function == c.function) {
            who.push_back(static_cast<std::int64_t>(r));
            break;
          }
      d.findings.push_back(
          {"reduce_dtype", true, c.first_step, who,
           "gradients reduced in " + c.dtype + " where " + asked_dtype + " was asked (" + asked_by + "): " + c.op + " (" +
               c.aten + ")" + where_text(c) + ", " + std::to_string(c.calls) + " call(s) on " + ranks_text(who) +
               ", first at step " + std::to_string(c.first_step) +
               "; the wrapper's reduce_dtype applies to its own reductions only: cast that gradient to " + asked_dtype +
               " before it is reduced"});
    }
  for (const reports::Report& r : ranks)
    for (const reports::MixedPrecisionAsked& a : r.rank->asked)
      for (const std::string& hook : a.comm_hooks)
        if ((hook.find("bf16") != std::string::npos || hook.find("fp16") != std::string::npos) &&
            std::none_of(d.findings.begin(), d.findings.end(), [](const reports::DistributedFinding& f) { return f.kind == "comm_hook"; }))
          d.findings.push_back({"comm_hook", false, 1, {r.rank->rank},
                                "DDP reduces the gradients with the comm hook " + hook + ": in " +
                                    (hook.find("bf16") != std::string::npos ? "bfloat16" : "float16") +
                                    ", as asked (each gradient rounded once before it is summed)"});

  // A loss non-finite on some ranks only.
  for (std::size_t k = 0; k < common; ++k) {
    std::vector<std::int64_t> bad, good;
    for (std::size_t r = 0; r < ranks.size(); ++r)
      (std::isfinite(ranks[r].steps[k].loss) ? good : bad).push_back(static_cast<std::int64_t>(r));
    if (bad.empty() || good.empty()) continue;
    d.findings.push_back({"loss_non_finite", false, ranks.front().steps[k].step, bad,
                          "the loss was non-finite on " + ranks_text(bad) + " only, at step " +
                              std::to_string(ranks.front().steps[k].step) + " (finite on " + ranks_text(good) +
                              "): that rank's data or its own computation, not the job's"});
    break;
  }
  d.in_agreement = d.in_agreement && std::none_of(d.findings.begin(), d.findings.end(),
                                                  [](const reports::DistributedFinding& f) { return f.failure; });
  return d;
}

std::string consensus_failure(const reports::Distributed& d) {
  if (d.in_agreement) return "";
  for (const reports::DistributedFinding& f : d.findings)
    if (f.failure && d.disagreements.empty() && d.first_divergence == 0) return f.detail;
  if (!d.disagreements.empty()) {
    const auto& first = d.disagreements.front();
    return "ranks disagreed at step " + std::to_string(first.step) + ": " + first.detail +
           (d.first_divergence ? "; the replicas diverged from step " + std::to_string(d.first_divergence) : "");
  }
  return d.divergence;
}

}  // namespace ampcheck::inspector
