// Where the first NaN/Inf comes from, and what the loss scaler made of gradient overflow.
//
// NanWatch listens to op events and scaler updates and sorts every non-finite value:
//   producer     the first op event (in sequence order) with a non-finite output while
//                every floating input is finite: forward, the inputs; backward, the
//                forward's inputs and grad_output, the output being the grad_inputs.
//   propagator   a later event with a non-finite input and a non-finite output: counted
//                per op, never blamed.
//   allowed      an event of an allowed op or module (an attention mask's -Inf) is not
//                reported; an event whose only non-finite inputs are such allowed values
//                carries them on unreported (softmax over -Inf gives finite values anyway).
// Backward and optimizer-phase events (the scaler's multiply of the loss included) are
// held until the scaler's next update judges them. A dynamic scaler
// that finds Inf/NaN, skips the step and reacts (the scale drops, or a backoff counter
// advances: Paddle's decr_count, DeepSpeed's hysteresis) has absorbed them: expected
// probing, kept per update with its attribution (the first backward events whose
// grad_inputs held non-finite values, with module paths). Anything else is a real failure:
// a non-finite forward value (the loss included), non-finite gradients no scaler absorbed,
// a scale below the floor, or skipped updates above a fraction of the run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/hooks.h"

namespace ampcheck::inspector {

struct NanWatchOptions {
  std::vector<std::string> allowed_ops;      // op names, e.g. "masked_fill"
  std::vector<std::string> allowed_modules;  // path prefixes, matched per dotted component
  double scale_floor = 1.0;                  // scale_after below this is a failure
  double max_skipped_fraction = 0.05;        // skipped updates / updates above this fails
  std::size_t max_listed = 8;                // events kept per list (attribution, propagators)
};

struct NonFiniteCounts {
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  std::int64_t total() const { return nan + pos_inf + neg_inf; }
  bool any() const { return total() != 0; }
  NonFiniteCounts& operator+=(const NonFiniteCounts& o);
};

// One floating tensor an event read: its non-finite counts and the range of its finite
// values (NaN when it has none).
struct TensorRange {
  std::string role;  // "input 0", ..., "grad_output"
  DType dtype = DType::f32;
  Shape shape;
  NonFiniteCounts non_finite;
  double min = 0, max = 0, absmax = 0;
};

struct NanEvent {
  std::uint64_t sequence = 0;
  std::int64_t step = 0;
  Phase phase = Phase::forward;
  Op op = Op::cast;
  std::string module;
  std::vector<TensorRange> inputs;     // floating inputs only
  NonFiniteCounts output;              // forward: the output; backward: all grad_inputs
  std::vector<std::size_t> bad_grads;  // backward: indices of grad_inputs with non-finite values
};

struct Propagation {
  std::int64_t events = 0;
  std::vector<std::pair<std::string, std::int64_t>> by_op;  // first-seen order
  std::vector<NanEvent> first;                              // up to max_listed
};

// One scaler update and, when it found Inf/NaN, who held them.
struct ScaleRecord {
  amp::ScalerEvent event;
  bool absorbed = false;                      // expected probing (see above)
  std::optional<NanEvent> backward_producer;  // the first backward producer before it
  std::vector<NanEvent> attribution;          // first backward events with non-finite grads
  std::int64_t propagators = 0;               // backward propagators before it
};

enum class FailureKind : std::uint8_t {
  forward_non_finite,   // a non-finite forward value not allowed (the loss included)
  gradient_not_absorbed,  // non-finite gradients no dynamic scaler skipped and backed off from
  scale_below_floor,
  skipped_fraction,
};
std::string_view failure_kind_name(FailureKind k);

struct Failure {
  FailureKind kind;
  std::int64_t step = 0;  // the op event's step, or the scaler update's count
  std::string detail;
};

struct NanReport {
  std::optional<NanEvent> producer;  // of the real failures; absorbed probing excluded
  Propagation propagators;           // likewise
  std::vector<ScaleRecord> scale_history;
  std::vector<Failure> failures;
  std::int64_t events_checked = 0;
  std::int64_t allowed_events = 0;   // allowed producers and their carriers, not reported
  std::int64_t updates() const { return static_cast<std::int64_t>(scale_history.size()); }
  std::int64_t skipped() const;
  std::int64_t absorbed() const;
  bool failed() const { return !failures.empty(); }
};

class NanWatch : public Observer {
 public:
  explicit NanWatch(NanWatchOptions options = {});
  void on_op_end(const OpEvent& e) override;
  void on_scaler_update(const amp::ScalerEvent& e) override;

  // The report so far. Backward events no scaler update has judged yet count as real.
  NanReport report() const;
  const NanWatchOptions& options() const { return options_; }

 private:
  // Backward events since the last scaler update.
  struct Pending {
    std::optional<NanEvent> producer;
    std::vector<NanEvent> attribution;
    Propagation propagators;
  };
  bool allowed(const OpEvent& e) const;
  bool carries_allowed(const Tensor& t) const;
  void remember_allowed(const Tensor& t);
  void add_propagator(Propagation& p, const NanEvent& e) const;
  void merge_real(NanReport& r, const Pending& p) const;

  NanWatchOptions options_;
  NanReport report_;
  Pending pending_;
  std::vector<Tensor> allowed_values_;
  bool below_floor_ = false;  // the last update left the scale below the floor  // recent tensors that hold allowed non-finite values
};

// For a human: the producer line first, then propagators, failures, probing, history.
std::string describe(const NanReport& report);

}  // namespace ampcheck::inspector
