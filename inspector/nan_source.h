// Where NaN and Inf come from, what the loss scaler made of gradient overflow, and the
// quieter failures of low precision around them.
//
// NanWatch listens to op events, parameter updates and scaler updates and sorts every
// non-finite value:
//   producer     an op event with a non-finite output while every floating input is
//                finite: forward, the inputs; backward, the forward's inputs and
//                grad_output, the output being the grad_inputs. Every (op, module,
//                phase) that does so is kept, its first occurrence, in sequence order.
//   lost value   for a forward producer, what low precision lost on the way: its own
//                result overflowing its fp16/bf16 output while fp32 would hold it, or an
//                input 0 that an earlier low-precision op made by flushing a finite
//                nonzero result (log(0) after sigmoid underflowed; x / (var + eps) with
//                eps lost). Found by recomputing that op in f64 (inspector/shadow.h)
//                once per new producer, walking back through casts and reshapes.
//   propagator   a later event with a non-finite input and a non-finite output: counted
//                per op, never blamed.
//   allowed      an event of an allowed op or module is not reported; an event whose
//                only non-finite inputs are such allowed values carries them on
//                unreported.
//   intended     (on by default) a -Inf mask: a -Inf that masked_fill writes, that an
//                add / where takes from a constant, or that any op makes from finite
//                values none of which carries a gradient (a mask built from data and
//                constants: fp16/bf16 rounds an exported torch.finfo(float32).min to -Inf
//                in a Mul, a Cast or a Where), and that only softmax reads, making
//                finite values of it (over rows that keep a finite value the -Inf becomes
//                0). Casts, reshapes, adds and log_softmax carry it on. When a softmax
//                makes NaN of it (a row that is all -Inf), another op reads it, or any
//                other op makes a non-finite value of it, the mask is a producer after all.
// Backward and optimizer-phase events (the scaler's multiply of the loss included) are
// held until the scaler's next update judges them. A dynamic scaler that finds Inf/NaN,
// skips the step and reacts (the scale drops, or a backoff counter advances: Paddle's
// decr_count, DeepSpeed's hysteresis) has absorbed them: expected probing, kept per update
// with its attribution (the first backward events whose grad_inputs held non-finite
// values, with module paths). When the skips come as one run from the first update, each
// absorbed and none after a non-finite forward value, then clean training, that run is
// the scaler probing down from too high an initial scale: it is recorded (ScalerProbing)
// and left out of the skipped fraction, and a scale it took below the floor is where
// the gradients fit, not a collapse.
//
// Anything else is a real failure: a non-finite forward value (the loss included),
// non-finite gradients no scaler absorbed, a scale below the floor, skipped updates above
// a fraction of the run, or gradient underflow: in a run where ops computed in fp16/bf16,
// optimizer steps in a row whose every parameter gradient was exactly 0 while the loss
// had not come down to a tenth of where it started (a model that has converged has
// gradients fp16 cannot hold, and nothing left to learn).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/hooks.h"
#include "inspector/shadow.h"  // RangeLossKind

