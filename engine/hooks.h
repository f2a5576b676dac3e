// What the engine tells whoever listens: each op call (forward and backward) with its
// dtypes before and after the AMP casts, each parameter update, each loss-scaler
// update, and step boundaries. The engine owns this interface and never includes an
// observer's header; with no observer attached the cost is one branch per op.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/amp/grad_scaler.h"
#include "engine/amp/policy.h"
#include "engine/ops/registry.h"

namespace ampcheck {

enum class Phase : std::uint8_t { forward, backward, optimizer };
std::string_view phase_name(Phase p);

// One input the AMP policy cast before the op ran.
struct CastRecord {
  std::size_t input;
  DType from, to;
};

struct OpEvent {
  std::uint64_t sequence = 0;  // op events so far in this process, this one included
  std::int64_t step = 0;       // the training step (begin_step's count), 0 before any
  Phase phase = Phase::forward;
  Op op = Op::cast;
  std::string module;          // the innermost module's path ("" outside any module)
  bool amp = false;            // an autocast policy was active
  amp::Level level = amp::Level::O0;
  amp::Reason reason = amp::Reason::off;
  bool inserted_cast = false;  // a cast the policy inserted (not the user's own)
  std::vector<DType> dtypes_before;  // inputs as called (i64 for index tensors)
  std::vector<CastRecord> casts;     // what the policy changed
  std::vector<Shape> shapes;         // inputs' shapes
  const std::vector<Tensor>* inputs = nullptr;   // as the op ran them (valid in callbacks)
  const Params* params = nullptr;                 // the op's parameters (forward and backward)
  const Tensor* output = nullptr;                 // on_op_end, forward
  const Tensor* grad_output = nullptr;            // backward: d loss / d output
  const std::vector<Tensor>* grad_inputs = nullptr;  // on_op_end, backward
  DType out_dtype = DType::f32;      // on_op_end: the output's (forward) or grad's dtype
  std::string kernel;                // "cpu:matmul:f32" — backend, op, compute type
  double seconds = 0;                // on_op_end: wall time of the kernel
  double start = 0;                  // on_op_end: when it began, steady-clock seconds (an arbitrary epoch)
};

struct ParamUpdate {
  std::string_view name;
  std::int64_t step = 0;
  const Tensor* before = nullptr;  // the parameter before the update (a copy)
  const Tensor* after = nullptr;   // the parameter after it
  const Tensor* grad = nullptr;    // the gradient the update used
  const Tensor* master = nullptr;  // the fp32 master, when the optimizer keeps one
  const std::map<std::string, Tensor>* state = nullptr;  // exp_avg, momentum_buffer, ...
};

// One data-parallel step as one rank saw it (engine/dist/data_parallel.h): its own
// finding, the decision it acted on, and its parameters' checksum after the step.
// One fp8 scaled tensor after a step's scale update (an fp8 linear layer's input, weight
// or output gradient): the amax the update used (after the reduction over the amax group)
// and the scale it set. Every rank must hold the same (TransformerEngine reduces the amaxes
// over the data-parallel group so that the replicas quantize alike).
struct Fp8ScaleRecord {
  std::string tensor;  // "<layer> <role>"
  float amax = 0;
  float scale = 0;
};

struct DataParallelStep {
  std::int64_t step = 0;
  int rank = 0, world = 1;
  bool local_found_inf = false;  // this rank's gradients held Inf/NaN before any reduction
  bool found_inf = false;        // the decision the scaler acted on
  bool reduced = true;           // whether found_inf was reduced over the ranks
  double scale = 0;              // the loss scale of this step
  double local_loss = 0;         // the loss of this rank's shard
  std::int64_t shard_rows = 0;
  std::uint64_t checksum = 0;    // of every parameter after the update (or the skip)
  std::string overflow;          // the first parameter whose local gradient was non-finite
  bool skipped = false;          // the optimizer step was skipped
  std::vector<Fp8ScaleRecord> fp8;  // fp8 layers: each scaled tensor after the update
};

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_op_begin(const OpEvent&) {}
  virtual void on_op_end(const OpEvent&) {}
  virtual void on_param_update(const ParamUpdate&) {}
  virtual void on_scaler_update(const amp::ScalerEvent&) {}
  virtual void on_step_begin(std::int64_t) {}
  virtual void on_step_end(std::int64_t) {}
  virtual void on_data_parallel_step(const DataParallelStep&) {}
};

void add_observer(Observer* observer);
void remove_observer(Observer* observer);
bool observed();  // any observer attached: the engine's one branch

namespace hooks {
// Emitters, called by the engine (registry, autograd, optimizer, scaler).
void op_begin(const OpEvent& e);
void op_end(const OpEvent& e);
void param_update(const ParamUpdate& u);
void scaler_update(const amp::ScalerEvent& e);
void data_parallel_step(const DataParallelStep& e);
std::uint64_t next_sequence();
}  // namespace hooks

// Step boundaries, marked by the training loop: events carry the step number.
// begin_step() counts on from the last; begin_step(n) starts step n (a loop that counts
// its own steps from 1, so that a second run in the same process repeats the numbers).
void begin_step();
void begin_step(std::int64_t step);
void end_step();
std::int64_t current_step();

// The phase events are tagged with; autograd and the optimizer set it.
class PhaseScope {
 public:
  explicit PhaseScope(Phase p);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase previous_;
};
Phase current_phase();

// The module whose forward is running (nn::Module::operator() pushes its path while
// observed, so op events name the layer they ran in).
class ModuleScope {
 public:
  explicit ModuleScope(const std::string& path);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  bool pushed_;
};
const std::string& current_module();

// Marks the casts the AMP policy inserts, so their events say so.
class InsertedCastScope {
 public:
  InsertedCastScope();
  ~InsertedCastScope();
  InsertedCastScope(const InsertedCastScope&) = delete;
  InsertedCastScope& operator=(const InsertedCastScope&) = delete;

 private:
  bool previous_;
};
bool inserting_cast();

}  // namespace ampcheck
