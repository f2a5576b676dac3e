#include "reports/json.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>  // std::from_chars for schema_version
#include <cmath>
#include <concepts>
#include <cstdio>   // std::fopen: errno names why a file cannot be read
#include <cstring>  // std::strerror
#include <limits>
#include <type_traits>

#include "common/json_text.h"
#include "reports/atomic_file.h"

namespace ampcheck::reports {
namespace {

using ordered_json = nlohmann::ordered_json;
using json = nlohmann::json;

// ---------------------------------------------------------------------------------------
// The field list: each struct is described once, in member order, and both the writer and
// the reader walk that description, so they cannot disagree on a name or miss a field.
// `v(key, member)` is called per field; S is the struct, const for the writer.

template <class S, class T>
concept Is = std::same_as<std::remove_const_t<S>, T>;

// A field added in a minor version after 1.0, as `v(key, member, Since{minor})`: written
// always; a file of an older minor lacks it and reads it as its default (empty), while a
// file of that minor or newer must have it. (Optional members need no tag: they may be
// absent in any version.)
struct Since {
  int minor;
};

// NonFinite::propagators holds (op type, events) pairs; in JSON they are named objects.
using Propagator = std::pair<std::string, std::int64_t>;

template <class V, Is<Propagator> S>
constexpr void fields(V& v, S& s) {
  v("type", s.first);
  v("events", s.second);
}
template <class V, Is<Versions> S>
constexpr void fields(V& v, S& s) {
  v("ampcheck", s.ampcheck);
  v("build", s.build);
  v("cpu_conversions", s.cpu_conversions);
}
template <class V, Is<AmpSettings> S>
constexpr void fields(V& v, S& s) {
  v("semantics", s.semantics);
  v("config_file", s.config_file);
  v("custom_white_list", s.custom_white_list);
  v("custom_black_list", s.custom_black_list);
  v("fp32_modules", s.fp32_modules);
  v("loss_scaling", s.loss_scaling);
  v("init_loss_scaling", s.init_loss_scaling);
}
template <class V, Is<DeviceMemory> S>
constexpr void fields(V& v, S& s) {
  v("peak_allocated_bytes", s.peak_allocated_bytes);
  v("peak_reserved_bytes", s.peak_reserved_bytes);
  v("device_allocations", s.device_allocations);
  v("cache_hits", s.cache_hits);
  v("cache_misses", s.cache_misses);
  v("oom_retries", s.oom_retries);
}
template <class V, Is<ScriptOutcome> S>
constexpr void fields(V& v, S& s) {
  v("exit_code", s.exit_code);
  v("error", s.error);
}
template <class V, Is<LrSchedule> S>
constexpr void fields(V& v, S& s) {
  v("scheduler", s.scheduler);
  v("first", s.first);
  v("peak", s.peak);
  v("peak_step", s.peak_step);
  v("last", s.last);
}
template <class V, Is<RunInfo> S>
constexpr void fields(V& v, S& s) {
  v("command", s.command);
  v("model", s.model);
  v("model_description", s.model_description);
  v("parameters", s.parameters);
  v("level", s.level);
  v("dtype", s.dtype);
  v("device", s.device);
  v("seed", s.seed);
  v("steps", s.steps);
  v("batch", s.batch);
  v("fixed_batch", s.fixed_batch);  // 1.6; optional (an ONNX export with a fixed batch size)
  v("lr", s.lr);
  v("optimizer", s.optimizer);
  v("inspect", s.inspect);
  v("inspect_every", s.inspect_every);  // 1.7; optional (full mode, sampled)
  v("amp", s.amp);
  v("versions", s.versions);
  v("device_memory", s.device_memory);
  v("framework", s.framework);                  // 1.6; optional (recorded runs), as the five below
  v("framework_version", s.framework_version);
  v("script", s.script);
  v("script_args", s.script_args);
  v("script_outcome", s.script_outcome);
  v("recorder_error", s.recorder_error);
  v("lr_schedule", s.lr_schedule);      // 1.10; optional (recorded runs whose rate moved)
  v("micro_batches", s.micro_batches);  // 1.10; optional (gradient accumulation)
  v("listen", s.listen);                // 1.10; optional (recorded runs), as the one below
  v("listened_steps", s.listened_steps);
}
template <class V, Is<StepRecord> S>
constexpr void fields(V& v, S& s) {
  v("step", s.step);
  v("loss", s.loss);
  v("loss_scale", s.loss_scale);
  v("found_inf", s.found_inf);
  v("skipped", s.skipped);
  v("params_hash", s.params_hash);  // 1.10; optional (a rank of a recorded job), as the three below
  v("grads_hash", s.grads_hash);
  v("param_hashes", s.param_hashes);
  v("grad_hashes", s.grad_hashes);
}
template <class V, Is<DtypeCounts> S>
constexpr void fields(V& v, S& s) {
  v("fp16", s.fp16);
  v("bf16", s.bf16);
  v("fp32", s.fp32);
  v("other", s.other);
  v("fp8", s.fp8);  // 1.8; optional (fp8 runs, and the recorder's)
}
template <class V, Is<OpTypeRow> S>
constexpr void fields(V& v, S& s) {
  v("type", s.type);
  v("calls", s.calls);
}
template <class V, Is<InsertedCasts> S>
constexpr void fields(V& v, S& s) {
  v("from", s.from);
  v("to", s.to);
  v("calls", s.calls);
}
template <class V, Is<Histogram> S>
constexpr void fields(V& v, S& s) {
  v("min_exponent", s.min_exponent);
  v("counts", s.counts);
  v("zero", s.zero);
  v("nan", s.nan);
  v("pos_inf", s.pos_inf);
  v("neg_inf", s.neg_inf);
  v("below", s.below);
  v("above", s.above);
}
template <class V, Is<LowPrecisionCounts> S>
constexpr void fields(V& v, S& s) {
  v("overflow", s.overflow);
  v("rounds_to_max", s.rounds_to_max);
  v("underflow", s.underflow);
  v("subnormal", s.subnormal);
}
template <class V, Is<Numerics> S>
constexpr void fields(V& v, S& s) {
  v("count", s.count);
  v("tensors", s.tensors);
  v("zeros", s.zeros);
  v("nan", s.nan);
  v("pos_inf", s.pos_inf);
  v("neg_inf", s.neg_inf);
  v("f16", s.f16);
  v("bf16", s.bf16);
  v("min", s.min);
  v("max", s.max);
  v("absmax", s.absmax);
  v("min_nonzero_abs", s.min_nonzero_abs);
  v("mean", s.mean);
  v("rms", s.rms);
  v("dynamic_range_log2", s.dynamic_range_log2);
  v("histogram", s.histogram);
}
template <class V, Is<LocalError> S>
constexpr void fields(V& v, S& s) {
  v("count", s.count);
  v("nonfinite", s.nonfinite);
  v("mean", s.mean);
  v("mean_floor", s.mean_floor);
  v("worst", s.worst);
  v("floor_at_worst", s.floor_at_worst);
  v("worst_step", s.worst_step);
  v("max_abs", s.max_abs);
}
template <class V, Is<CastCount> S>
constexpr void fields(V& v, S& s) {
  v("input", s.input);
  v("slot", s.slot);
  v("from", s.from);
  v("to", s.to);
  v("calls", s.calls);
}
template <class V, Is<KernelCount> S>
constexpr void fields(V& v, S& s) {
  v("name", s.name);
  v("calls", s.calls);
}
template <class V, Is<NamedNumerics> S>
constexpr void fields(V& v, S& s) {
  v("role", s.role);
  v("numerics", s.numerics);
}
template <class V, Is<GpuKernel> S>
constexpr void fields(V& v, S& s) {
  v("name", s.name);
  v("grid", s.grid);
  v("block", s.block);
  v("launches", s.launches);
  v("total_ns", s.total_ns);
  v("min_ns", s.min_ns);
  v("max_ns", s.max_ns);
  v("input", s.input);
  v("accumulate", s.accumulate);
  v("tensor_cores", s.tensor_cores);
  v("kind", s.kind);
}
template <class V, Is<OpInstance> S>
constexpr void fields(V& v, S& s) {
  v("name", s.name);
  v("type", s.type);
  v("module", s.module);
  v("phase", s.phase);
  v("occurrence", s.occurrence);
  v("calls", s.calls);
  v("reason", s.reason);
  v("dtypes_in", s.dtypes_in);
  v("compute", s.compute);
  v("out", s.out);
  v("kernel_dtypes", s.kernel_dtypes);
  v("casts", s.casts);
  v("kernels", s.kernels);
  v("numerics", s.numerics);
  v("local_error", s.local_error);
  v("range_loss", s.range_loss);  // 1.3; optional
  v("gpu_kernels", s.gpu_kernels);  // 1.4; optional (CUDA runs with CUPTI)
}
template <class V, Is<TensorNumerics> S>
constexpr void fields(V& v, S& s) {
  v("key", s.key);
  v("numerics", s.numerics);
}
template <class V, Is<Swamping> S>
constexpr void fields(V& v, S& s) {
  v("parameter", s.parameter);
  v("updates", s.updates);
  v("fraction", s.fraction);
}
template <class V, Is<TensorRange> S>
constexpr void fields(V& v, S& s) {
  v("role", s.role);
  v("dtype", s.dtype);
  v("shape", s.shape);
  v("nan", s.nan);
  v("pos_inf", s.pos_inf);
  v("neg_inf", s.neg_inf);
  v("min", s.min);
  v("max", s.max);
  v("absmax", s.absmax);
}
template <class V, Is<RangeLoss> S>
constexpr void fields(V& v, S& s) {
  v("underflow", s.underflow);
  v("overflow", s.overflow);
  v("first_step", s.first_step);
  v("first_kind", s.first_kind);
  v("first_value", s.first_value);
}
template <class V, Is<LostValue> S>
constexpr void fields(V& v, S& s) {
  v("input", s.input);
  v("op", s.op);
  v("module", s.module);
  v("phase", s.phase);
  v("step", s.step);
  v("inserted_cast", s.inserted_cast);
  v("kind", s.kind);
  v("dtype", s.dtype);
  v("value", s.value);
  v("count", s.count);
  v("limit", s.limit);
}
template <class V, Is<NanEvent> S>
constexpr void fields(V& v, S& s) {
  v("step", s.step);
  v("phase", s.phase);
  v("op", s.op);
  v("module", s.module);
  v("inputs", s.inputs);
  v("out_nan", s.out_nan);
  v("out_pos_inf", s.out_pos_inf);
  v("out_neg_inf", s.out_neg_inf);
  v("lost", s.lost, Since{3});
}
template <class V, Is<Failure> S>
constexpr void fields(V& v, S& s) {
  v("kind", s.kind);
  v("step", s.step);
  v("detail", s.detail);
}
template <class V, Is<IntendedInf> S>
constexpr void fields(V& v, S& s) {
  v("op", s.op);
  v("module", s.module);
  v("events", s.events);
  v("values", s.values);
  v("readers", s.readers);
  v("reason", s.reason);
}
template <class V, Is<ScalerProbing> S>
constexpr void fields(V& v, S& s) {
  v("first_update", s.first_update);
  v("last_update", s.last_update);
  v("skipped", s.skipped);
  v("scale_from", s.scale_from);
  v("scale_to", s.scale_to);
  v("suggested_scale", s.suggested_scale);
  v("excused", s.excused);
}
template <class V, Is<ZeroGradients> S>
constexpr void fields(V& v, S& s) {
  v("first_step", s.first_step);
  v("steps", s.steps);
  v("stepped", s.stepped);
  v("dtype", s.dtype);
  v("scale_needed", s.scale_needed);
  v("evidence", s.evidence);
  v("loss", s.loss);
  v("initial_loss", s.initial_loss);
}
template <class V, Is<SkippedUpdate> S>
constexpr void fields(V& v, S& s) {
  v("update", s.update);
  v("scale_before", s.scale_before);
  v("scale_after", s.scale_after);
  v("reading", s.reading);
  v("cause", s.cause);
  v("event", s.event);
  v("params", s.params);
  v("param_names", s.param_names);
  v("text", s.text);
}
template <class V, Is<MaskFailure> S>
constexpr void fields(V& v, S& s) {
  v("op", s.op);
  v("module", s.module);
  v("step", s.step);
  v("reader", s.reader);
  v("reader_module", s.reader_module);
  v("made_non_finite", s.made_non_finite);
}
template <class V, Is<NonFinite> S>
constexpr void fields(V& v, S& s) {
  v("producer", s.producer);
  v("producers", s.producers, Since{3});
  v("propagator_events", s.propagator_events);
  v("propagators", s.propagators);
  v("failures", s.failures);
  v("updates", s.updates);
  v("skipped", s.skipped);
  v("absorbed", s.absorbed);
  v("events_checked", s.events_checked);
  v("intended", s.intended, Since{3});
  v("probing", s.probing);                // 1.3; optional
  v("zero_gradients", s.zero_gradients);  // 1.3; optional
  v("skips", s.skips, Since{6});
  v("mask_failures", s.mask_failures, Since{6});
}
template <class V, Is<Summary> S>
constexpr void fields(V& v, S& s) {
  v("initial_loss", s.initial_loss);
  v("final_loss", s.final_loss);
  v("accuracy", s.accuracy);
  v("skipped_steps", s.skipped_steps);
  v("final_loss_scale", s.final_loss_scale);
  v("low_precision_calls", s.low_precision_calls);
  v("total_calls", s.total_calls);
  v("verdict", s.verdict);
  v("verdict_text", s.verdict_text);
}
template <class V, Is<Trial> S>
constexpr void fields(V& v, S& s) {
  v("index", s.index);
  v("black_list", s.black_list);
  v("healthy", s.healthy);
  v("reason", s.reason);
  v("skipped_steps", s.skipped_steps);
  v("final_loss", s.final_loss);
}
template <class V, Is<Suggestion> S>
constexpr void fields(V& v, S& s) {
  v("ampcheck", s.ampcheck);
  v("paddle", s.paddle);
  v("paddle_fleet", s.paddle_fleet);
  v("pytorch", s.pytorch);
}
template <class V, Is<Bisect> S>
constexpr void fields(V& v, S& s) {
  v("granularity", s.granularity);
  v("producer", s.producer);
  v("candidates", s.candidates);
  v("found", s.found);
  v("culprits", s.culprits);
  v("suggested_black_list", s.suggested_black_list);
  v("suggested_fp32_modules", s.suggested_fp32_modules);
  v("max_skipped_fraction", s.max_skipped_fraction);
  v("loss_tolerance", s.loss_tolerance);
  v("reference_loss", s.reference_loss);
  v("runs", s.runs);
  v("trials", s.trials);
  v("suggestion", s.suggestion);
}
template <class V, Is<LevelRun> S>
constexpr void fields(V& v, S& s) {
  v("level", s.level);
  v("losses", s.losses);
  v("final_loss", s.final_loss);
  v("accuracy", s.accuracy);
  v("skipped_steps", s.skipped_steps);
}
template <class V, Is<LevelError> S>
constexpr void fields(V& v, S& s) {
  v("level", s.level);
  v("mean", s.mean);
  v("worst", s.worst);
  v("worst_step", s.worst_step);
  v("growth", s.growth);
}
template <class V, Is<CompareOp> S>
constexpr void fields(V& v, S& s) {
  v("name", s.name);
  v("type", s.type);
  v("module", s.module);
  v("levels", s.levels);
}
template <class V, Is<TwinRun> S>
constexpr void fields(V& v, S& s) {
  v("seed", s.seed);
  v("losses", s.losses);
}
template <class V, Is<Twin> S>
constexpr void fields(V& v, S& s) {
  v("script", s.script);
  v("seed", s.seed);
  v("amp_losses", s.amp_losses);
  v("amp_verdict", s.amp_verdict);
  v("fp32", s.fp32);
  v("window", s.window);
  v("gap", s.gap);
  v("noise", s.noise);
  v("departs_at", s.departs_at);
  v("verdict", s.verdict);
  v("verdict_text", s.verdict_text);
  v("cause", s.cause);
  v("gradients", s.gradients);  // 1.12; optional
}
template <class V, Is<TwinGradient> S>
constexpr void fields(V& v, S& s) {
  v("parameter", s.parameter);
  v("difference", s.difference);
}
template <class V, Is<CompareBirth> S>
constexpr void fields(V& v, S& s) {
  v("level", s.level);
  v("name", s.name);
  v("local_error", s.local_error);
  v("output_error", s.output_error);
  v("share", s.share);
}
template <class V, Is<Compare> S>
constexpr void fields(V& v, S& s) {
  v("reference", s.reference);
  v("runs", s.runs);
  v("ops", s.ops);
  v("fastest_growing", s.fastest_growing);
  v("twin", s.twin);  // 1.11; optional (compare --script)
  v("born", s.born);  // 1.11; optional (compare of levels)
}
template <class V, Is<Interruption> S>
constexpr void fields(V& v, S& s) {
  v("signal", s.signal);
  v("steps_run", s.steps_run);
  v("steps_requested", s.steps_requested);
  v("bisect_run", s.bisect_run);
}
template <class V, Is<SeedOutcome> S>
constexpr void fields(V& v, S& s) {
  v("seed", s.seed);
  v("final_loss", s.final_loss);
  v("accuracy", s.accuracy);
  v("skipped_steps", s.skipped_steps);
  v("verdict", s.verdict);
}
template <class V, Is<LowPrecisionSeen> S>
constexpr void fields(V& v, S& s) {
  v("key", s.key);
  v("f16", s.f16);
  v("bf16", s.bf16);
}
template <class V, Is<LocalErrorSeen> S>
constexpr void fields(V& v, S& s) {
  v("name", s.name);
  v("mean", s.mean);
}
template <class V, Is<RankOverflow> S>
constexpr void fields(V& v, S& s) {
  v("rank", s.rank);
  v("step", s.step);
  v("tensor", s.tensor);
}
template <class V, Is<RankDisagreement> S>
constexpr void fields(V& v, S& s) {
  v("step", s.step);
  v("skipped", s.skipped);
  v("applied", s.applied);
  v("detail", s.detail);
}
template <class V, Is<RankSummary> S>
constexpr void fields(V& v, S& s) {
  v("rank", s.rank);
  v("rows", s.rows);
  v("local_overflows", s.local_overflows);
  v("skipped", s.skipped);
  v("final_checksum", s.final_checksum);
}
template <class V, Is<CollectiveRow> S>
constexpr void fields(V& v, S& s) {
  v("op", s.op);
  v("aten", s.aten);
  v("dtype", s.dtype);
  v("phase", s.phase);
  v("module", s.module);
  v("function", s.function);
  v("calls", s.calls);
  v("elements", s.elements);
  v("first_step", s.first_step);
  v("ranks", s.ranks);
}
template <class V, Is<MixedPrecisionAsked> S>
constexpr void fields(V& v, S& s) {
  v("api", s.api);
  v("modules", s.modules);
  v("param_dtype", s.param_dtype);
  v("reduce_dtype", s.reduce_dtype);
  v("output_dtype", s.output_dtype);
  v("comm_hooks", s.comm_hooks);
}
template <class V, Is<RankRecording> S>
constexpr void fields(V& v, S& s) {
  v("rank", s.rank);
  v("world_size", s.world_size);
  v("local_rank", s.local_rank);
  v("launcher", s.launcher);
  v("backend", s.backend);
  v("found_inf_reduced", s.found_inf_reduced);
  v("asked", s.asked);
  v("collectives", s.collectives);
  v("params", s.params);
  v("initial_hashes", s.initial_hashes);
}
template <class V, Is<DistributedFinding> S>
constexpr void fields(V& v, S& s) {
  v("kind", s.kind);
  v("failure", s.failure);
  v("step", s.step);
  v("ranks", s.ranks);
  v("detail", s.detail);
}
template <class V, Is<Distributed> S>
constexpr void fields(V& v, S& s) {
  v("world_size", s.world_size);
  v("runtime", s.runtime);
  v("found_inf_reduced", s.found_inf_reduced);
  v("in_agreement", s.in_agreement);
  v("local_overflows", s.local_overflows);
  v("disagreements", s.disagreements);
  v("first_divergence", s.first_divergence);
  v("divergence", s.divergence);
  v("ranks", s.ranks);
  v("compared_params", s.compared_params);  // 1.10; optional (recorded jobs), as the two below
  v("sharded_params", s.sharded_params);
  v("findings", s.findings, Since{10});
  v("collectives", s.collectives, Since{10});
}
template <class V, Is<Fp8TensorRecord> S>
constexpr void fields(V& v, S& s) {
  v("layer", s.layer);
  v("tensor", s.tensor);
  v("format", s.format);
  v("steps", s.steps);
  v("amax", s.amax);
  v("scale", s.scale);
  v("count", s.count);
  v("saturated", s.saturated);
  v("flushed", s.flushed);
  v("zero", s.zero);
  v("nan", s.nan);
  v("min_exponent", s.min_exponent);
  v("binades", s.binades);
}
template <class V, Is<Fp8FindingRecord> S>
constexpr void fields(V& v, S& s) {
  v("kind", s.kind);
  v("failure", s.failure);
  v("layer", s.layer);
  v("tensor", s.tensor);
  v("step", s.step);
  v("steps", s.steps);
  v("share", s.share);
  v("worst_share", s.worst_share);
  v("amax", s.amax);
  v("scale", s.scale);
  v("text", s.text);
}
template <class V, Is<Fp8Training> S>
constexpr void fields(V& v, S& s) {
  v("recipe", s.recipe);
  v("layers", s.layers);
  v("kept", s.kept);
  v("tensors", s.tensors);
  v("findings", s.findings);
}
template <class V, Is<Spread> S>
constexpr void fields(V& v, S& s) {
  v("seeds", s.seeds);
  v("low_precision", s.low_precision);
  v("local_error", s.local_error);
}
template <class V, Is<KernelTypeRow> S>
constexpr void fields(V& v, S& s) {
  v("type", s.type);
  v("launches", s.launches);
  v("total_ns", s.total_ns);
  v("matrix_ns", s.matrix_ns);
  v("tensor_core_ns", s.tensor_core_ns);
  v("cuda_core_ns", s.cuda_core_ns);
}
template <class V, Is<KernelFinding> S>
constexpr void fields(V& v, S& s) {
  v("severity", s.severity);
  v("problem", s.problem);
  v("op", s.op);
  v("type", s.type);
  v("module", s.module);
  v("phase", s.phase);
  v("expected", s.expected);
  v("kernel", s.kernel);
  v("input", s.input);
  v("accumulate", s.accumulate);
  v("tensor_cores", s.tensor_cores);
  v("launches", s.launches);
  v("reason", s.reason);
  v("text", s.text);
}
template <class V, Is<OutsideKernel> S>
constexpr void fields(V& v, S& s) {
  v("name", s.name);
  v("owner", s.owner);
  v("launches", s.launches);
  v("total_ns", s.total_ns);
  v("kind", s.kind);
}
template <class V, Is<Kernels> S>
constexpr void fields(V& v, S& s) {
  v("traced", s.traced);
  v("not_traced", s.not_traced);
  v("kernels", s.kernels);
  v("memcpys", s.memcpys);
  v("memsets", s.memsets);
  v("attributed", s.attributed);
  v("inspector", s.inspector);
  v("unattributed", s.unattributed);
  v("dropped", s.dropped);
  v("invalid", s.invalid);
  v("instances_checked", s.instances_checked);
  v("kernels_unread", s.kernels_unread);
  v("by_type", s.by_type);
  v("findings", s.findings);
  v("outside", s.outside);
  v("errors", s.errors);
}
// The kernels command's report (reports/kernels_report.h).
template <class V, Is<PrecisionShare> S>
constexpr void fields(V& v, S& s) {
  v("precision", s.precision);
  v("tensor_cores", s.tensor_cores);
  v("ns", s.ns);
}
template <class V, Is<ProfileOp> S>
constexpr void fields(V& v, S& s) {
  v("name", s.name);
  v("type", s.type);
  v("phase", s.phase);
  v("module", s.module);
  v("policy", s.policy);
  v("expected", s.expected);
  v("calls", s.calls);
  v("launches", s.launches);
  v("total_ns", s.total_ns);
  v("matrix_ns", s.matrix_ns);
  v("shares", s.shares);
  v("flops", s.flops);
  v("input_dims", s.input_dims);
  v("input_types", s.input_types);
  v("kernels", s.kernels);
}
template <class V, Is<FallbackCost> S>
constexpr void fields(V& v, S& s) {
  v("op", s.op);
  v("gpu_ns", s.gpu_ns);
  v("flops", s.flops);
  v("at_rate_ns", s.at_rate_ns);
  v("rate", s.rate);
}
template <class V, Is<Unattributable> S>
constexpr void fields(V& v, S& s) {
  v("reason", s.reason);
  v("kernels", s.kernels);
  v("ns", s.ns);
  v("top", s.top);
}
template <class V, Is<CounterCheck> S>
constexpr void fields(V& v, S& s) {
  v("kernel", s.kernel);
  v("name_tensor_cores", s.name_tensor_cores);
  v("counters_tensor_cores", s.counters_tensor_cores);
  v("name_precision", s.name_precision);
  v("counters_precision", s.counters_precision);
  v("metrics", s.metrics);
  v("agrees", s.agrees);
}
template <class V, Is<ProfileRank> S>
constexpr void fields(V& v, S& s) {
  v("source", s.source);
  v("format", s.format);
  v("rank", s.rank);
  v("devices", s.devices);
  v("expect", s.expect);
  v("expect_note", s.expect_note);
  v("kernels", s.kernels);
  v("kernel_ns", s.kernel_ns);
  v("attributed", s.attributed);
  v("attributed_ns", s.attributed_ns);
  v("launched_ns", s.launched_ns);
  v("by_external_id", s.by_external_id);
  v("no_links", s.no_links);
  v("unattributable", s.unattributable);
  v("notes", s.notes);
  v("check", s.check);
  v("shares", s.shares);
  v("matrix_ns", s.matrix_ns);
  v("types", s.types);
  v("instances", s.instances);
  v("fallbacks", s.fallbacks);
  v("fallback_ns", s.fallback_ns);
  v("fallback_at_rate_ns", s.fallback_at_rate_ns);
  v("cost_text", s.cost_text);
  v("counters", s.counters);
  v("counter_disagreements", s.counter_disagreements);
  v("verdict", s.verdict);
  v("verdict_text", s.verdict_text);
}
template <class V, Is<RankDifference> S>
constexpr void fields(V& v, S& s) {
  v("what", s.what);
  v("per_rank", s.per_rank);
}
template <class V, Is<KernelsReport> S>
constexpr void fields(V& v, S& s) {
  v("ampcheck", s.ampcheck);
  v("profile", s.profile);
  v("expect", s.expect);
  v("ranks", s.ranks);
  v("differences", s.differences);
  v("verdict", s.verdict);
  v("verdict_text", s.verdict_text);
}

// schema_version is not walked here: the writer writes the version it implements and the
// reader checks it before anything else (see to_json and from_json).
template <class V, Is<CompiledOp> S>
constexpr void fields(V& v, S& s) {
  v("op", s.op);
  v("dtype", s.dtype);
  v("module", s.module);
  v("count", s.count);
}
template <class V, Is<CompiledGraph> S>
constexpr void fields(V& v, S& s) {
  v("kind", s.kind);
  v("ops", s.ops);
}
template <class V, Is<CompiledReplay> S>
constexpr void fields(V& v, S& s) {
  v("step", s.step);
  v("why", s.why);
  v("found", s.found);
}
template <class V, Is<CompiledRegion> S>
constexpr void fields(V& v, S& s) {
  v("region", s.region);
  v("calls", s.calls);
  v("backward_calls", s.backward_calls);
  v("graphs", s.graphs);
  v("replays", s.replays);
}
template <class V, Is<Report> S>
constexpr void fields(V& v, S& s) {
  v("run", s.run);
  v("interrupted", s.interrupted);  // 1.1; optional, so a 1.0 file reads as complete
  v("steps", s.steps);
  v("op_types", s.op_types);
  v("inserted_casts", s.inserted_casts);
  v("ops", s.ops);
  v("tensors", s.tensors);
  v("swamping", s.swamping);
  v("nonfinite", s.nonfinite);
  v("summary", s.summary);
  v("bisect", s.bisect);
  v("compare", s.compare);
  v("spread", s.spread);  // 1.2; optional
  v("kernels", s.kernels);  // 1.4; optional (CUDA runs with CUPTI)
  v("distributed", s.distributed);  // 1.5; optional (several ranks)
  v("fp8", s.fp8);  // 1.9; optional (fp8 training)
  v("rank", s.rank);  // 1.10; optional (a rank of a recorded job)
  v("compiled", s.compiled);  // 1.10; optional (a recorded run with torch.compile)
}

// GCC evaluates the guard below (a default value of each struct, strings and vectors
// included, walked at compile time); clang 14 with libstdc++ 12 cannot, so the guard is
// the main (GCC) build's and the clang build of the fuzzers relies on it.
#if !defined(__clang__)
// The guard: a member added to a struct in report.h fails the build here until its
// fields() lists it (else the writer and the reader would silently drop it). Members are
// counted as the arity of aggregate initialisation; fields() by walking a default value.
struct AnyMember {
  template <class T>
  operator T() const;  // never defined: only asked whether the conversion exists
};
template <class S, class... A>
consteval std::size_t member_count() {
  if constexpr (requires { S{A{}..., AnyMember{}}; })
    return member_count<S, A..., AnyMember>();
  else
    return sizeof...(A);
}
struct FieldCounter {
  std::size_t n = 0;
  template <class T>
  constexpr void operator()(const char*, T&) { ++n; }
  template <class T>
  constexpr void operator()(const char*, T&, Since) { ++n; }
};
template <class S>
consteval std::size_t field_count() {
  S s{};
  FieldCounter counter;
  fields(counter, s);
  return counter.n;
}
template <class S>
struct EveryMemberHasAField {
  static_assert(member_count<S>() == field_count<S>(),
                "a member of this report.h struct is missing from its fields() in reports/json.cpp");
  static constexpr bool value = true;
};
template <class... S>
inline constexpr bool kEveryMemberHasAField = (EveryMemberHasAField<S>::value && ...);
static_assert(kEveryMemberHasAField<
              Versions, AmpSettings, DeviceMemory, RunInfo, StepRecord, DtypeCounts, OpTypeRow, InsertedCasts,
              Histogram, LowPrecisionCounts, Numerics, LocalError, CastCount, KernelCount,
              NamedNumerics, OpInstance, TensorNumerics, Swamping, TensorRange, RangeLoss, LostValue,
              NanEvent, Failure, IntendedInf, ScalerProbing, ZeroGradients, NonFinite, Summary, Trial, Suggestion, Bisect, LevelRun, LevelError, CompareOp, Compare, TwinRun, Twin, TwinGradient, CompareBirth,
              Interruption, SeedOutcome, LowPrecisionSeen, LocalErrorSeen, Spread, GpuKernel, KernelTypeRow,
              KernelFinding, OutsideKernel, Kernels, RankOverflow, RankDisagreement, RankSummary, Distributed,
              PrecisionShare, ProfileOp, FallbackCost, Unattributable, CounterCheck, ProfileRank, RankDifference,
              SkippedUpdate, MaskFailure, ScriptOutcome, LrSchedule, CollectiveRow, MixedPrecisionAsked,
              RankRecording, DistributedFinding, CompiledOp, CompiledGraph, CompiledReplay, CompiledRegion,
              Fp8TensorRecord, Fp8FindingRecord,
              Fp8Training>);
// Report's default schema_version is not constexpr, so fields(Report) cannot be walked
// here: its members are counted by hand (schema_version, written apart, and the 18 of
// fields(Report)), and the test of the top-level keys checks fields(Report) itself.
static_assert(member_count<Report>() == 1 + 18,
              "Report gained a member: add it to fields(Report) in reports/json.cpp");
static_assert(member_count<KernelsReport>() == 1 + 7,
              "KernelsReport gained a member: add it to fields(KernelsReport) in reports/json.cpp");
#endif  // !__clang__

template <class T>
inline constexpr bool is_vector = false;
template <class T>
inline constexpr bool is_vector<std::vector<T>> = true;
template <class T>
inline constexpr bool is_optional = false;
template <class T>
inline constexpr bool is_optional<std::optional<T>> = true;

// ---------------------------------------------------------------------------------------
// Writer

template <class T>
ordered_json encode(const T& value);

struct ObjectWriter {
  ordered_json& object;
  template <class T>
  void operator()(const char* key, const T& value) {
    if constexpr (is_optional<T>) {
      if (value) object[key] = encode(*value);  // absent when empty
    } else {
      object[key] = encode(value);
    }
  }
  template <class T>
  void operator()(const char* key, const T& value, Since) {
    (*this)(key, value);
  }
};

// JSON has no NaN or infinity; they are strings, which the reader turns back.
ordered_json encode_double(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

template <class T>
ordered_json encode(const T& value) {
  if constexpr (std::is_same_v<T, double>) {
    return encode_double(value);
  } else if constexpr (std::is_integral_v<T> || std::is_same_v<T, std::string>) {
    return value;
  } else if constexpr (is_vector<T>) {
    ordered_json array = ordered_json::array();
    for (const auto& element : value) array.push_back(encode(element));
    return array;
  } else {
    ordered_json object = ordered_json::object();
    ObjectWriter writer{object};
    fields(writer, value);
    return object;
  }
}

// ---------------------------------------------------------------------------------------
// Reader: every value is read with its path ("steps[3].loss"), and every error names the
// source and that path.

class Reader {
 public:
  // minor: the file's schema minor version, which tells a field added since (Since) that
  // is missing from one that must have it.
  Reader(std::string_view source, int minor) : source_(source), minor_(minor) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    if (path.empty()) throw ReportError(fmt::format("{}: {}", source_, what));
    throw ReportError(fmt::format("{}: {}: {}", source_, path, what));
  }
  [[noreturn]] void expected(const std::string& path, std::string_view what, const json& got) const {
    fail(path, fmt::format("expected {}, got {}", what, shown(got)));
  }

  template <class T>
  void read(const json& value, const std::string& path, T& out) const {
    if constexpr (std::is_same_v<T, double>) {
      out = read_double(value, path);
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!value.is_boolean()) expected(path, "true or false", value);
      out = value.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      out = read_integer<T>(value, path);
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!value.is_string()) expected(path, "a string", value);
      out = value.get<std::string>();
    } else if constexpr (is_vector<T>) {
      if (!value.is_array()) expected(path, "an array", value);
      out.clear();
      out.resize(value.size());
      for (std::size_t i = 0; i < value.size(); ++i)
        read(value[i], fmt::format("{}[{}]", path, i), out[i]);
    } else {
      if (!value.is_object()) expected(path, "an object", value);
      ObjectReader reader{*this, value, path};
      fields(reader, out);
    }
  }