namespace ampcheck::inspector {

struct NanWatchOptions {
  std::vector<std::string> allowed_ops;      // op names, e.g. "masked_fill"
  std::vector<std::string> allowed_modules;  // path prefixes, matched per dotted component
  double scale_floor = 1.0;                  // scale_after below this is a failure
  double max_skipped_fraction = 0.05;        // skipped updates / updates above this fails
  std::size_t max_listed = 8;                // events kept per list (attribution, propagators)
  bool intended_masks = true;                // -Inf masks every reader maps to finite values are no failure
  // Optimizer steps in a row with every parameter gradient exactly 0 that make a
  // gradient_underflow failure (every step, in a run with fewer); 0: never.
  std::int64_t zero_gradient_steps = 3;
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

// A value low precision lost on the way to a non-finite one (see above).
struct LostValue {
  std::string input;  // the producer's input it reached: "input 1"; "" for the producer's own result
  Op op = Op::cast;   // the op that lost it
  std::string module;
  Phase phase = Phase::forward;
  std::int64_t step = 0;
  bool inserted_cast = false;  // the op is a cast the AMP policy inserted
  RangeLossKind kind = RangeLossKind::underflow;
  DType dtype = DType::f16;  // the output dtype that could not hold it
  double value = 0;          // the exact result lost: at an element where the producer made
                             // a non-finite value, when the shapes line up; else the first
  std::int64_t count = 0;    // elements that call lost that way
  double limit = 0;          // the dtype's smallest subnormal (underflow) or largest finite value
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
  std::vector<LostValue> lost;         // forward producers: what low precision lost (above)
};

// -Inf masks that were intended (see above), per (op, module) that wrote them.
struct IntendedInf {
  Op op = Op::masked_fill;
  std::string module;
  std::int64_t events = 0;      // calls that wrote it
  std::int64_t values = 0;      // -Inf elements they wrote
  std::vector<Op> readers;      // ops that read it and made finite values of it (softmax)
  std::string reason() const;   // "-inf mask: softmax maps it to 0"
};

// A -Inf mask that turned out a failure: an op other than softmax read it, or made NaN or
// +Inf of it. Once per (writer op, module); the writer is among the producers.
struct MaskFailure {
  NanEvent writer;           // what wrote the -Inf
  Op reader = Op::cast;      // what read it
  std::string reader_module;
  bool made_non_finite = false;  // the reader made NaN/+Inf of it (else: a finite result of a non-softmax)
};

// The leading run of skipped updates, each absorbed, that took the scale from too high a
// start down to one that trains (followed by at least one update that stepped).
struct ScalerProbing {
  std::int64_t first_update = 0, last_update = 0;  // ScalerEvent::step of the first and last
  std::int64_t skipped = 0;                        // updates in it (all skipped)
  double scale_from = 0;  // the scale the run started with
  double scale_to = 0;    // the scale after the run: the first that trained
  // Where to start instead: the lowest scale the whole run came down to (later skips
  // may take it below scale_to).
  double suggested_scale = 0;
  // The skipped fraction is above the limit with the probing and within it without: the
  // probing alone would have failed the run, and did not.
  bool excused = false;
};

// Optimizer steps in a row with every parameter gradient exactly 0 in a low-precision run.
struct ZeroGradients {
  std::int64_t first_step = 0;  // the step (begin_step's count) the longest such run began
  std::int64_t steps = 0;       // its length
  std::int64_t stepped = 0;     // optimizer steps in the run with parameter updates
  DType dtype = DType::f16;     // the low-precision dtype the run computed in
  // The smallest power-of-two loss scale that lifts the evidence's largest flushed
  // gradient into the dtype's normal range; 0 without evidence.
  double scale_needed = 0;
  // A backward cast into that dtype that flushed a gradient whole to 0 in the first step
  // of the run (the loss gradient on its way back into fp16): value is its largest lost
  // magnitude. Absent when no cast showed it.
  std::optional<LostValue> evidence;
  // The loss (as the loss scaler's multiply saw it) of the run's first step and of the
  // training's first step; NaN when no scaler multiplied it.
  double loss = std::numeric_limits<double>::quiet_NaN();
  double initial_loss = std::numeric_limits<double>::quiet_NaN();
};

struct Propagation {
  std::int64_t events = 0;
  std::vector<std::pair<std::string, std::int64_t>> by_op;  // first-seen order
  std::vector<NanEvent> first;                              // up to max_listed
};

// How a skipped update reads (docs/inspector.md, "Skipped updates"). One rule: a skip the
// scaler absorbed is probing when the scale was still looking for its level, and counts
// toward skipped_fraction when it was not.
enum class SkipReading : std::uint8_t {
  initial,       // probing: no update had stepped yet (the scale coming down from its start)
  lower,         // probing: the back-off took the scale below every scale of the run so far
                 // (the gradients grew past what the scale held: it looks for a new level)
  after_growth,  // probing: the scale had grown past that of the last update that stepped
                 // (growth_interval, incr_every_n_steps) and backed off
  counted,       // absorbed at a scale already proven, to no new low (a hysteresis or
                 // decr_every_n step): counts toward skipped_fraction
  persistent,    // not probing though it looks so: kPersistentSkips or more skips in a row
                 // with the same op as their cause, whose inputs did not shrink with the
                 // scale between any two of them (exp of a saved activation overflows at
                 // every scale): no scale absorbs it; counts toward skipped_fraction
  forward,       // after a non-finite forward value: that value's doing (forward_non_finite)
  not_absorbed,  // the scaler did not react (gradient_not_absorbed)
};
std::string_view skip_reading_name(SkipReading r);  // "initial", "lower", ...
bool is_probing(SkipReading r);                      // initial, lower, after_growth

// Where the Inf/NaN of an update that found some came from.
struct SkipCause {
  enum class Kind : std::uint8_t {
    op,            // a backward (or the scaler's own) op made it from finite values: `event`
    accumulation,  // the first backward event that held it received it in its grad_output:
                   // autograd's sum of the gradients of a value read in several places
                   // (a residual, a reused activation) overflowed, outside any op
    parameter,     // no backward event held it: a parameter's gradient summed over its uses
                   // (a shared or tied weight) overflowed
    forward,       // a forward value (the loss, or what a backward op reads of its forward)
                   // was non-finite already: the gradients followed it at any scale
    unknown,
  } kind = Kind::unknown;
  std::optional<NanEvent> event;
  std::int64_t params = 0;         // parameters whose gradients held Inf/NaN (the scaler's count)
  std::vector<std::string> names;  // the first of them, in the optimizer's order
};
std::string_view skip_cause_name(SkipCause::Kind k);  // "op", "accumulation", "parameter", "unknown"
std::string cause_text(const SkipCause& c);          // one line, for the reports

// One scaler update and, when it found Inf/NaN, who held them.
struct ScaleRecord {
  amp::ScalerEvent event;
  bool absorbed = false;                      // the scaler skipped and reacted (see above)
  std::optional<NanEvent> backward_producer;  // the first backward producer before it
  std::vector<NanEvent> attribution;          // first backward events with non-finite grads
  std::int64_t propagators = 0;               // backward propagators before it
  bool forward_non_finite = false;            // a forward value before it was non-finite (not probing)
  SkipReading reading = SkipReading::counted; // meaningful for a skipped update
  SkipCause cause;                            // meaningful when it found Inf/NaN
};

enum class FailureKind : std::uint8_t {
  forward_non_finite,   // a non-finite forward value not allowed (the loss included)
  gradient_not_absorbed,  // non-finite gradients no dynamic scaler skipped and backed off from
  scale_below_floor,
  skipped_fraction,
  gradient_underflow,   // every parameter gradient 0 for zero_gradient_steps steps in a row
};
std::string_view failure_kind_name(FailureKind k);

struct Failure {
  FailureKind kind;
  std::int64_t step = 0;  // the op event's step, or the scaler update's count
  std::string detail;
};

struct NanReport {
  // Every (op, module, phase) that made a non-finite value from finite inputs, its first
  // occurrence, in sequence order; absorbed probing and intended masks excluded.
  std::vector<NanEvent> producers;
  std::optional<NanEvent> producer;  // producers.front(): the first
  Propagation propagators;           // likewise
  std::vector<ScaleRecord> scale_history;
  std::vector<Failure> failures;     // by step, stable
  std::vector<IntendedInf> intended; // -Inf masks no reader turned into a failure
  std::vector<MaskFailure> mask_failures;  // -Inf masks a reader turned into one
  std::optional<ScalerProbing> probing;
  std::optional<ZeroGradients> zero_gradients;  // present when it is a failure
  std::int64_t events_checked = 0;
  std::int64_t allowed_events = 0;   // allowed producers and their carriers, not reported
  std::int64_t updates() const { return static_cast<std::int64_t>(scale_history.size()); }
  std::int64_t skipped() const;
  std::int64_t absorbed() const;
  std::int64_t probing_skips() const;  // skipped updates that read as probing
  bool failed() const { return !failures.empty(); }
};

class NanWatch : public Observer {
 public:
  explicit NanWatch(NanWatchOptions options = {});
  void on_op_end(const OpEvent& e) override;
  void on_param_update(const ParamUpdate& u) override;
  void on_scaler_update(const amp::ScalerEvent& e) override;
  void on_step_begin(std::int64_t step) override;
  void on_step_end(std::int64_t step) override;

