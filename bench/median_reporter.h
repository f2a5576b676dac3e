// The console reporter of ampcheck's benchmarks: Google Benchmark's usual output, and the
// median (or single) run of each benchmark kept for a closing summary table, which each
// benchmark prints in its own summary(). Colours only on a terminal, so saved results
// stay plain text.
#pragma once

#include <benchmark/benchmark.h>  // ConsoleReporter, Run
#include <unistd.h>               // isatty

#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace ampcheck::bench {

class MedianReporter : public benchmark::ConsoleReporter {
 public:
  struct Result {
    std::map<std::string, double> counters;  // bytes_per_second, FLOP, ...
    double seconds = 0;                      // real time per iteration
  };

  MedianReporter() : ConsoleReporter(isatty(fileno(stdout)) ? OO_Defaults : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median")) continue;
      if (r.run_type == Run::RT_Iteration && r.repetitions > 1) continue;
      Result& res = results_[r.run_name.function_name + (r.run_name.args.empty() ? "" : "/" + r.run_name.args)];
      for (const auto& [name, counter] : r.counters) res.counters[name] = counter.value;
      res.seconds = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
    }
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    summary();
  }

 protected:
  virtual void summary() = 0;
  // A counter of a benchmark by its registered name (and "/arg"), 0 if absent.
  double counter(const std::string& run, const std::string& name) const {
    const auto it = results_.find(run);
    if (it == results_.end()) return 0.0;
    const auto c = it->second.counters.find(name);
    return c == it->second.counters.end() ? 0.0 : c->second;
  }
  double seconds(const std::string& run) const {
    const auto it = results_.find(run);
    return it == results_.end() ? 0.0 : it->second.seconds;
  }
  bool has(const std::string& run) const { return results_.count(run) != 0; }

 private:
  std::map<std::string, Result> results_;
};

}  // namespace ampcheck::bench