 private:
  struct ObjectReader {
    const Reader& reader;
    const json& object;
    const std::string& path;
    template <class T>
    void operator()(const char* key, T& out) {
      const std::string child = path.empty() ? std::string(key) : path + "." + key;
      const auto it = object.find(key);
      if constexpr (is_optional<T>) {
        if (it == object.end()) {
          out.reset();
        } else {
          out.emplace();
          reader.read(*it, child, *out);
        }
      } else {
        if (it == object.end()) reader.fail(path, fmt::format("missing field \"{}\"", key));
        reader.read(*it, child, out);
      }
    }
    template <class T>
    void operator()(const char* key, T& out, Since since) {
      if (reader.minor_ < since.minor && object.find(key) == object.end()) {
        out = T{};  // a file from before the field
        return;
      }
      (*this)(key, out);
    }
  };

  // A value as the user wrote it, cut short: an error must not quote a whole section.
  static std::string shown(const json& value) {
    std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
    constexpr std::size_t kMax = 60;
    if (text.size() > kMax) text = text.substr(0, kMax) + "...";
    return text;
  }

  double read_double(const json& value, const std::string& path) const {
    if (value.is_number()) return value.get<double>();
    if (value.is_string()) {
      const auto& s = value.get_ref<const std::string&>();
      if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
      if (s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-inf") return -std::numeric_limits<double>::infinity();
    }
    expected(path, "a number", value);
  }

  template <class T>
  T read_integer(const json& value, const std::string& path) const {
    // nlohmann keeps integers exact: unsigned for non-negative literals, signed otherwise.
    if (value.is_number_unsigned()) {
      const auto u = value.get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(u);
    } else if (value.is_number_integer()) {
      const auto i = value.get<std::int64_t>();
      if constexpr (std::is_signed_v<T>) {
        if (i >= std::numeric_limits<T>::min() && i <= std::numeric_limits<T>::max())
          return static_cast<T>(i);
      }
    } else {
      expected(path, "an integer", value);
    }
    expected(path,
             fmt::format("an integer in [{}, {}]", std::numeric_limits<T>::min(),
                         std::numeric_limits<T>::max()),
             value);
  }

  std::string_view source_;
  int minor_;
};

// "MAJOR.MINOR" with both parts decimal digits; nullopt otherwise.
std::optional<std::pair<int, int>> parse_version(const std::string& text) {
  const char* const begin = text.data();
  const char* const end = begin + text.size();
  int major = 0, minor = 0;
  const auto [dot, major_error] = std::from_chars(begin, end, major);
  if (major_error != std::errc() || dot == begin || dot == end || *dot != '.') return std::nullopt;
  const auto [stop, minor_error] = std::from_chars(dot + 1, end, minor);
  if (minor_error != std::errc() || stop == dot + 1 || stop != end) return std::nullopt;
  if (*begin == '-' || dot[1] == '-') return std::nullopt;
  return std::pair{major, minor};
}

}  // namespace

