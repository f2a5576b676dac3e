// The backend parity harness (in the spirit of ggml's test-backend-ops): every op of the
// registry, in every float dtype, on several shapes, forward and backward, run on the CPU
// and on a target device from the same inputs, and compared on the host. A case fails on
// a NaN the CPU does not have, an Inf of another position or sign, a normalised mean
// squared error above the op's threshold for its dtype, a shape or dtype that differs, or
// a write outside a tensor (the guard bytes of engine/tensor.h).
//
// With the CPU as the target it checks the machinery itself: the CPU backend against
// itself must give NMSE 0 and leave every guard byte intact. `ampcheck selftest` runs it;
// tests/ops_parity_test.cpp checks the pieces exposed here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/device.h"
#include "engine/ops/registry.h"
#include "engine/tensor.h"

namespace ampcheck::parity {

enum class Direction : std::uint8_t { forward, backward };
enum class Status : std::uint8_t { pass, fail, skip };
std::string_view direction_name(Direction d);  // "fwd", "bwd"
std::string_view status_name(Status s);        // "PASS", "FAIL", "SKIP"

// ---- tolerances ----
// Why two backends may differ on one op, from none to most; the threshold table
// (threshold()) has one row per class and one column per dtype, with the reasoning.
enum class Tolerance : std::uint8_t {
  exact,           // data movement and selection: the same bits or a bug
  elementwise,     // a few roundings (the compiler may fuse a*b+c into one fma)
  transcendental,  // exp/log/tanh/erf/pow: each math library's own last-bit errors
  reduction,       // sums in another order (a CUB tree against the CPU's chunks)
  gemm,            // GEMM/conv sums in the library's order (cuBLAS, cuDNN algorithms)
  fp8_gemm,        // the same casts to fp8, then cuBLASLt's fp8 sums (Hopper's fast accumulation)
};
std::string_view tolerance_name(Tolerance t);
Tolerance tolerance(Op op, Direction d);
double threshold(Tolerance t, DType dtype);
double threshold(Op op, Direction d, DType dtype);  // threshold(tolerance(op, d), dtype)

// ---- comparing ----
// sum((x - ref)^2) / sum(ref^2) over the positions where ref is finite; 0 when both sums
// are 0 (equal zeros, or no elements), +inf when only the error is non-zero. A NaN in x
// at a finite ref makes it NaN (compare() says where first).
double nmse(const std::vector<double>& x, const std::vector<double>& ref);

struct Comparison {
  bool ok = true;
  double nmse = 0;
  std::string reason;  // why not ok: "NaN at element 5 where the CPU has 0.25"
};
// `x` (the device's values) against `ref` (the CPU's): NaN only where the CPU has NaN,
// Inf at the CPU's Inf positions with its sign, then NMSE <= threshold.
Comparison compare(const std::vector<double>& x, const std::vector<double>& ref, double threshold);

// ---- cases ----
struct Case {
  Op op = Op::add;
  DType dtype = DType::f32;          // the dtype the case is about (its float inputs')
  std::vector<Tensor> inputs;        // on the CPU; undefined where the op takes an absent operand
  Params params = NoParams{};
  std::vector<bool> differentiable;  // per input: compared in the backward (labels, masks: no)
  std::string note;                  // the parameters that matter: "dim=1", "k3 s2 p1"
  std::uint64_t seed = 0;            // of the upstream gradient
  // "[7, 13], [13]:f32 dim=0": the inputs' shapes (an input of another dtype than the
  // case's says which), then the note.
  std::string shapes() const;
};

// Every case of `op` in `dtype`: odd sizes, broadcasting operands, an empty tensor where
// the op takes one, a one-element tensor, a size that spans several CPU chunks and GPU
// blocks. Inputs come from a fixed seed, in ranges that keep the op finite (positive
// values for log/sqrt/rsqrt/pow/reciprocal/div, labels and indices in range, 0/1 masks),
// and the same values (up to rounding) in every dtype.
std::vector<Case> cases_for(Op op, DType dtype);
// Cases of the ops and dtypes given (empty: every op; every float dtype), op by op.
std::vector<Case> cases(const std::vector<Op>& ops = {}, const std::vector<DType>& dtypes = {});

// ---- running ----
// One tensor a run produced, copied to the host.
struct Value {
  std::string what;  // "output", "input 3 after the op", "gradient of input 0"
  bool defined = false;
  Shape shape;
  DType dtype = DType::f32;
  std::vector<double> values;
};
using Outcome = std::vector<Value>;

// Runs a case on `device` from fresh copies of its inputs. Forward: the output, then
// every input as the op left it (batch_norm updates its running statistics in place; any
// other change is a kernel writing where it must not). Backward: the output's backward
// from a fixed random upstream gradient, then the gradient of each differentiable input.
// Throws what the op throws.
Outcome evaluate(const Case& c, Direction d, Device device);

struct Result {
  Op op = Op::add;
  DType dtype = DType::f32;
  std::string shapes;
  Direction direction = Direction::forward;
  Device device = Device::cpu;
  bool compared = false;  // values were compared (not when a run threw)
  double nmse = 0;        // the largest over the compared values; NaN where a NaN was new
  double threshold = 0;
  Status status = Status::pass;
  std::string reason;     // for fail and skip: what, where, by how much
};

// The device's outcome `got` against the CPU's `ref`: value by value, the same count,
// definedness, shape and dtype, then compare() under the case's threshold.
Result judge(const Case& c, Direction d, Device device, const Outcome& got, const Outcome& ref);

// Runs `body` with guard bytes on (engine/tensor.h) and returns how many storages it
// freed with a guard byte changed. Everything `body` allocates must be freed inside it.
std::uint64_t guard_violations_during(const std::function<void()>& body);

// One case in one direction: the CPU reference, then `device`, each with guard bytes
// around every tensor, then judge(). An exception on either side is a failure that
// quotes it; a bf16 GEMM a GPU below compute capability 8.0 refuses is a skip.
Result run_case(const Case& c, Direction d, Device device);

struct Options {
  Device device = Device::cpu;
  std::vector<Op> ops;        // empty: every op
  std::vector<DType> dtypes;  // empty: f64, f32, f16, bf16
  std::vector<Direction> directions = {Direction::forward, Direction::backward};
  std::function<void(const Result&)> on_result;  // called as each result is known
};
std::vector<Result> run(const Options& options);

// The training steps that are not ops, on `device` against the CPU: the optimizers' one
// update over every parameter (SGD with Nesterov momentum and weight decay, AdamW), f16
// parameters with fp32 masters written back in the same pass, one parameter larger than a
// chunk of the GPU's multi-tensor kernel, three steps from one seed. Both devices run the
// same update formulas (kernels/training_kernels.h): the bits must be equal.
struct StepResult {
  std::string step;  // "AdamW step (fp32 masters of 4 f16 parameters, 3 steps)"
  Status status = Status::pass;
  std::string reason;  // for fail: the first parameter and element that differ
};
std::vector<StepResult> run_steps(Device device);

struct Summary {
  std::size_t cases = 0, passed = 0, failed = 0, skipped = 0;
};
Summary summarize(const std::vector<Result>& results);

}  // namespace ampcheck::parity
