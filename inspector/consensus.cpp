#include "inspector/consensus.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <stdexcept>

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
      std::string parts;
      for (const auto& [sum, members] : groups) parts += (parts.empty() ? "" : " vs ") + ("ranks " + list(members));
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

std::string consensus_failure(const reports::Distributed& d) {
  if (d.in_agreement) return "";
  if (!d.disagreements.empty()) {
    const auto& first = d.disagreements.front();
    return "ranks disagreed at step " + std::to_string(first.step) + ": " + first.detail +
           (d.first_divergence ? "; the replicas diverged from step " + std::to_string(d.first_divergence) : "");
  }
  return d.divergence;
}

}  // namespace ampcheck::inspector