std::string to_json(const Report& report) {
  ordered_json doc = ordered_json::object();
  // The version this writer implements, not report.schema_version: a report read from a
  // newer minor has lost that minor's fields, so it is written as what it now is.
  doc["schema_version"] = fmt::format("{}.{}", kSchemaMajor, kSchemaMinor);
  ObjectWriter writer{doc};
  fields(writer, report);
  // Strings come from model paths and names; invalid UTF-8 becomes U+FFFD, never a throw.
  return doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

Report from_json(std::string_view text, std::string_view source) {
  json doc;
  try {
    doc = parse_json_text(text, source);
  } catch (const JsonTextError& e) {
    throw ReportError(e.what());  // names the file, the line and column, and the fix
  }
  const Reader top(source, kSchemaMinor);
  if (!doc.is_object()) top.expected("", "a JSON object (an ampcheck report)", doc);

  // The version first: a document of another major may differ in any field, and "missing
  // field x" would hide the real reason.
  const auto version = doc.find("schema_version");
  if (version == doc.end())
    top.fail("", "missing field \"schema_version\" (is this an ampcheck report?)");
  const auto parsed = version->is_string() ? parse_version(version->get<std::string>()) : std::nullopt;
  if (!parsed) top.expected("schema_version", "a string \"MAJOR.MINOR\" such as \"1.0\"", *version);
  if (parsed->first != kSchemaMajor) {
    const std::string fix = parsed->first > kSchemaMajor
                                ? "use the ampcheck that wrote it or a newer one"
                                : "use the ampcheck that wrote it";
    throw ReportError(fmt::format(
        "{} has schema_version {}, which this ampcheck (reads {}.x) does not know; {}", source,
        version->get<std::string>(), kSchemaMajor, fix));
  }

  Report report;
  report.schema_version = version->get<std::string>();  // as read; to_json writes its own
  const Reader reader(source, parsed->second);
  reader.read(doc, "", report);
  // run --inspect-every's N: the text multiplies it (N, 2N, 3N), so a hostile one is refused.
  constexpr std::int64_t kMaxInspectEvery = 1'000'000'000'000;
  if (const auto& every = report.run.inspect_every; every && (*every < 2 || *every > kMaxInspectEvery))
    reader.fail("run.inspect_every", fmt::format("expected the N of run --inspect-every N, from 2 to {}, got {} (is "
                                                 "the file damaged? write it again with ampcheck run --report)",
                                                 kMaxInspectEvery, *every));
  // fp8 casts: one entry per step in each per-step array, a binade per code binade.
  if (report.fp8)
    for (std::size_t i = 0; i < report.fp8->tensors.size(); ++i) {
      const Fp8TensorRecord& t = report.fp8->tensors[i];
      const std::size_t n = t.steps.size();
      for (const std::size_t size : {t.amax.size(), t.scale.size(), t.count.size(), t.saturated.size(),
                                     t.flushed.size(), t.zero.size(), t.nan.size()})
        if (size != n)
          reader.fail(fmt::format("fp8.tensors[{}]", i),
                      fmt::format("expected one amax, scale, count, saturated, flushed, zero and nan per step ({} "
                                  "steps), got an array of {} (is the file damaged? write it again with ampcheck run "
                                  "--report)",
                                  n, size));
      if (t.binades.size() > 32)
        reader.fail(fmt::format("fp8.tensors[{}].binades", i),
                    fmt::format("expected at most 32 binades (E5M2's), got {}", t.binades.size()));
      // Counts of the values of a cast: none negative, none more than the values cast.
      for (std::size_t k = 0; k < n; ++k)
        for (const auto& [name, v] : {std::pair<const char*, std::int64_t>{"saturated", t.saturated[k]},
                                      {"flushed", t.flushed[k]}, {"zero", t.zero[k]}, {"nan", t.nan[k]}})
          if (t.count[k] < 0 || v < 0 || v > t.count[k])
            reader.fail(fmt::format("fp8.tensors[{}].{}[{}]", i, name, k),
                        fmt::format("expected a count from 0 to the {} values cast, got {} (is the file damaged? "
                                    "write it again with ampcheck run --report)",
                                    t.count[k], v));
    }
  // fp8 calls are some of the `other` calls.
  auto check_fp8 = [&reader](const DtypeCounts& c, const std::string& where) {
    if (c.fp8 && (*c.fp8 < 0 || *c.fp8 > c.other))
      reader.fail(where + ".fp8", fmt::format("expected the fp8 calls among the {} other calls, got {} (is the file "
                                              "damaged? write it again with ampcheck run --report)",
                                              c.other, *c.fp8));
  };
  for (std::size_t i = 0; i < report.op_types.size(); ++i)
    check_fp8(report.op_types[i].calls, fmt::format("op_types[{}].calls", i));
  for (std::size_t i = 0; i < report.ops.size(); ++i)
    check_fp8(report.ops[i].kernel_dtypes, fmt::format("ops[{}].kernel_dtypes", i));
  return report;
}

std::string to_json(const KernelsReport& report) {
  ordered_json doc = ordered_json::object();
  doc["schema_version"] = fmt::format("{}.{}", kKernelsSchemaMajor, kKernelsSchemaMinor);
  ObjectWriter writer{doc};
  fields(writer, report);
  return doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

KernelsReport kernels_from_json(std::string_view text, std::string_view source) {
  json doc;
  try {
    doc = parse_json_text(text, source);
  } catch (const JsonTextError& e) {
    throw ReportError(e.what());
  }
  const Reader top(source, kKernelsSchemaMinor);
  if (!doc.is_object()) top.expected("", "a JSON object (an ampcheck kernels report)", doc);
  const auto version = doc.find("schema_version");
  if (version == doc.end()) top.fail("", "missing field \"schema_version\" (is this an ampcheck kernels report?)");
  const auto parsed = version->is_string() ? parse_version(version->get<std::string>()) : std::nullopt;
  if (!parsed) top.expected("schema_version", "a string \"MAJOR.MINOR\" such as \"1.0\"", *version);
  if (parsed->first != kKernelsSchemaMajor)
    throw ReportError(fmt::format("{} has schema_version {}, which this ampcheck (reads {}.x) does not know; use the "
                                  "ampcheck that wrote it",
                                  source, version->get<std::string>(), kKernelsSchemaMajor));
  KernelsReport report;
  report.schema_version = version->get<std::string>();
  const Reader reader(source, parsed->second);
  reader.read(doc, "", report);
  return report;
}

Report read_report(const std::filesystem::path& path) {
  auto cannot_read = [&](int error) {
    std::string message = fmt::format("cannot read {}: {}", path.string(), std::strerror(error));
    if (error == ENOENT) message += " (give the JSON a run wrote with --report)";
    return ReportError(message);
  };
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw cannot_read(errno);
  std::string text;
  char buffer[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(f) != 0;  // a directory opens, then fails to read (EISDIR)
  const int error = errno;
  std::fclose(f);
  if (failed) throw cannot_read(error);
  return from_json(text, path.string());
}

void write_report(const std::filesystem::path& path, const Report& report) {
  write_file_atomically(path, to_json(report));
}

}  // namespace ampcheck::reports