  // The report so far. Backward events no scaler update has judged yet count as real.
  NanReport report() const;
  const NanWatchOptions& options() const { return options_; }

 private:
  // Backward events since the last scaler update.
  struct Pending {
    std::vector<NanEvent> producers;
    std::vector<NanEvent> attribution;
    Propagation propagators;
  };
  // A forward output of this step, by tensor identity: what made it, and what a
  // recompute or a walk back through casts and reshapes needs.
  struct Made {
    std::uint64_t sequence = 0;
    std::int64_t step = 0;
    Op op = Op::cast;
    std::string module;
    bool inserted_cast = false;
    Tensor output;               // holds the identity: no other tensor can take its address
    std::vector<Tensor> inputs;  // kept for low-precision outputs and walkable ops only
    Params params;
  };
  // A -Inf mask written this step (see above) and the tensors carrying it on.
  struct MaskRoot {
    NanEvent event;
    std::int64_t values = 0;
    std::vector<Op> readers;
    bool spread = false;  // an op other than softmax read it, or made a non-finite value of it
  };
  // One step's gradients as the optimizer saw them.
  struct StepGradients {
    std::int64_t updates = 0;
    bool nonzero = false;
    std::optional<LostValue> flushed;  // a backward cast that flushed a gradient whole
    double loss = std::numeric_limits<double>::quiet_NaN();  // what the scaler multiplied
  };

