// The op trace: one record per op call (forward and backward) with what the AMP policy
// decided and what ran, per-op-type dtype counts in the shape of PaddlePaddle's
// collect_operator_stats, and a GLOG-style log whose lines match the ones PaddlePaddle
// users read with GLOG_v=5 (docs/trace.md maps each line to its Paddle source).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/hooks.h"
#include "inspector/kernel_class.h"
#include "inspector/kernel_trace.h"

namespace ampcheck::inspector {

class KernelWatch;

// One GPU kernel an op call launched, as CUPTI saw it (CUDA runs with CUPTI on).
struct GpuLaunch {
  std::string name;  // demangled
  double start = 0;  // on the op records' clock (OpRecord::start): steady-clock seconds
  double seconds = 0;
  Dim3 grid, block;
  std::uint32_t stream = 0;
  const KernelClass* cls = nullptr;  // the watch's, alive as long as the inspector
};

// The launches of one kernel (name, grid, block) by one op instance over the run.
struct GpuKernelStats {
  std::string name;
  KernelClass cls;
  Dim3 grid, block;
  std::int64_t launches = 0;
  std::uint64_t total_ns = 0, min_ns = 0, max_ns = 0;
};

// GPU time of one op type, by what ran it.
struct GpuTime {
  std::int64_t launches = 0;
  std::uint64_t total_ns = 0;         // every kernel
  std::uint64_t matrix_ns = 0;        // kernels that multiply matrices (GEMM, convolution)
  std::uint64_t tensor_core_ns = 0;   // of those, on tensor cores
  std::uint64_t cuda_core_ns = 0;     // of those, on CUDA cores
  void add(const KernelClass& c, std::uint64_t ns);
  bool operator==(const GpuTime&) const = default;
};

// One input the policy cast, with the name PaddlePaddle gives that input slot.
struct TraceCast {
  std::size_t input = 0;
  std::string slot;  // "X", "Filter", "W", ...
  DType from = DType::f32, to = DType::f32;
};

// Plain values only: a record outlives the tensors of the call it describes.
struct OpRecord {
  std::uint64_t sequence = 0;
  std::int64_t step = 0;
  Phase phase = Phase::forward;
  Op op = Op::cast;
  std::string module;  // "encoder.layers.2.attn"; "" outside any module
  bool amp = false;    // an autocast policy was active
  amp::Level level = amp::Level::O0;
  amp::Reason reason = amp::Reason::off;
  bool inserted_cast = false;        // a cast the policy inserted
  std::vector<DType> dtypes_before;  // inputs as the caller passed them
  std::vector<DType> dtypes_after;   // inputs as the kernel received them
  std::vector<TraceCast> casts;
  DType kernel_dtype = DType::f32;   // the dtype the kernel was selected for
  DType compute_dtype = DType::f32;  // what it accumulates in (f32 for f16/bf16 kernels)
  DType out_dtype = DType::f32;      // forward: the output's; backward: the gradient's
  std::string kernel;                // "cpu:linear:f32"
  std::vector<Shape> shapes;         // inputs' shapes
  Shape out_shape;                   // forward: the output; backward: the incoming gradient
  double seconds = 0;
  double start = 0;  // steady-clock seconds: for timelines only, never in the JSON report
  std::vector<GpuLaunch> gpu;  // CUDA runs with CUPTI on: its kernels, by start
};

// PaddlePaddle's name for input `index` of `op` (conv2d: Input, Filter, Bias; matmul:
// X, Y; ...); "X" + index where Paddle has no single slot for it.
std::string slot_name(Op op, std::size_t index);
// A dtype as PaddlePaddle's DataTypeToString prints it: float, float16, bfloat16,
// double, int64.
std::string_view paddle_dtype_name(DType d);
// The kernel a record's event selected, as PaddlePaddle picks its kernel key: the
// promoted dtype of the floating inputs after the casts (so a cast f32 -> f16 counts as
// an f32 kernel, as Paddle counts transfer_dtype); backward: the gradient's dtype.
DType kernel_dtype_of(const OpEvent& e);

// Calls of one op type by the dtype of the kernel that ran, PaddlePaddle's four columns.
// fp8_linear's calls ran fp8 GEMMs (whatever dtype they read and write): counted in
// `other`, and in `fp8` of those.
struct DtypeCalls {
  std::uint64_t fp16 = 0, bf16 = 0, fp32 = 0, other = 0;
  std::uint64_t fp8 = 0;  // of other
  void add(DType d);
  void add(DType d, bool fp8_kernel) {
    if (!fp8_kernel) return add(d);
    ++other;
    ++fp8;
  }
  std::uint64_t total() const { return fp16 + bf16 + fp32 + other; }
  bool operator==(const DtypeCalls&) const = default;
};

// Which call of its (module, op) pair an event is within its step: the op instance.
// Forward calls count up from 0. Backward runs the tape in reverse, so the first
// backward call of a pair belongs to its last forward call: backward counts down.
class Occurrences {
 public:
  std::int64_t of(const OpEvent& e);
  void reset() { forward_.clear(), backward_.clear(); }

