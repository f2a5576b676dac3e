// Local ("shadow") error: for each op that produced an fp16 or bf16 output, the op is run
// again in f64 from the same inputs (the ones it actually ran on, after the AMP casts,
// upcast exactly), and the low-precision output is compared with that f64 result. Error
// an op inherited from its already-rounded inputs is therefore excluded: what remains is
// the op's own error, which can be set beside the error of rounding the exact result
// once to the low dtype, the floor no low-precision kernel can beat.
//
// Definitions, per op call (y_low: the op's output; y64: the f64 recompute):
//   relative_error  ||y_low - y64||_2 / ||y64||_2; when ||y64|| is 0, 0 if y_low is
//                   all zero too and +Inf otherwise.
//   max_abs_error   max |y_low - y64|.
//   rounding_floor  ||round(y64) - y64||_2 / ||y64||_2 with round() the engine's own
//                   conversion to y_low's dtype (nearest even); 0/0 as above.
// The squared norms are f64 sums in eight lanes (element i into lane i % 8, the lanes
// folded ((0+1)+(2+3))+((4+5)+(6+7))), as the numerics statistics sum: a fixed order that
// does not wait on one chain of additions, the same bits on every machine.
// Our kernels compute in f32 and round once, so an elementwise op sits at the floor; an
// op well above it lost precision inside (a long f32 sum with cancellation, say).
//
// What is measured: forward-phase op calls whose output is f16 or bf16, except `cast`
// ops: a cast's whole error is the rounding it performs (its floor, by definition), and
// that rounding reappears as the inherited error the shadow error leaves out, so casts
// are counted (casts_skipped) and not measured. Calls with a non-finite element in
// y_low or y64 are counted (nonfinite) and not measured; the NaN/Inf watcher reports them.
//
// Keying: an op instance is (module path, op, occurrence), occurrence being the index of
// this (module, op) pair among the forward calls of the current step (reset at each
// step_begin, and whenever events start carrying a new step number). The sequence
// position within the step was not chosen because it shifts between steps when the AMP
// policy's parameter-cast cache inserts casts on one step and not the next; counting
// per (module, op) is immune to that. Several forwards in one step (gradient
// accumulation) give distinct occurrences.
//
// Range loss, per op instance, from the same recompute: the values the op lost to its
// low-precision output dtype. An element is an
//   underflow  when y_low is 0 while y64 is finite and nonzero, fp32 holds it (it does
//              not round to 0 in f32) and the dtype cannot (it rounds to 0 there): a
//              result fp32 would have kept, flushed by the storage rounding;
//   overflow   when y_low is +-Inf while y64 is finite, finite in fp32 and rounds to
//              +-Inf in the dtype.
// A 0 that the exact result also has (relu), or a 0 that cancellation in the f32 compute
// made of a value the dtype could hold, is no range loss. Calls with Inf/NaN are counted
// here too (an overflow makes one), though their error is not measured.
//
// Cost: one f64 forward per measured call, so sampling (every N-th step) bounds it. The
// recompute runs with gradients and autocast off; inputs are converted copies, so an op
// that updates an input in place (batch_norm's running statistics) updates only copies.
// Observers are called from the training thread; this one is not meant to be shared by
// several training threads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/hooks.h"
#include "inspector/numerics.h"  // Sampler