  bool allowed(const OpEvent& e) const;
  bool carries_allowed(const Tensor& t) const;
  void remember_allowed(const Tensor& t);
  void add_propagator(Propagation& p, const NanEvent& e) const;
  void merge_real(NanReport& r, const Pending& p) const;
  void remember_made(const OpEvent& e);
  std::vector<LostValue> lost_values(const OpEvent& e) const;
  std::vector<std::size_t> mask_roots_of(const Tensor& t) const;
  void add_mask_value(const Tensor& t, std::vector<std::size_t> roots);
  void spread_masks(const std::vector<std::size_t>& roots, const OpEvent& reader, bool made_non_finite,
                    const std::string& how);
  void fold_masks(std::vector<IntendedInf>& into, const std::vector<MaskRoot>& roots) const;
  void note_backward_cast(const OpEvent& e);
  void end_gradient_step();

  NanWatchOptions options_;
  NanReport report_;
  Pending pending_;
  std::vector<Tensor> allowed_values_;  // recent tensors that hold allowed non-finite values
  bool below_floor_ = false;            // the last update left the scale below the floor
  // For reading skips: whether an update has stepped, the scale of the last that did, and
  // the lowest scale the run has held (before or after any update).
  bool stepped_any_ = false;
  double last_stepped_scale_ = 0;
  double lowest_scale_ = std::numeric_limits<double>::infinity();
  // The persistent reading: scale_history's indices of the skips in a row with one op as
  // their cause, and whether in each pair of them no input followed the scale.
  std::vector<std::size_t> streak_;
  bool streak_independent_ = true;
  void note_streak();
  std::optional<NanEvent> first_forward_bad_;  // the first non-finite forward value reported
  std::string first_forward_note_;             // how it failed, when a mask's reader showed it
  bool forward_bad_since_update_ = false;      // a non-finite forward value since the last scaler update
  // A tensor's values by where they are: its first element, dtype and shape. The
  // registry hands autograd a fresh handle of an op's output, so a handle's identity
  // does not follow the values; the entries hold the storage, so no other tensor can
  // take their address.
  using ViewKey = std::tuple<const void*, DType, Shape>;
  static ViewKey view_key(const Tensor& t);
  std::map<ViewKey, Made> made_;        // this step's forward outputs, by where they are
  std::vector<MaskRoot> roots_;         // this step's -Inf masks
  std::vector<std::pair<Tensor, std::vector<std::size_t>>> mask_values_;  // carriers -> roots_
  bool low_precision_ = false;          // an op computed in fp16/bf16
  DType low_dtype_ = DType::f16;        // the first such dtype
  StepGradients step_grads_;
  bool step_open_ = false;              // on_step_begin seen, on_step_end not yet
  std::int64_t step_ = 0;
  std::int64_t stepped_ = 0;            // steps with parameter updates
  double initial_loss_ = std::numeric_limits<double>::quiet_NaN();  // the first loss the scaler multiplied
  ZeroGradients zero_run_, zero_longest_;  // the current and the longest run of all-zero steps
};

// For a human: the producer line first, then propagators, failures, probing, history.
std::string describe(const NanReport& report);
// "log in 'head' produced -Inf <- its input 0 came from sigmoid in 'gate', which flushed
// 3.1e-09 to 0 in float16" (for one lost value of `producer`).
std::string lost_text(const NanEvent& producer, const LostValue& lost);

}  // namespace ampcheck::inspector