 private:
  using Key = std::pair<std::string, Op>;
  std::int64_t step_ = -1;
  std::map<Key, std::int64_t> forward_, backward_;
};

// One op instance (module, op, phase, occurrence within the step) over the run: its calls
// are the steps it ran in; the dtypes are those of its last call.
struct InstanceStats {
  std::string module;
  Op op = Op::cast;
  Phase phase = Phase::forward;
  std::int64_t occurrence = 0;
  std::int64_t calls = 0;
  amp::Reason reason = amp::Reason::off;
  std::vector<DType> dtypes_in;  // as the kernel received them
  DType compute_dtype = DType::f32;
  DType out_dtype = DType::f32;
  DtypeCalls kernel_dtypes;
  std::map<std::tuple<std::size_t, DType, DType>, std::int64_t> casts;  // (input, from, to)
  std::map<std::string, std::int64_t> kernels;
  std::vector<Shape> shapes;  // inputs' shapes, of the last call
  // CUDA runs with CUPTI on: the GPU kernels its calls launched, in first-seen order.
  std::vector<GpuKernelStats> gpu_kernels;
  // "<module>/<op>#<k>", backward "<module>/<op>_grad#<k>": the numerics recorder's keys.
  std::string name() const;
};

struct OpTraceOptions {
  // Records kept: the first `max_records` op calls; later ones are counted in the
  // stats and in dropped(), so a long run stays bounded.
  std::size_t max_records = 1'000'000;
  // GPU kernels will be added (add_gpu): remember which record and instance each call
  // made, for the last few steps.
  bool gpu_kernels = false;
};

// The row of the GPU-time table the policy's inserted casts go in.
inline constexpr const char* kInsertedCastRow = "cast (inserted by AMP)";

// Collects an OpRecord per op call from the end events (forward and backward).
class OpTrace : public Observer {
 public:
  explicit OpTrace(OpTraceOptions options = {});
  void on_op_end(const OpEvent& e) override;

  const std::vector<OpRecord>& records() const { return records_; }
  std::uint64_t calls() const { return calls_; }  // every call heard, kept or not
  std::uint64_t dropped() const { return calls_ - records_.size(); }

  // Rows as collect_operator_stats names them: the op's name, "<op>_grad" for its
  // backward. The policy's inserted casts are not in the rows (they are counted below);
  // the user's own casts are, under "cast".
  const std::map<std::string, DtypeCalls, std::less<>>& op_stats() const { return stats_; }
  // The policy's inserted cast calls by (from, to).
  const std::map<std::pair<DType, DType>, std::uint64_t>& inserted_casts() const { return casts_; }
  std::uint64_t inserted_cast_calls() const;
  // Every op instance, in the order first seen; the policy's inserted casts are not
  // instances (they are in the casts of the op they feed).
  const std::vector<InstanceStats>& instances() const { return instances_; }

  // The GPU kernels of one op call (inspector/kernel_watch.h joins them from CUPTI's
  // records), each with its class: onto the call's record and instance, and the GPU time
  // of its op type. `clock_offset` turns CUPTI's nanoseconds into the records' seconds.
  // Kernels of a call not ended yet wait for its end; of a call older than the last few
  // steps, or never heard, they go nowhere (kernels_lost()).
  void add_gpu(const OpActivity& activity, const std::vector<const KernelClass*>& classes, double clock_offset);
  // GPU time per row of op_stats() (and kInsertedCastRow).
  const std::map<std::string, GpuTime>& gpu_by_type() const { return gpu_by_type_; }
  std::uint64_t kernels_lost() const { return kernels_lost_; }