namespace ampcheck::inspector {

enum class RangeLossKind : std::uint8_t { underflow, overflow };
std::string_view range_loss_name(RangeLossKind k);  // "underflow", "overflow"

// The range loss of one op call (definitions above): counts, and the first element of
// each kind with its exact value.
struct RangeLoss {
  std::int64_t underflow = 0, overflow = 0;
  std::int64_t first_underflow = -1, first_overflow = -1;  // element index; -1: none
  double underflow_value = 0, overflow_value = 0;          // y64 there
  bool any() const { return underflow + overflow > 0; }
};
// One element: whether y_low (stored in `dtype`) lost the exact value y64 to the range.
std::optional<RangeLossKind> range_loss_of(double y_low, double y64, DType dtype);
// Every element of a call; `low` and `exact` have the same length.
RangeLoss range_loss(const std::vector<double>& low, const std::vector<double>& exact, DType dtype);
RangeLoss range_loss(const double* low, const double* exact, std::size_t n, DType dtype);

// The exact result of one forward call: `op` run in f64 on f64 copies of the floating
// `inputs` (i64 and undefined inputs as they are) with `params`: the engine's forward,
// no autograd, no autocast, no hook events. A cast's exact result is its input.
Tensor recompute_f64(Op op, const std::vector<Tensor>& inputs, const Params& params);

// One op call's measurement (definitions above).
struct ShadowSample {
  bool finite = true;  // false: y_low or y64 has a NaN/Inf; the error numbers are 0
  double relative_error = 0;
  double max_abs_error = 0;
  double rounding_floor = 0;
  RangeLoss range;     // counted whether or not the call is finite
};

// Recomputes the call (recompute_f64) and measures `output` against it.
ShadowSample measure_shadow(Op op, const std::vector<Tensor>& inputs, const Params& params,
                            const Tensor& output);

// relative_error / rounding_floor: how many times the unavoidable rounding error the op
// made. 0/0 is 1 (exact, and exactness is what the floor allowed); x/0 is +Inf.
double times_floor(double relative_error, double rounding_floor);

// One op instance's measurements aggregated over the sampled steps.
struct ShadowRecord {
  std::string module;  // "" outside any module
  Op op = Op::cast;
  std::int64_t occurrence = 0;
  DType dtype = DType::f16;  // the output's dtype at the last measurement
  Shape shape;               // and its shape

  std::int64_t count = 0;      // measured calls
  std::int64_t nonfinite = 0;  // calls skipped for a non-finite output
  double mean_error = 0;       // mean relative_error over the measured calls
  double mean_floor = 0;       // mean rounding_floor over them
  double worst_error = 0;      // the largest relative_error ...
  double floor_at_worst = 0;   // ... that call's rounding floor ...
  std::int64_t worst_step = 0;  // ... and its step
  double max_abs_error = 0;    // the largest max_abs_error over the calls

  // Range loss over every recomputed call, finite or not (definitions above).
  std::int64_t underflow = 0, overflow = 0;  // elements
  std::int64_t first_loss_step = 0;          // the first call with a loss: its step,
  RangeLossKind first_loss_kind = RangeLossKind::underflow;  // what it lost first (underflow
  double first_loss_value = 0;               // before overflow) and that element's y64

  std::string key() const;  // "block1.fc.linear#0": module, op, occurrence
  double worst_times_floor() const { return times_floor(worst_error, floor_at_worst); }
};

struct ShadowOptions {
  std::int64_t every_n = 1;  // measure steps 0, N, 2N, ... (as the numerics sampler)
};

class ShadowError : public Observer {
 public:
  explicit ShadowError(ShadowOptions options = {});  // throws for every_n < 1

  void on_op_end(const OpEvent& e) override;
  void on_step_begin(std::int64_t step) override;

  // The n records with the largest worst_error, largest first (ties in (module, op,
  // occurrence) order, op in op-list order); records
  // with no measured call are left out.
  std::vector<ShadowRecord> worst(std::size_t n) const;
  // Every record, in key order.
  std::vector<ShadowRecord> records() const;

  std::int64_t measured() const { return measured_; }        // calls measured
  std::int64_t nonfinite() const { return nonfinite_; }      // calls skipped: NaN/Inf
  std::int64_t casts_skipped() const { return casts_skipped_; }
  const ShadowOptions& options() const { return options_; }
  // Every step of [first, last] is measured, whatever every_n says (Sampler::also_take).
  void also_measure(std::int64_t first, std::int64_t last) { sampler_.also_take(first, last); }
  void clear();

 private:
  using Key = std::tuple<std::string, Op, std::int64_t>;
  ShadowOptions options_;
  std::map<Key, ShadowRecord> records_;
  std::map<std::pair<std::string, Op>, std::int64_t> occurrences_;  // this step's
  std::int64_t step_ = 0;
  bool seen_step_ = false;
  Sampler sampler_;  // every_n's steps and also_measure's window
  std::int64_t measured_ = 0, nonfinite_ = 0, casts_skipped_ = 0;
};

}  // namespace ampcheck::inspector
