// The report model: everything a run, a bisection or a comparison leaves behind, as
// plain values (strings and numbers, no engine types), so that the JSON reader can
// rebuild it and every writer (JSON, text, HTML, JUnit) works from a saved file as well
// as from a live run. docs/report-format.md documents each field; the JSON Schema is
// reports/schema/report.schema.json.
//
// Nothing here depends on wall-clock time or on process state: the same run gives the
// same Report, so its JSON is byte-identical (timings live only in the Chrome trace).
// The one exception: a CUDA run traced through CUPTI carries the GPU kernels' measured
// durations (GpuKernel, KernelTypeRow, OutsideKernel: the *_ns fields), which differ
// from run to run; `ampcheck diff` never compares them. CPU runs have none.
// Doubles may be NaN or +-Inf (a statistic of an empty set, a diverged loss); the JSON
// writes those as the strings "nan", "inf", "-inf".
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::reports {

// schema_version "MAJOR.MINOR": a reader accepts any minor of its major (fields added
// in a newer minor are ignored) and rejects another major.
inline constexpr int kSchemaMajor = 1;
// 1.1: Report::interrupted; 1.2: Report::spread; 1.3: NonFinite::producers, intended,
// probing, zero_gradients, NanEvent::lost, OpInstance::range_loss; 1.4: Report::kernels,
// OpInstance::gpu_kernels (CUDA runs with CUPTI); 1.5: Report::distributed (data-parallel
// runs under mpirun); 1.6: NonFinite::skips, mask_failures; 1.8: DtypeCounts::fp8; 1.9:
// Report::fp8 (fp8 training: every scaled tensor's casts, step by step, and the findings).
inline constexpr int kSchemaMinor = 12;

// What wrote the report. Nothing of the machine it ran on: the same build gives the same
// bytes on every x86-64 CPU (the CPU paths differ in speed only).
struct Versions {
  std::string ampcheck;  // "0.1.0"
  std::string build;     // "CUDA 13.0, built for sm_75 sm_80 sm_90" or "no CUDA (...)"
  // Until 1.1 the CPU conversion path the run used; since 1.2 always kCpuPathsAlike, so
  // that the report is the same on every CPU (the key stays: readers of 1.0 and 1.1 need it).
  std::string cpu_conversions;
};
inline constexpr const char* kCpuPathsAlike = "any: every CPU path gives the same bits";

struct AmpSettings {
  std::string semantics = "ampcheck";  // whose config rules: ampcheck, paddle, pytorch, deepspeed, apex
  std::string config_file;             // as given on the command line; "" for none
  std::vector<std::string> custom_white_list;
  std::vector<std::string> custom_black_list;
  std::vector<std::string> fp32_modules;  // module paths run in fp32 (bisect --granularity instance)
  std::string loss_scaling;            // the scaler's behaviour: "torch dynamic", "static", ...
  double init_loss_scaling = 1;
};

// GPU memory as the device's caching allocator saw the run (CUDA runs only): peaks of the
// bytes handed to tensors and of the bytes taken from the device, and how often the cache
// met a request.
struct DeviceMemory {
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t device_allocations = 0;  // cudaMalloc calls
  std::uint64_t cache_hits = 0;
  std::uint64_t cache_misses = 0;
  std::uint64_t oom_retries = 0;  // times the cache was emptied to meet a request
  bool operator==(const DeviceMemory&) const = default;
};

// 1.6: how the script a recorder ran ended (ampcheck record).
struct ScriptOutcome {
  std::optional<std::int64_t> exit_code;  // its exit status, when it exited
  std::string error;                      // the uncaught exception, in one line; "" when none
};

// 1.10: how a recorded run's learning rate moved over its steps (a warmup, a decay): the
// scheduler's class ("" when none was seen), the rate at the first step, its peak and the
// step it was first reached, and the rate at the last step.
struct LrSchedule {
  std::string scheduler;
  double first = 0, peak = 0, last = 0;
  std::int64_t peak_step = 0;
};

struct RunInfo {
  std::string command;            // "run", "bisect-nan", "compare"
  std::string model;              // a sample's name or a model file's path
  std::string model_description;  // "Mlp 2-64-64-3 on the 3-class spiral (300 points)"
  std::int64_t parameters = 0;
  std::string level;              // "O0".."O3"; compare: the levels, "O0,O1,O2"
  std::string dtype;              // "float16", "bfloat16"; "float32" at O0
  std::string device;             // "cpu", "cuda"
  std::uint64_t seed = 0;
  std::int64_t steps = 0;
  std::int64_t batch = 0;
  // 1.6: the rows per forward (per rank) an ONNX export fixed; the run trained at that batch.
  std::optional<std::int64_t> fixed_batch;
  double lr = 0;
  std::string optimizer;          // "adam"
  std::string inspect;            // off, trace, stats, full
  // 1.7: full mode's sampled steps (run --inspect-every N, N > 1): the statistics and the
  // local error took steps N, 2N, 3N, ... and the N steps after each step whose
  // gradients held Inf/NaN (steps[].found_inf). Absent: every step.
  std::optional<std::int64_t> inspect_every;
  AmpSettings amp;
  Versions versions;
  std::optional<DeviceMemory> device_memory;  // CUDA runs
  // 1.6: a run recorded in the user's own framework (ampcheck record, recorder/): the
  // framework and its version, the script and its arguments, how the script ended, and
  // the recorder's own error if it stopped early. Absent for runs of ampcheck's engine.
  std::optional<std::string> framework, framework_version, script;
  std::optional<std::vector<std::string>> script_args;
  std::optional<ScriptOutcome> script_outcome;
  std::optional<std::string> recorder_error;
  // 1.10, recorded runs: `lr` is the rate the script gave its optimizer (a scheduler's
  // initial_lr); when it moved, how. micro_batches: the most backward() calls in one
  // optimizer step (gradient accumulation; absent for one), whose losses the steps' loss
  // adds up.
  std::optional<LrSchedule> lr_schedule;
  std::optional<std::int64_t> micro_batches;
  // 1.10, recorded runs: which steps were heard op by op ("auto": the first steps, powers of
  // two and the steps after a failure; "all"), and those steps: the op table counts their
  // calls; every step's loss, scaler update and gradients were read.
  std::optional<std::string> listen;
  std::optional<std::vector<std::int64_t>> listened_steps;
};

// One optimizer step as the loss scaler saw it.
struct StepRecord {
  std::int64_t step = 0;
  double loss = 0;        // unscaled
  double loss_scale = 1;  // the scale this step's backward used
  bool found_inf = false;
  bool skipped = false;   // the optimizer step was skipped
  // 1.10, a rank of a recorded job (Report::rank): after the update, checksums of its
  // parameters and of the gradients the update used (RankRecording::params, in order), each
  // as one hex word and per parameter as base64 of 64-bit little-endian words.
  std::optional<std::string> params_hash, grads_hash, param_hashes, grad_hashes;
};

// Calls by the dtype of the kernel that ran: PaddlePaddle's collect_operator_stats columns.
struct DtypeCounts {
  std::int64_t fp16 = 0, bf16 = 0, fp32 = 0, other = 0;
  std::optional<std::int64_t> fp8;  // 1.8, of other: calls whose kernel ran in fp8 (absent: none)
  std::int64_t total() const { return fp16 + bf16 + fp32 + other; }
  bool operator==(const DtypeCounts&) const = default;
};

// One row of the per-op-type table: "linear", "linear_grad", ...
struct OpTypeRow {
  std::string type;
  DtypeCounts calls;
  bool operator==(const OpTypeRow&) const = default;
};

// The casts the AMP policy inserted, by (from, to).
struct InsertedCasts {
  std::string from, to;
  std::int64_t calls = 0;
  bool operator==(const InsertedCasts&) const = default;
};

// Exponent histogram: counts[i] is the number of values with floor(log2|x|) equal to
// min_exponent + i (dense between the smallest and largest nonempty bin; empty when no
// finite nonzero value), plus the special bins. Bins sum to the element count.
struct Histogram {
  int min_exponent = 0;
  std::vector<std::int64_t> counts;
  std::int64_t zero = 0, nan = 0, pos_inf = 0, neg_inf = 0;
  std::int64_t below = 0, above = 0;  // f64 data outside the f32 exponent range
  bool operator==(const Histogram&) const = default;
};

// What the values would become in one low-precision dtype (inspector/numerics.h).
struct LowPrecisionCounts {
  std::int64_t overflow = 0, rounds_to_max = 0, underflow = 0, subnormal = 0;
  bool operator==(const LowPrecisionCounts&) const = default;
};

// Statistics of one tensor key merged over the sampled steps.
struct Numerics {
  std::int64_t count = 0;    // elements
  std::int64_t tensors = 0;  // tensors merged
  std::int64_t zeros = 0, nan = 0, pos_inf = 0, neg_inf = 0;
  LowPrecisionCounts f16, bf16;
  double min = 0, max = 0, absmax = 0, min_nonzero_abs = 0, mean = 0, rms = 0;  // NaN: no finite value
  double dynamic_range_log2 = 0;
  Histogram histogram;
};

// Local (shadow) error of an op instance against its f64 recompute (inspector/shadow.h).
struct LocalError {
  std::int64_t count = 0;      // measured calls
  std::int64_t nonfinite = 0;  // calls skipped for a non-finite value
  double mean = 0;             // mean relative error
  double mean_floor = 0;       // mean rounding floor
  double worst = 0;            // the largest relative error
  double floor_at_worst = 0;   // its rounding floor
  std::int64_t worst_step = 0;
  double max_abs = 0;
};

// Values an op instance lost to its low-precision output dtype: finite and nonzero in
// its exact (f64) result and in fp32, stored as 0 or +-Inf (inspector/shadow.h).
struct RangeLoss {
  std::int64_t underflow = 0, overflow = 0;  // elements, over the measured calls
  std::int64_t first_step = 0;               // the first call that lost a value
  std::string first_kind;                    // "underflow" or "overflow": what it lost first
  double first_value = 0;                    // the exact value it lost first
};

struct CastCount {
  std::int64_t input = 0;
  std::string slot;  // PaddlePaddle's input name: "X", "Filter", ...
  std::string from, to;
  std::int64_t calls = 0;
  bool operator==(const CastCount&) const = default;
};

struct KernelCount {
  std::string name;  // "cpu:linear:f16"; on CUDA also the GPU kernels CUPTI saw
  std::int64_t calls = 0;
  bool operator==(const KernelCount&) const = default;
};

// 1.4: one GPU kernel (name, grid, block) an op instance's calls launched, as CUPTI saw
// it, and how its name reads (inspector/kernel_class.h).
struct GpuKernel {
  std::string name;
  std::vector<std::int64_t> grid, block;  // x, y, z
  std::int64_t launches = 0;
  std::int64_t total_ns = 0, min_ns = 0, max_ns = 0;  // measured
  std::string input;         // the precision its multiplies took: f16, bf16, tf32, f32, ..., unknown
  std::string accumulate;
  std::string tensor_cores;  // yes, no, unknown
  std::string kind;          // gemm, gemv, conv fprop, ..., elementwise, layout, other, unknown
  bool operator==(const GpuKernel&) const = default;
};

struct NamedNumerics {
  std::string role;  // "out"; backward: "grad0", "grad1", ...
  Numerics numerics;
};

// One op instance: the k-th call of an op type inside one module within a step, in one
// phase; its calls are the steps it ran in. The dtypes are those of the last call.
struct OpInstance {
  std::string name;    // "<module>/<type>#<k>", backward "<module>/<type>_grad#<k>"
  std::string type;    // "linear"
  std::string module;  // "fc1"; "" outside any module
  std::string phase;   // "forward", "backward"
  std::int64_t occurrence = 0;  // k
  std::int64_t calls = 0;
  std::string reason;  // why it ran in its dtype: off, white, black, promote, follow, custom_white, ...
  std::vector<std::string> dtypes_in;  // as the kernel received them (after the casts)
  std::string compute;                 // the accumulation dtype
  std::string out;                     // the output's (backward: the gradients')
  DtypeCounts kernel_dtypes;           // calls by the kernel's dtype
  std::vector<CastCount> casts;
  std::vector<KernelCount> kernels;
  std::vector<NamedNumerics> numerics;   // full mode, sampled steps
  std::optional<LocalError> local_error;  // full mode, low-precision forward outputs
  std::optional<RangeLoss> range_loss;    // 1.3: full mode, when it lost a value
  std::optional<std::vector<GpuKernel>> gpu_kernels;  // 1.4: CUDA runs with CUPTI
};

// A tensor that is not an op's output: "param:fc1.weight", "grad:...", "state:...".
struct TensorNumerics {
  std::string key;
  Numerics numerics;
};

struct Swamping {
  std::string parameter;
  std::int64_t updates = 0;
  double fraction = 0;  // mean over updates of the elements whose update was lost
};

// A floating tensor a non-finite event read.
struct TensorRange {
  std::string role;  // "input 0", "grad_output"
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0;
  double min = 0, max = 0, absmax = 0;  // of the finite values; NaN if none
};

// A value low precision lost on the way to a non-finite one: the producer's own result
// overflowing its fp16/bf16 output, or an input 0 an earlier op made by flushing a value
// fp32 would hold; also a backward cast that flushed a gradient whole (ZeroGradients).
struct LostValue {
  std::string input;   // the producer's input it reached ("input 1"); "" for its own result
  std::string op;      // the op that lost it
  std::string module;
  std::string phase;   // "forward"; "backward" for a gradient
  std::int64_t step = 0;
  bool inserted_cast = false;  // the op is a cast the AMP policy inserted
  std::string kind;    // "underflow" (to 0) or "overflow" (to +-Inf)
  std::string dtype;   // the dtype that could not hold it
  double value = 0;    // the exact value lost (a gradient: the largest lost)
  std::int64_t count = 0;  // elements that call lost that way
  double limit = 0;    // the dtype's smallest subnormal (underflow) or largest finite value (overflow)
};

struct NanEvent {
  std::int64_t step = 0;
  std::string phase;
  std::string op;
  std::string module;
  std::vector<TensorRange> inputs;
  std::int64_t out_nan = 0, out_pos_inf = 0, out_neg_inf = 0;
  std::vector<LostValue> lost;  // 1.3: forward producers; empty when nothing was lost
};

struct Failure {
  // forward_non_finite, gradient_not_absorbed, scale_below_floor, skipped_fraction,
  // gradient_underflow (1.3)
  std::string kind;
  std::int64_t step = 0;
  std::string detail;
};

// 1.6: an update the loss scaler skipped, how it reads (probing or not) and what caused it.
struct SkippedUpdate {
  std::int64_t update = 0;  // the scaler update's count (the step, in a run of one update per step)
  double scale_before = 0, scale_after = 0;
  // initial, lower, after_growth (probing); counted, forward, not_absorbed
  std::string reading;
  std::string cause;                     // op, accumulation, parameter, forward, unknown
  std::optional<NanEvent> event;         // op: the producer; accumulation: the first event that held it
  std::int64_t params = 0;               // parameters whose gradients held Inf/NaN
  std::vector<std::string> param_names;  // the first of them, in the optimizer's order
  std::string text;                      // the cause in one line
};

// 1.6: a -Inf mask that was a failure: an op other than softmax read it, or made NaN/+Inf of it.
struct MaskFailure {
  std::string op, module;  // what wrote the -Inf
  std::int64_t step = 0;
  std::string reader, reader_module;  // what read it
  bool made_non_finite = false;       // the reader made NaN/+Inf of it; else a finite value of a non-softmax
};

// A -Inf mask that was no failure: only softmax read it, over rows that keep a finite value.
struct IntendedInf {
  std::string op;      // what wrote it: "masked_fill", "add", "where"
  std::string module;
  std::int64_t events = 0;  // calls
  std::int64_t values = 0;  // -Inf elements written
  std::vector<std::string> readers;  // ops that made finite values of it: "softmax"
  std::string reason;  // "-inf mask: softmax maps it to 0"
};

// The leading run of skipped updates in which a dynamic scaler came down from too high an
// initial scale, followed by clean training.
struct ScalerProbing {
  std::int64_t first_update = 0, last_update = 0;  // scaler updates, counted from 1
  std::int64_t skipped = 0;
  double scale_from = 0;  // the initial scale
  double scale_to = 0;    // the scale after it: the first that trained
  double suggested_scale = 0;  // where to start instead: the lowest scale the run came down to
  bool excused = false;   // the skipped fraction failed with it and passed without it
};

// Optimizer steps in a row whose every parameter gradient was exactly 0, in a run that
// computed in fp16/bf16: a gradient_underflow failure.
struct ZeroGradients {
  std::int64_t first_step = 0;  // the step the longest such run began
  std::int64_t steps = 0;       // its length
  std::int64_t stepped = 0;     // steps in the run with parameter updates
  std::string dtype;            // "float16"
  // The smallest power-of-two loss scale that lifts the largest flushed gradient of the
  // evidence into the dtype's normal range; 0 without evidence.
  double scale_needed = 0;
  std::optional<LostValue> evidence;  // a backward cast that flushed a gradient whole to 0
  double loss = 0;          // the loss at the first step of the run; NaN: not seen
  double initial_loss = 0;  // the training's first loss; NaN: not seen
};

struct NonFinite {
  std::optional<NanEvent> producer;  // the first op that made a non-finite value from finite inputs
  // 1.3: every (op, module, phase) that did, its first occurrence, in execution order
  // (the first is `producer`).
  std::vector<NanEvent> producers;
  std::int64_t propagator_events = 0;
  std::vector<std::pair<std::string, std::int64_t>> propagators;  // op type, events
  std::vector<Failure> failures;
  std::int64_t updates = 0, skipped = 0, absorbed = 0;  // scaler updates; skipped; expected probing
  std::int64_t events_checked = 0;
  std::vector<IntendedInf> intended;        // 1.3
  std::optional<ScalerProbing> probing;     // 1.3
  std::optional<ZeroGradients> zero_gradients;  // 1.3
  std::vector<SkippedUpdate> skips;             // 1.6: every skipped update, in order
  std::vector<MaskFailure> mask_failures;       // 1.6: -Inf masks a reader made a failure of
};

struct Summary {
  double initial_loss = 0;
  double final_loss = 0;
  double accuracy = 0;  // training-set accuracy after the run, in [0, 1]
  std::int64_t skipped_steps = 0;
  double final_loss_scale = 1;
  std::int64_t low_precision_calls = 0;  // op calls whose kernel ran in fp16/bf16
  std::int64_t total_calls = 0;
  // healthy | failed | gradient_underflow (1.3) | amp_off | reference (an O0 run) |
  // unchecked (inspect off) | interrupted (1.1)
  std::string verdict;
  std::string verdict_text;  // the one line a person reads
};

// bisect-nan: one trial run with a candidate black list.
struct Trial {
  std::int64_t index = 0;
  std::vector<std::string> black_list;  // op types, or module paths at instance granularity
  bool healthy = false;
  std::string reason;  // why not healthy ("" when healthy)
  std::int64_t skipped_steps = 0;
  double final_loss = 0;
};

struct Suggestion {
  std::string ampcheck;      // an ampcheck AMP config (JSON)
  std::string paddle;        // paddle.amp.auto_cast(custom_black_list=[...])
  std::string paddle_fleet;  // strategy.amp_configs = {...}
  std::string pytorch;       // autocast disabled around the named modules
};

struct Bisect {
  std::string granularity;  // "type" or "instance"
  std::optional<NanEvent> producer;  // of the unmodified run
  std::vector<std::string> candidates;  // what ran in low precision, searched over
  bool found = false;
  std::vector<std::string> culprits;    // a 1-minimal set: remove any one and it fails
  std::vector<std::string> suggested_black_list;  // op types to black-list
  std::vector<std::string> suggested_fp32_modules;  // modules to run in fp32
  double max_skipped_fraction = 0;
  double loss_tolerance = 0;  // 0: not checked; else |loss - fp32 loss| / |fp32 loss| allowed
  double reference_loss = 0;  // the fp32 run's final loss when checked
  std::int64_t runs = 0;
  std::vector<Trial> trials;
  Suggestion suggestion;
};

// compare: one level's run, in lock step with the others.
struct LevelRun {
  std::string level;
  std::vector<double> losses;
  double final_loss = 0;
  double accuracy = 0;
  std::int64_t skipped_steps = 0;
};

struct LevelError {
  std::string level;
  double mean = 0;   // relative error against the reference level, mean over steps
  double worst = 0;
  std::int64_t worst_step = 0;
  double growth = 1;  // mean over the last quarter of the steps / mean over the first quarter
};

struct CompareOp {
  std::string name, type, module;
  std::vector<LevelError> levels;  // every level but the reference
};

// 1.11: compare --script: a recorded script beside its fp32 twin (the same script with AMP
// off, from the same seeds), recorded --seeds N times so that its own seed-to-seed spread
// is the yardstick (inspector/twin.h).
struct TwinRun {
  std::uint64_t seed = 0;
  std::vector<double> losses;  // per step, as the recorder read them
};
// 1.12: compare --script: a parameter's gradient at the first step, as the update received
// it, against the fp32 twin's (same weights, same data): relative, ||amp - twin|| / ||twin||.
struct TwinGradient {
  std::string parameter;
  double difference = 0;
};

struct Twin {
  std::string script;
  std::uint64_t seed = 0;          // the AMP run's (its twin's first run has it too)
  std::vector<double> amp_losses;  // per step
  std::string amp_verdict;         // the AMP run's own recorded verdict
  std::vector<TwinRun> fp32;       // the twin's runs, the AMP run's seed first
  std::int64_t window = 1;         // steps per trailing mean
  // Per step (the steps both ran): the trailing mean of |AMP - fp32 of the same seed|, and of
  // the largest |fp32 of another seed - fp32 of the same seed| (empty with one fp32 run).
  std::vector<double> gap, noise;
  std::optional<std::int64_t> departs_at;  // the first step of the departure that lasts to the end
  std::string verdict;  // "within_noise", "departs", "no_yardstick"
  std::string verdict_text;
  // Where a departure is born, as far as the recording shows (its parameters' updates lost
  // to rounding); "" when the recording shows none.
  std::string cause;
  std::optional<std::vector<TwinGradient>> gradients;  // 1.12; largest first
};

// 1.11: compare: where a level's difference from the reference is born, op by op: the op's
// own error (its output against its exact f64 result on the inputs it received: the
// engine's shadow error) beside its output's difference from the reference level.
struct CompareBirth {
  std::string level, name;  // "O2", "fc1/linear#0"
  double local_error = 0;   // mean relative error of the op's own rounding
  double output_error = 0;  // mean relative error of its output against the reference level's
  double share = 0;         // local / output, at most 1: how much of the difference it adds itself
};

struct Compare {
  std::string reference;  // "O0"
  std::vector<LevelRun> runs;
  std::vector<CompareOp> ops;             // per forward op instance, in execution order
  std::vector<std::string> fastest_growing;  // op instance names, fastest first
  std::optional<Twin> twin;  // 1.11: compare --script
  std::optional<std::vector<CompareBirth>> born;  // 1.11: compare of levels, largest own error first
};

// A training that a signal (Ctrl-C, SIGTERM) stopped before its last step: the report
// holds what was seen up to there, and its verdict claims nothing about the steps not run.
struct Interruption {
  std::string signal;  // "SIGINT", "SIGTERM"; "" when an embedding program's stop check asked
  std::int64_t steps_run = 0;        // of the training that was stopped
  std::int64_t steps_requested = 0;  // what it was asked to run (run.steps)
  // bisect-nan: the run that was stopped, numbered as bisect.runs counts them (1: the run
  // as configured, whose steps this report holds; a later one ends the search early).
  // 0 for run and compare, whose steps are the stopped training's.
  std::int64_t bisect_run = 0;
};

// The training noise of the run's configuration, measured by training it with other seeds
// (`ampcheck run --seeds N`): what `ampcheck diff` allows before it calls a change drift.
struct SeedOutcome {
  std::uint64_t seed = 0;
  double final_loss = 0;
  double accuracy = 0;
  std::int64_t skipped_steps = 0;
  std::string verdict;  // as Summary::verdict
};
// An op output or tensor (key as in the numerics) whose fp16/bf16 overflow or underflow
// count was not 0 in some seed: the largest count over the seeds.
struct LowPrecisionSeen {
  std::string key;  // "fc1/linear#0 out", or a tensor key
  LowPrecisionCounts f16, bf16;
};
// An op instance's local error: the largest mean over the seeds.
struct LocalErrorSeen {
  std::string name;
  double mean = 0;
};
struct Spread {
  std::vector<SeedOutcome> seeds;             // the report's own seed first
  std::vector<LowPrecisionSeen> low_precision;  // sorted by key
  std::vector<LocalErrorSeen> local_error;      // sorted by name
};

// 1.4: GPU time of one op type ("linear", "linear_grad", "cast (inserted by AMP)").
struct KernelTypeRow {
  std::string type;
  std::int64_t launches = 0;
  std::int64_t total_ns = 0;        // every kernel (measured)
  std::int64_t matrix_ns = 0;       // of it, kernels that multiply matrices (GEMM, convolution)
  std::int64_t tensor_core_ns = 0;  // of those, on tensor cores
  std::int64_t cuda_core_ns = 0;    // of those, on CUDA cores (the rest: not read from the name)
  bool operator==(const KernelTypeRow&) const = default;
};

// 1.4: an op instance whose kernels did not do what the AMP policy said
// (inspector/kernel_check.h).
struct KernelFinding {
  std::string severity;  // "warning", "note"
  std::string problem;   // wider_kernel, tf32_kernel, other_low_precision, cuda_cores, narrower_kernel
  std::string op;        // the op instance's name, as OpInstance::name
  std::string type, module, phase;
  std::string expected;  // the policy's dtype: "float16"
  std::string kernel;
  std::string input, accumulate, tensor_cores;
  std::int64_t launches = 0;
  std::string reason;
  std::string text;      // the one line the text report prints
  bool operator==(const KernelFinding&) const = default;
};

// 1.4: GPU work no op launched: the step's own (the scaler's unscale, the optimizer's
// update, the loss copied to the host), or the inspector's own statistics.
struct OutsideKernel {
  std::string name;
  std::string owner;  // "step" or "inspector"
  std::int64_t launches = 0;
  std::int64_t total_ns = 0;  // measured
  std::string kind;
  bool operator==(const OutsideKernel&) const = default;
};

// 1.4: what CUPTI saw of a CUDA run (`--cupti on`, the default on the GPU).
struct Kernels {
  bool traced = false;
  std::string not_traced;  // why not, when not traced
  std::int64_t kernels = 0, memcpys = 0, memsets = 0;  // records taken
  std::int64_t attributed = 0;    // joined to an op call (kernels, copies and memsets)
  std::int64_t inspector = 0;     // launched by the inspector's own statistics
  std::int64_t unattributed = 0;  // no op: the step's own work, or a correlation lost
  std::int64_t dropped = 0;       // records CUPTI had no buffer for
  std::int64_t invalid = 0;       // records CUPTI handed back unreadable
  std::int64_t instances_checked = 0;  // op instances whose library GEMMs/convolutions were checked
  std::int64_t kernels_unread = 0;     // such kernels whose name does not say their precision
  std::vector<KernelTypeRow> by_type;
  std::vector<KernelFinding> findings;  // warnings first
  std::vector<OutsideKernel> outside;   // by time, the largest first (at most 20)
  std::vector<std::string> errors;      // CUPTI errors met (the first few)
  std::int64_t warnings() const {  // findings of severity "warning"
    return std::count_if(findings.begin(), findings.end(), [](const KernelFinding& f) { return f.severity == "warning"; });
  }
};

// 1.10: one rank of a job a launcher started (`ampcheck record -- torchrun ...`), as its
// recorder saw it (recorder/ampcheck_recorder/distributed.py).
struct CollectiveRow {  // the collectives of one kind, as they ran
  std::string op;        // "all_reduce", "reduce_scatter", "all_gather", "broadcast", ...
  std::string aten;      // "c10d.allreduce_"
  std::string dtype;     // the dtype it moved
  std::string phase;     // "forward", "backward" (a gradient reduction), "optimizer"
  std::string module;    // where it ran
  std::string function;  // the custom autograd.Function whose backward ran it; "" when none
  std::int64_t calls = 0, elements = 0, first_step = 0;
  std::optional<std::int64_t> ranks;  // a job's rows: the ranks that ran it
};
struct MixedPrecisionAsked {  // what a data-parallel wrapper was asked for
  std::string api;  // "fully_shard" (MixedPrecisionPolicy), "FullyShardedDataParallel", "DistributedDataParallel"
  std::vector<std::string> modules;  // the modules that have it (the first 8)
  std::string param_dtype, reduce_dtype, output_dtype;  // "" when not set
  std::vector<std::string> comm_hooks;  // DDP's registered comm hooks
};
struct RankRecording {
  std::int64_t rank = 0, world_size = 1, local_rank = 0;
  std::string launcher;  // "torchrun", "accelerate launch", "paddle.distributed.launch", "mpirun"
  std::string backend;   // the process group's: "gloo", "nccl"
  bool found_inf_reduced = false;  // a collective ran inside the GradScaler's unscale_ (ShardedGradScaler)
  std::vector<MixedPrecisionAsked> asked;
  std::vector<CollectiveRow> collectives;
  std::vector<std::string> params;  // the parameters checksummed each step, in order
  std::string initial_hashes;       // their checksums before the first update (base64); "" when none
};

// Data parallelism (mpirun -np N): what each rank found and decided, gathered on rank 0.
struct RankOverflow {  // a gradient that overflowed on one rank's shard
  std::int64_t rank = 0;
  std::int64_t step = 0;
  std::string tensor;  // the first parameter whose local gradient was non-finite
};
struct RankDisagreement {  // a step where the ranks did not act alike
  std::int64_t step = 0;
  std::vector<std::int64_t> skipped;  // ranks that skipped the update
  std::vector<std::int64_t> applied;  // ranks that applied it
  std::string detail;
};
struct RankSummary {
  std::int64_t rank = 0;
  std::int64_t rows = 0;             // samples it trained on, over the steps
  std::int64_t local_overflows = 0;  // steps its own gradients held Inf/NaN
  std::int64_t skipped = 0;          // updates it skipped
  std::string final_checksum;        // of its parameters after the last step (hex)
};
// 1.10: what only a recorded job shows (consensus_of_recordings).
struct DistributedFinding {
  std::string kind;  // "reduce_dtype", "gradients_differ", "loss_non_finite", "comm_hook"
  bool failure = false;
  std::int64_t step = 0;  // the first step it was seen
  std::vector<std::int64_t> ranks;
  std::string detail;
};
struct Distributed {
  std::int64_t world_size = 1;
  std::string runtime;            // "mpi"; a recorded job: its launcher and backend, "torchrun (gloo)"
  bool found_inf_reduced = true;  // false only with the debug switch that breaks the consensus
  bool in_agreement = true;       // every step: the same decision, scale and parameters on every rank
  std::vector<RankOverflow> local_overflows;
  std::vector<RankDisagreement> disagreements;
  std::int64_t first_divergence = 0;  // the first step after which the replicas differ; 0: none
  std::string divergence;             // what differed there, in words
  std::vector<RankSummary> ranks;
  // 1.10, recorded jobs: the parameters compared across the ranks (those equal on every rank
  // before the first update) and those not (a shard each rank holds alone); what else the
  // ranks' recordings show; and every rank's collectives, merged.
  std::optional<std::int64_t> compared_params, sharded_params;
  std::vector<DistributedFinding> findings;
  std::vector<CollectiveRow> collectives;
};

// fp8 training (docs/fp8.md): what each cast of each scaled tensor did, step by step, as the
// fp8 watch (inspector/fp8_watch.h) saw it on the tensor's own device.
struct Fp8TensorRecord {
  std::string layer;   // the linear layer's module path
  std::string tensor;  // "input", "weight", "grad_output"
  std::string format;  // "E4M3", "E5M2"
  // Per observed step, in order (one entry each; several calls of the layer in a step:
  // counts summed, the largest amax, the first call's scale):
  std::vector<std::int64_t> steps;
  std::vector<double> amax;   // max |x| of the values cast
  std::vector<double> scale;  // the scale the cast used (inf where a zero amax made one)
  std::vector<std::int64_t> count;
  std::vector<std::int64_t> saturated;  // clamped to +-max (an Inf among them)
  std::vector<std::int64_t> flushed;    // nonzero values that became 0
  std::vector<std::int64_t> zero;       // values that were 0
  std::vector<std::int64_t> nan;
  // The values that neither saturated nor flushed, over every step, by the binade of their
  // fp8 code: binades[i] counts codes in [2^(min_exponent + i), 2^(min_exponent + i + 1)).
  std::int64_t min_exponent = 0;
  std::vector<std::int64_t> binades;
};
struct Fp8FindingRecord {
  std::string kind;  // "zero_amax_infinite_scale", "saturation", "underflow", "te_shape"
  bool failure = false;
  std::string layer, tensor;
  std::int64_t step = 0;   // the first step it was seen
  std::int64_t steps = 0;  // the steps it was seen on
  double share = 0, worst_share = 0;  // saturated or flushed share: at its first step, at worst
  double amax = 0, scale = 0;         // at its first step
  std::string text;
};
struct Fp8Training {
  std::string recipe;  // TransformerEngine's constructor, every keyword given
  std::vector<std::string> layers;  // the linear layers that ran in fp8
  std::vector<std::string> kept;    // those that did not, each with why: "head ([2, 32]: not multiples of 16)"
  std::vector<Fp8TensorRecord> tensors;
  std::vector<Fp8FindingRecord> findings;  // failures first, then by step
};

// 1.10: a region torch.compile compiled in a recorded run (recorder/ampcheck_recorder/
// compiled.py): it ran compiled, unheard op by op; what it computes is read from the graphs
// Inductor compiled (each aten call of the traced program with its output dtype and the
// module path dynamo kept); a failure in it is found by running its last call again eagerly.
struct CompiledOp {
  std::string op;      // ampcheck's name ("linear", "softmax_grad")
  std::string dtype;   // its output's
  std::string module;  // "" outside any module
  std::int64_t count = 0;  // such calls in one run of the graph
};
struct CompiledGraph {
  std::string kind;  // "forward", "backward"
  std::vector<CompiledOp> ops;
};
struct CompiledReplay {
  std::int64_t step = 0;
  std::string why;    // what made it run again eagerly
  std::string found;  // what the eager run found: "linear in 'emb'", or why it found nothing
};
struct CompiledRegion {
  std::string region;  // the module's path ("" the model) or the function's name
  std::int64_t calls = 0, backward_calls = 0;
  std::vector<CompiledGraph> graphs;
  std::vector<CompiledReplay> replays;
};

struct Report {
  std::string schema_version = std::to_string(kSchemaMajor) + "." + std::to_string(kSchemaMinor);
  RunInfo run;
  std::optional<Interruption> interrupted;  // absent when every requested step ran
  std::vector<StepRecord> steps;
  std::vector<OpTypeRow> op_types;
  std::vector<InsertedCasts> inserted_casts;
  std::vector<OpInstance> ops;
  std::vector<TensorNumerics> tensors;
  std::vector<Swamping> swamping;
  NonFinite nonfinite;
  Summary summary;
  std::optional<Bisect> bisect;
  std::optional<Compare> compare;
  std::optional<Spread> spread;  // 1.2: `run --seeds N`; absent for one seed
  std::optional<Kernels> kernels;  // 1.4: CUDA runs with CUPTI (traced or saying why not)
  std::optional<Distributed> distributed;  // 1.5: data-parallel runs (several ranks)
  std::optional<Fp8Training> fp8;  // 1.9: runs that train in fp8 with an inspection
  std::optional<RankRecording> rank;  // 1.10: one rank of a recorded job
  std::optional<std::vector<CompiledRegion>> compiled;  // 1.10: recorded runs with torch.compile
};

}  // namespace ampcheck::reports