  void clear();

 private:
  struct Call {
    std::int64_t step = 0;
    std::size_t instance = SIZE_MAX;  // SIZE_MAX: an inserted cast
    std::size_t record = SIZE_MAX;    // SIZE_MAX: not kept
    std::string row;
  };
  struct Pending {
    OpActivity activity;
    std::vector<const KernelClass*> classes;
    double clock_offset = 0;
  };
  void apply_gpu(const Call& call, const OpActivity& activity, const std::vector<const KernelClass*>& classes,
                 double clock_offset);

  OpTraceOptions options_;
  std::map<std::uint64_t, Call> calls_by_sequence_;  // gpu_kernels: the last few steps' calls
  std::map<std::uint64_t, Pending> pending_gpu_;     // kernels of calls not ended yet
  std::map<std::string, GpuTime> gpu_by_type_;
  std::uint64_t kernels_lost_ = 0;
  Occurrences occurrences_;
  std::vector<InstanceStats> instances_;
  // Ordered as the tuple of its fields, looked up by a string_view of the module path
  // without building a key (every op call looks one up).
  struct InstanceKeyLess {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return view(a) < view(b);
    }
    template <typename T>
    static std::tuple<std::string_view, Op, Phase, std::int64_t> view(const T& t) {
      return {std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t)};
    }
  };
  std::map<std::tuple<std::string, Op, Phase, std::int64_t>, std::size_t, InstanceKeyLess> instance_index_;
  std::vector<OpRecord> records_;
  std::uint64_t calls_ = 0;
  std::map<std::string, DtypeCalls, std::less<>> stats_;
  std::map<std::pair<DType, DType>, std::uint64_t> casts_;
};

// Makes an OpRecord from an end event (what OpTrace keeps).
OpRecord make_record(const OpEvent& e);

// PaddlePaddle's operator stats table (python/paddle/amp/debugging.py,
// _print_operator_stats), then a line with the inserted casts.
std::string operator_stats_table(const OpTrace& trace);

struct GlogOptions {
  int verbosity = 0;        // GLOG_v: the op lines are verbosity 5
  bool timestamps = true;   // false: a fixed prefix, for tests and diffable logs
};

// "5" -> 5; nothing for text that is not an integer.
std::optional<int> parse_glog_level(std::string_view text);
// GLOG_v from the environment; 0 when unset or not an integer.
int glog_level_from_env();

// Writes the per-op lines PaddlePaddle's dygraph tracer writes at GLOG_v=5:
//   Trace Op: linear
//   Auto mixed precision run operator: linear        (O1; "Pure fp16 run operator" O2/O3)
//   Op(linear): Cast Input from float to float16     (one per input the policy cast)
//   expected_kernel_key:data_type[float16]:...       (when the kernel has run)
//   linear kernel: cpu:linear:f32
//   linear GPU kernels: nvjet_sm90_hss_... (f16 multiplies, f32 accumulation, tensor cores)
// On a GPU with CUPTI (set_kernels) the key is filled from the kernels that really ran:
// data_type is the precision a library GEMM or convolution multiplied in (else the one
// the project's own kernels were dispatched for), library_type CUDNN where cuDNN ran.
// and for backward "Start to execute grad op linear_grad" and its kernel lines. The
// policy's own cast ops are not written as ops: the Cast lines of the op they feed say it.
class GlogWriter : public Observer {
 public:
  GlogWriter(std::ostream& out, GlogOptions options);
  void on_op_begin(const OpEvent& e) override;
  void on_op_end(const OpEvent& e) override;

  bool enabled() const { return options_.verbosity >= 5; }
  // The watch whose per-op mode holds each op's kernels by the time this hears its end.
  void set_kernels(const KernelWatch* watch) { kernels_ = watch; }

 private:
  void line(int source_line, std::string_view text);

  std::ostream& out_;
  GlogOptions options_;
  const KernelWatch* kernels_ = nullptr;
};

}  // namespace ampcheck::inspector
