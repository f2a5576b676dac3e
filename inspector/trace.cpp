#include "inspector/trace.h"

#include "reports/text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <array>
#include <cctype>
#include <cstdint>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <thread>

#include "engine/dtype/dtype.h"
#include "inspector/kernel_watch.h"
#include "inspector/to_report.h"  // dtype_counts

namespace ampcheck::inspector {
namespace {

// Slot names from PaddlePaddle's op definitions (paddle/fluid/operators/*_op.cc, phi
// ops.yaml) for the ops whose inputs are not one plain "X". linear takes fc's names
// (Input, W, Bias): fc is Paddle's op for x W^T + b.
struct Slots {
  Op op;
  std::array<std::string_view, 5> names;
};
constexpr std::array kSlots{
    Slots{Op::matmul, {"X", "Y"}},
    Slots{Op::bmm, {"X", "Y"}},
    Slots{Op::scaled_dot_product_attention, {"q", "k", "v", "attn_mask"}},  // flash_attn
    Slots{Op::linear, {"Input", "W", "Bias"}},
    Slots{Op::conv2d, {"Input", "Filter", "Bias"}},
    Slots{Op::batch_norm, {"X", "Scale", "Bias", "Mean", "Variance"}},
    Slots{Op::layer_norm, {"X", "Scale", "Bias"}},
    Slots{Op::add, {"X", "Y"}},
    Slots{Op::sub, {"X", "Y"}},
    Slots{Op::mul, {"X", "Y"}},
    Slots{Op::div, {"X", "Y"}},
    Slots{Op::cross_entropy, {"Logits", "Label"}},
    Slots{Op::mse_loss, {"Input", "Label"}},
    Slots{Op::embedding, {"Ids", "W"}},
    Slots{Op::slice, {"Input"}},
    Slots{Op::where, {"Condition", "X", "Y"}},
    Slots{Op::masked_fill, {"X", "Mask"}},
};

// The compute type is the last field of the engine's kernel id ("cpu:linear:f32").
// "device:op:compute" then, on a GPU, " (what the libraries said they ran)".
std::optional<DType> compute_of(const std::string& kernel) {
  const std::string_view id = std::string_view(kernel).substr(0, kernel.find(' '));
  const auto colon = id.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  return try_parse_dtype(id.substr(colon + 1));
}

std::string row_name(const OpEvent& e) {
  std::string name(op_name(e.op));
  if (e.phase == Phase::backward) name += "_grad";
  return name;
}

std::string_view run_line(amp::Level level) {
  switch (level) {
    case amp::Level::O0: return "";
    case amp::Level::O1: return "Auto mixed precision run operator: ";
    // Paddle has no O3; its nearest, everything low, is what O2 logs.
    case amp::Level::O2:
    case amp::Level::O3: return "Pure fp16 run operator: ";
  }
  return "";
}

// Paddle prints the place its kernel ran on; ours is the backend field of the kernel id.
std::string place_of(const std::string& kernel) {
  const std::string backend = kernel.substr(0, kernel.find(':'));
  if (backend == "cuda") return "Place(gpu:0)";
  return "Place(" + (backend.empty() ? std::string("cpu") : backend) + ")";
}

long thread_number() {
  return static_cast<long>(std::hash<std::thread::id>{}(std::this_thread::get_id()) % 100000);
}

}  // namespace

std::string slot_name(Op op, std::size_t index) {
  for (const Slots& s : kSlots)
    if (s.op == op) {
      if (index < s.names.size() && !s.names[index].empty()) return std::string(s.names[index]);
      return "X" + std::to_string(index);
    }
  const int arity = op_info(op).arity;
  if (arity == 1 && index == 0) return "X";
  return "X" + std::to_string(index);  // concat and other lists of inputs
}

std::string_view paddle_dtype_name(DType d) {
  switch (d) {
    case DType::f64: return "double";
    case DType::f32: return "float";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i64: return "int64";
  }
  return "?";
}

DType kernel_dtype_of(const OpEvent& e) {
  if (e.phase == Phase::backward) return e.out_dtype;
  // Where the float inputs decide the kernel, as phi's ParseKernelKeyByInputArgs does:
  // their promoted dtype, as the kernel received them (no copy: this runs on every op call
  // of a traced run).
  std::optional<DType> out;
  const auto take = [&out](DType d) {
    if (is_floating(d)) out = out ? promote(*out, d) : d;
  };
  if (e.inputs != nullptr) {
    for (const Tensor& t : *e.inputs) take(t.defined() ? t.dtype() : DType::i64);
  } else {
    for (DType d : e.dtypes_before) take(d);
  }
  return out.value_or(DType::i64);
}

void DtypeCalls::add(DType d) {
  switch (d) {
    case DType::f16: ++fp16; break;
    case DType::bf16: ++bf16; break;
    case DType::f32: ++fp32; break;
    default: ++other; break;
  }
}

OpRecord make_record(const OpEvent& e) {
  OpRecord r;
  r.sequence = e.sequence;
  r.step = e.step;
  r.phase = e.phase;
  r.op = e.op;
  r.module = e.module;
  r.amp = e.amp;
  r.level = e.level;
  r.reason = e.reason;
  r.inserted_cast = e.inserted_cast;
  r.dtypes_before = e.dtypes_before;
  r.dtypes_after = e.dtypes_before;
  for (const CastRecord& c : e.casts) {
    r.casts.push_back({c.input, slot_name(e.op, c.input), c.from, c.to});
    if (c.input < r.dtypes_after.size()) r.dtypes_after[c.input] = c.to;
  }
  r.kernel_dtype = kernel_dtype_of(e);
  r.compute_dtype = compute_of(e.kernel).value_or(r.kernel_dtype);
  r.out_dtype = e.out_dtype;
  r.kernel = e.kernel;
  r.shapes = e.shapes;
  if (e.output != nullptr && e.output->defined()) r.out_shape = e.output->shape();
  else if (e.grad_output != nullptr && e.grad_output->defined()) r.out_shape = e.grad_output->shape();
  r.seconds = e.seconds;
  r.start = e.start;
  return r;
}

OpTrace::OpTrace(OpTraceOptions options) : options_(options) {}

std::string InstanceStats::name() const {
  return fmt::format("{}/{}{}#{}", module, op_name(op), phase == Phase::backward ? "_grad" : "", occurrence);
}

void GpuTime::add(const KernelClass& c, std::uint64_t ns) {
  ++launches;
  total_ns += ns;
  if (!multiplies_matrices(c.kind)) return;
  matrix_ns += ns;
  if (c.tensor_cores == TensorCores::yes) tensor_core_ns += ns;
  if (c.tensor_cores == TensorCores::no) cuda_core_ns += ns;
}

void OpTrace::on_op_end(const OpEvent& e) {
  ++calls_;
  // Calls older than this are no longer waited for: CUPTI's records of a step come by
  // the end of the step after (KernelCorrelatorOptions keeps them two flushes).
  constexpr std::int64_t kStepsKept = 4;
  const bool gpu = options_.gpu_kernels;
  if (gpu) {
    while (!calls_by_sequence_.empty() && calls_by_sequence_.begin()->second.step < e.step - kStepsKept)
      calls_by_sequence_.erase(calls_by_sequence_.begin());
  }
  auto remember = [&](std::size_t instance, std::string row) {
    if (!gpu) return;
    const std::size_t record = records_.size() <= options_.max_records && !records_.empty() &&
                                       records_.back().sequence == e.sequence
                                   ? records_.size() - 1
                                   : SIZE_MAX;
    const Call& call = calls_by_sequence_[e.sequence] = Call{e.step, instance, record, std::move(row)};
    if (const auto p = pending_gpu_.find(e.sequence); p != pending_gpu_.end()) {
      apply_gpu(call, p->second.activity, p->second.classes, p->second.clock_offset);
      pending_gpu_.erase(p);
    }
  };
  // A per-call record (OpRecord: strings, vectors) only while records are kept (the
  // Chrome trace's spans); the tables below are updated in place, allocating only for
  // an instance or a kernel seen for the first time.
  const bool keep = records_.size() < options_.max_records;
  if (e.inserted_cast) {
    if (keep) records_.push_back(make_record(e));
    const DType from = e.dtypes_before.empty() ? DType::f32 : e.dtypes_before.front();
    ++casts_[{from, e.out_dtype}];
    if (gpu) remember(SIZE_MAX, kInsertedCastRow);
    return;
  }
  const DType kernel_dtype = kernel_dtype_of(e);
  const bool fp8_kernel = e.op == Op::fp8_linear && kernel_dtype != DType::f64;  // f64: the exact form
  {
    // The table's row: the op's name, with "_grad" for backward (built on the stack, so a
    // row seen before costs no allocation).
    char buf[64];
    std::string fallback;
    const std::string_view type = op_name(e.op);
    std::string_view row = type;
    if (e.phase == Phase::backward) {
      if (type.size() + 5 <= sizeof buf) {
        std::memcpy(buf, type.data(), type.size());
        std::memcpy(buf + type.size(), "_grad", 5);
        row = std::string_view(buf, type.size() + 5);
      } else {
        fallback = row_name(e);
        row = fallback;
      }
    }
    if (const auto st = stats_.find(row); st != stats_.end()) {
      st->second.add(kernel_dtype, fp8_kernel);
    } else {
      stats_.emplace(std::string(row), DtypeCalls{}).first->second.add(kernel_dtype, fp8_kernel);
    }
  }
  const std::int64_t k = occurrences_.of(e);
  auto it = instance_index_.find(std::tuple<std::string_view, Op, Phase, std::int64_t>(e.module, e.op, e.phase, k));
  if (it == instance_index_.end()) {
    it = instance_index_.emplace(std::tuple<std::string, Op, Phase, std::int64_t>(e.module, e.op, e.phase, k),
                                 instances_.size()).first;
    instances_.emplace_back();
    instances_.back().module = e.module;
    instances_.back().op = e.op;
    instances_.back().phase = e.phase;
    instances_.back().occurrence = k;
  }
  InstanceStats& in = instances_[it->second];
  ++in.calls;
  in.reason = e.reason;
  in.dtypes_in.assign(e.dtypes_before.begin(), e.dtypes_before.end());
  for (const CastRecord& c : e.casts) {
    if (c.input < in.dtypes_in.size()) in.dtypes_in[c.input] = c.to;
    ++in.casts[{c.input, c.from, c.to}];
  }
  in.compute_dtype = compute_of(e.kernel).value_or(kernel_dtype);
  in.out_dtype = e.out_dtype;
  in.kernel_dtypes.add(kernel_dtype, fp8_kernel);
  if (const auto kn = in.kernels.find(e.kernel); kn != in.kernels.end()) {
    ++kn->second;
  } else {
    ++in.kernels[e.kernel];
  }
  in.shapes = e.shapes;
  if (keep) records_.push_back(make_record(e));
  if (gpu) remember(it->second, row_name(e));
}

void OpTrace::add_gpu(const OpActivity& activity, const std::vector<const KernelClass*>& classes,
                      double clock_offset) {
  const auto call = calls_by_sequence_.find(activity.op.sequence);
  if (call != calls_by_sequence_.end()) {
    apply_gpu(call->second, activity, classes, clock_offset);
    return;
  }
  // Not ended yet (a flush inside the op, GLOG's per-op mode): kept until it ends. A
  // call ended long ago, whose kernels came after it was let go, is counted as lost.
  if (!calls_by_sequence_.empty() && activity.op.sequence < calls_by_sequence_.begin()->first) {
    kernels_lost_ += activity.kernels.size();
    return;
  }
  Pending& p = pending_gpu_[activity.op.sequence];
  p.activity.op = activity.op;
  p.activity.kernels.insert(p.activity.kernels.end(), activity.kernels.begin(), activity.kernels.end());
  p.classes.insert(p.classes.end(), classes.begin(), classes.end());
  p.clock_offset = clock_offset;
}

void OpTrace::apply_gpu(const Call& call, const OpActivity& activity, const std::vector<const KernelClass*>& classes,
                        double clock_offset) {
  GpuTime& by_type = gpu_by_type_[call.row];
  for (std::size_t i = 0; i < activity.kernels.size(); ++i) {
    const KernelRecord& k = activity.kernels[i];
    static const KernelClass kUnknown{};
    const KernelClass& c = i < classes.size() && classes[i] != nullptr ? *classes[i] : kUnknown;
    const std::uint64_t ns = k.duration_ns();
    by_type.add(c, ns);
    if (call.record != SIZE_MAX && call.record < records_.size())
      records_[call.record].gpu.push_back(GpuLaunch{k.name, static_cast<double>(k.start_ns) * 1e-9 + clock_offset,
                                                    static_cast<double>(ns) * 1e-9, k.grid, k.block, k.stream,
                                                    i < classes.size() ? classes[i] : nullptr});
    if (call.instance == SIZE_MAX) continue;
    std::vector<GpuKernelStats>& kernels = instances_[call.instance].gpu_kernels;
    auto it = std::find_if(kernels.begin(), kernels.end(), [&](const GpuKernelStats& g) {
      return g.name == k.name && g.grid == k.grid && g.block == k.block;
    });
    if (it == kernels.end()) {
      kernels.push_back(GpuKernelStats{k.name, c, k.grid, k.block, 0, 0, ns, ns});
      it = kernels.end() - 1;
    }
    ++it->launches;
    it->total_ns += ns;
    it->min_ns = std::min(it->min_ns, ns);
    it->max_ns = std::max(it->max_ns, ns);
  }
}

std::uint64_t OpTrace::inserted_cast_calls() const {
  std::uint64_t n = 0;
  for (const auto& [key, count] : casts_) n += count;
  return n;
}

void OpTrace::clear() {
  calls_by_sequence_.clear();
  pending_gpu_.clear();
  gpu_by_type_.clear();
  kernels_lost_ = 0;
  records_.clear();
  occurrences_.reset();
  instances_.clear();
  instance_index_.clear();
  calls_ = 0;
  stats_.clear();
  casts_.clear();
}

std::string operator_stats_table(const OpTrace& trace) {
  std::vector<reports::OpTypeRow> rows;
  for (const auto& [name, c] : trace.op_stats())
    rows.push_back({name, dtype_counts(c)});
  std::vector<reports::InsertedCasts> casts;
  for (const auto& [key, count] : trace.inserted_casts())
    casts.push_back({std::string(info(key.first).long_name), std::string(info(key.second).long_name),
                     static_cast<std::int64_t>(count)});
  return reports::paddle_operator_table(rows, casts);
}

std::optional<int> parse_glog_level(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

int glog_level_from_env() {
  const char* v = std::getenv("GLOG_v");
  return v == nullptr ? 0 : parse_glog_level(v).value_or(0);
}

GlogWriter::GlogWriter(std::ostream& out, GlogOptions options) : out_(out), options_(options) {}

void GlogWriter::line(int source_line, std::string_view text) {
  // glog's prefix: severity, mmdd hh:mm:ss.uuuuuu, thread id, file:line.
  if (options_.timestamps) {
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
    std::tm tm{};
    localtime_r(&t, &tm);
    out_ << fmt::format("I{:02}{:02} {:02}:{:02}:{:02}.{:06} {:>5} trace.cpp:{}] {}\n", tm.tm_mon + 1,
                        tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros, thread_number(),
                        source_line, text);
  } else {
    out_ << fmt::format("I0000 00:00:00.000000 {:>5} trace.cpp:{}] {}\n", 0, source_line, text);
  }
}

void GlogWriter::on_op_begin(const OpEvent& e) {
  if (!enabled() || e.inserted_cast) return;
  const std::string_view name = op_name(e.op);
  if (e.phase == Phase::backward) {
    line(__LINE__, fmt::format("Start to execute grad op {}_grad", name));
    return;
  }
  line(__LINE__, fmt::format("Trace Op: {}", name));
  if (e.amp && e.level != amp::Level::O0) line(__LINE__, fmt::format("{}{}", run_line(e.level), name));
  for (const CastRecord& c : e.casts)
    line(__LINE__, fmt::format("Op({}): Cast {} from {} to {}", name, slot_name(e.op, c.input),
                               paddle_dtype_name(c.from), paddle_dtype_name(c.to)));
}

void GlogWriter::on_op_end(const OpEvent& e) {
  if (!enabled() || e.inserted_cast) return;
  std::string data_type(paddle_dtype_name(kernel_dtype_of(e)));
  std::string library = "PLAIN";
  std::string gpu;
  if (kernels_ != nullptr) {
    bool from_kernel = false;
    for (const auto& entry : kernels_->kernels_of(e.sequence)) {
      const auto& [launch, cls] = entry;
      const std::string lower_name = [&, launch = launch] {
        std::string n = launch->name;
        for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return n;
      }();
      if (lower_name.find("cudnn") != std::string::npos) library = "CUDNN";
      if (!from_kernel && cls != nullptr && multiplies(cls->kind) && cls->input != KernelPrecision::unknown) {
        switch (cls->input) {
          case KernelPrecision::f16: data_type = "float16"; break;
          case KernelPrecision::bf16: data_type = "bfloat16"; break;
          case KernelPrecision::f64: data_type = "double"; break;
          default: data_type = "float"; break;  // f32, and TF32's float32 data
        }
        from_kernel = true;
      }
      gpu += fmt::format("{}{} ({} multiplies, {} accumulation, tensor cores {}, {:.1f} us)", gpu.empty() ? "" : "; ",
                         kernel_label(launch->name),
                         cls ? precision_name(cls->input) : "unknown", cls ? precision_name(cls->accumulate) : "unknown",
                         cls ? tensor_cores_name(cls->tensor_cores) : "unknown", launch->seconds * 1e6);
    }
  }
  const std::string name = std::string(op_name(e.op)) + (e.phase == Phase::backward ? "_grad" : "");
  line(__LINE__, fmt::format("expected_kernel_key:data_type[{}]:data_layout[ANY_LAYOUT]:place[{}]:library_type[{}]",
                             data_type, place_of(e.kernel), library));
  line(__LINE__, fmt::format("{} kernel: {}", name, e.kernel));
  if (!gpu.empty()) line(__LINE__, fmt::format("{} GPU kernels: {}", name, gpu));
}

}  // namespace ampcheck::inspector
