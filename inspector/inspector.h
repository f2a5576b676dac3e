// The inspector: one object a training loop attaches to hear the engine, in one of four
// modes, each a superset of the one before:
//   off    nothing attached (the engine's cost: one branch per op)
//   trace  op records (OpTrace) and, at GLOG_v >= 5, the PaddlePaddle-style log; on a
//          GPU with `cupti` on, the kernels each op call really ran (KernelWatch)
//   stats  plus counters: NaN/Inf producer and propagators, loss-scale history
//   full   plus numerics (histograms, fp16/bf16 overflow/underflow/subnormal counts)
//          of every forward output, gradient, parameter and optimizer state, update
//          swamping, and the shadow (local) error of every low-precision op
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/hooks.h"
#include "inspector/kernel_check.h"
#include "inspector/kernel_watch.h"
#include "inspector/nan_source.h"
#include "inspector/numerics.h"
#include "inspector/shadow.h"
#include "inspector/trace.h"

namespace ampcheck::inspector {

enum class Mode : std::uint8_t { off, trace, stats, full };
std::string_view mode_name(Mode m);
std::optional<Mode> parse_mode(std::string_view text);

// Numerics of every tensor the engine shows, keyed:
//   "<module>/<op>#<k>:out"         forward output of the k-th call of op in module, per step
//   "<module>/<op>#<k>:grad<i>"     backward: gradient of input i (k: Occurrences)
//   "param:<name>", "grad:<name>", "state:<name>.<buffer>"   at each optimizer update
// and the update swamping of low-precision parameters updated without a master.
// The statistics of a step are queued as the tensors come (NumericsTable::queue: on a GPU
// nothing waits) and merged at its end, in the order they came; table() merges what is
// still queued first, so a reader mid-step or after a run without a step end sees every
// tensor so far.
class NumericsRecorder : public Observer {
 public:
  explicit NumericsRecorder(Sampler sampler = {});
  void on_op_end(const OpEvent& e) override;
  void on_param_update(const ParamUpdate& u) override;
  void on_step_begin(std::int64_t step) override;
  void on_step_end(std::int64_t step) override;

  const NumericsTable& table() const {
    flush();
    return table_;
  }
  // Merges the queued statistics into table() (waits for the device).
  void flush() const { table_.flush(); }
  // Tensors queued and not yet merged.
  std::size_t pending() const { return table_.pending.size(); }
  void also_take(std::int64_t first, std::int64_t last) { table_.sampler.also_take(first, last); }
  // Per parameter: updates seen, and the fraction of elements with a nonzero gradient
  // whose stored value did not change (w + dw rounded back to w), averaged over updates.
  struct Swamping {
    std::int64_t updates = 0;
    double fraction_sum = 0;
    double mean() const { return updates ? fraction_sum / static_cast<double>(updates) : 0.0; }
  };
  const std::map<std::string, Swamping>& swamping() const { return swamping_; }

 private:
  mutable NumericsTable table_;  // const readers merge what is queued (table())
  std::map<std::string, Swamping> swamping_;
  Occurrences occurrences_;
};

struct InspectorOptions {
  Mode mode = Mode::stats;
  // Full mode's sampled steps: the numerics every N steps among the first K, the shadow
  // every shadow_every steps; and both on the N (numerics) steps that follow each step
  // whose gradients the loss scaler found Inf/NaN in.
  Sampler sampler;
  std::int64_t shadow_every = 1;
  NanWatchOptions nan;
  OpTraceOptions trace;
  int glog_level = 0;           // >= 5: the per-op log
  std::ostream* glog = nullptr; // where it goes (stderr when null)
  bool glog_timestamps = true;
  // trace and above: trace the GPU kernels through CUPTI (the caller turns it on for a
  // run on the GPU). Where CUPTI cannot run, kernels_not_traced() says why.
  bool cupti = false;
};

class Inspector {
 public:
  explicit Inspector(InspectorOptions options = {});
  ~Inspector();  // detaches
  Inspector(const Inspector&) = delete;
  Inspector& operator=(const Inspector&) = delete;

  void attach();
  void detach();
  const InspectorOptions& options() const { return options_; }

  // Present from the mode that adds them on (null below it).
  const OpTrace* trace() const { return trace_.get(); }
  const NanWatch* nan() const { return nan_.get(); }
  const NumericsRecorder* numerics() const { return numerics_.get(); }
  const ShadowError* shadow() const { return shadow_.get(); }
  // The GPU kernels (cupti on and CUPTI running; null otherwise), and why not.
  const KernelWatch* kernels() const { return kernels_started_ ? kernels_.get() : nullptr; }
  const std::string& kernels_not_traced() const { return kernels_not_traced_; }

  // What a person reads first: the operator stats table, the NaN/Inf report, the tensors
  // with the most fp16/bf16 overflow and underflow, the worst local errors, swamping.
  std::string summary(std::size_t top = 8) const;

 private:
  InspectorOptions options_;
  std::unique_ptr<OpTrace> trace_;
  std::unique_ptr<GlogWriter> glog_;
  std::unique_ptr<NanWatch> nan_;
  std::unique_ptr<NumericsRecorder> numerics_;
  std::unique_ptr<ShadowError> shadow_;
  // Sampling's second rule (above): at the step after a scaler update that found Inf/NaN,
  // the numerics and the shadow take that step and the N - 1 after it.
  class Escalation : public Observer {
   public:
    Escalation(NumericsRecorder& numerics, ShadowError& shadow, std::int64_t every)
        : numerics_(numerics), shadow_(shadow), every_(every) {}
    void on_scaler_update(const amp::ScalerEvent& e) override { pending_ = pending_ || e.found_inf; }
    void on_step_begin(std::int64_t step) override;

   private:
    NumericsRecorder& numerics_;
    ShadowError& shadow_;
    std::int64_t every_;
    bool pending_ = false;
  };
  std::unique_ptr<Escalation> escalation_;
  std::unique_ptr<KernelWatch> kernels_;
  bool kernels_started_ = false;
  std::string kernels_not_traced_;
  bool attached_ = false;
};

// From an fp32 (O0) run's numerics: the tensors that would overflow or underflow in
// fp16/bf16, worst first — which layers need loss scaling or fp32 before switching.
struct ReadinessRow {
  std::string key;
  Readiness readiness;
};
std::vector<ReadinessRow> readiness_report(const NumericsTable& table, std::size_t top);

}  // namespace ampcheck::inspector
