// What another tool recorded of a GPU run, as one neutral model: the framework ops (with
// their thread, time, phase, module, input shapes and types, and the op around them) and
// the GPU kernels, copies and memsets, each tied to the op that launched it or counted
// as unattributable with the reason. Every reader in profiles/ (Kineto and Paddle Chrome
// traces, Nsight Systems SQLite exports and `nsys stats` CSVs, Nsight Compute CSVs) fills
// this model and nothing else; the inspector reads it exactly as it reads CUPTI's records
// (inspector/profile_check.h).
//
// Depends on nothing of the project: plain values, indices instead of pointers, strings
// interned once (a trace names the same op and kernel thousands of times).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ampcheck::profiles {

// What wrote the file, found from its content.
enum class Format : std::uint8_t {
  kineto,         // PyTorch profiler 2022+: cpu_op / kernel / cuda_runtime / cuda_driver / ac2g
  kineto_2021,    // PyTorch profiler 1.8-1.10: Operator / Kernel / Runtime with "external id"
  kineto_legacy,  // HTA's older form: Kernel / Runtime events, no op events
  paddle,         // PaddlePaddle's profiler (export_chrome_tracing): Operator / Kernel / CudaRuntime
  nsys_sqlite,    // `nsys export --type sqlite`
  nsys_csv,       // `nsys stats --report cuda_gpu_kern_sum --format csv`: totals per kernel name
  ncu_csv,        // `ncu --csv` (details or raw page): hardware counters per kernel
};
// "PyTorch profiler (Kineto) trace, 2022+ schema", ...
const char* format_name(Format f);

enum class Phase : std::uint8_t { forward, backward, optimizer };
const char* phase_name(Phase p);  // "forward", "backward", "optimizer"

enum class OpKind : std::uint8_t {
  op,          // a framework op: "aten::addmm", "matmul_v2", an emit_nvtx range
  annotation,  // a range the user or the framework named: record_function, NVTX, "Optimizer.step#..."
  step,        // the profiler's step range ("ProfilerStep#6"): never what launched a kernel
  module,      // an nn.Module's forward ("nn.Module: Linear_0"): only gives the module path
};

enum class ActivityKind : std::uint8_t { kernel, memcpy, memset };

// Why a kernel has no op (Kernel::op < 0).
enum class NoOp : std::uint8_t {
  attributed,   // it has one
  no_launch,    // its launch is not in the profile: the previous step's kernels still
                // running when the window opened, or a launch record the profiler dropped
  outside_ops,  // launched outside any op (the framework's or the user's own code between ops)
  no_links,     // the format carries no link from a kernel to its launch
};
const char* no_op_name(NoOp n);  // "attributed", "no launch in the profile", ...

struct Dim3 {
  std::uint32_t x = 0, y = 0, z = 0;  // 0: not recorded
  bool known() const { return x != 0; }
  bool operator==(const Dim3&) const = default;
};

// The inputs of one op as the profiler recorded them (record_shapes). Shared by the ops
// that recorded the same ones.
struct OpInputs {
  std::vector<std::vector<std::int64_t>> dims;  // "Input Dims": one shape per input ([] for a scalar or non-tensor)
  std::vector<std::string> types;               // "Input type": "float", "c10::Half", "c10::BFloat16", "Scalar", ""
  std::vector<std::string> concrete;            // "Concrete Inputs": the scalars' and lists' values as text
};

struct Op {
  std::uint32_t name = 0;    // Profile::strings: "aten::addmm"
  std::uint32_t thread = 0;  // Profile::threads
  std::int64_t begin_ns = 0, end_ns = 0;
  OpKind kind = OpKind::op;
  Phase phase = Phase::forward;
  bool phase_marked = false;  // the reader knew the phase (Paddle's Forward / Backward / Optimization ranges)
  std::int32_t parent = -1;   // the op (or annotation) directly around it on its thread; -1: none
  std::uint32_t module = 0;   // Profile::strings: "BertModel_0.BertEncoder_0.Linear_3"; 0: none recorded
  std::uint32_t inputs = 0;   // Profile::inputs; 0: none recorded
  std::int64_t external_id = -1;  // Kineto's "External id"
  std::int64_t sequence = -1;     // autograd's sequence number: ties a backward node to its forward op
};

// Nsight Compute's counters of one kernel: the tensor pipes' metrics (sm__ops_path_tensor_*,
// sm__inst_executed_pipe_tensor_*, sm__pipe_tensor_*), those that held a number.
struct Counters {
  std::vector<std::pair<std::string, double>> tensor;  // (metric, value) in the file's order
  bool tensor_measured = false;  // at least one tensor metric held a number (n/a is not one)
  double duration_ns = 0;        // gpu__time_duration.sum, 0 when absent
};

struct Kernel {
  ActivityKind kind = ActivityKind::kernel;
  std::uint32_t name = 0;  // Profile::strings, as the profiler wrote it (demangled where it demangles)
  std::int64_t start_ns = 0, duration_ns = 0;  // duration: the total over `instances` launches
  std::int64_t instances = 1;  // nsys stats rows: the launches the row sums; else 1
  std::int32_t device = -1, stream = -1;
  Dim3 grid, block;
  std::int64_t correlation = -1;  // CUPTI's id of the API call that launched it
  std::int64_t external_id = -1;  // Kineto's "External id": the op that was innermost at the launch
  std::int32_t op = -1;           // Profile::ops: the op that launched it; -1: see `no_op`
  NoOp no_op = NoOp::no_links;
  bool by_external_id = false;    // joined through External id, its launch not on record
  std::uint32_t launch = 0;       // Profile::strings: "cudaLaunchKernel", "cuLaunchKernelEx", ... 0: none
  std::int32_t counters = -1;     // Profile::counters
};

// A runtime or driver API call that may have launched GPU work (Kineto's cuda_runtime /
// cuda_driver events, nsys's CUPTI_ACTIVITY_KIND_RUNTIME rows, a Chrome-trace flow start).
struct Launch {
  std::int64_t correlation = -1;
  std::uint32_t thread = 0;
  std::int64_t ns = 0;  // when it was called
  std::uint32_t name = 0;
  std::int64_t external_id = -1;
};

// How the join went (profiles/attribution.h).
struct AttributionStats {
  std::int64_t kernels = 0, kernel_ns = 0;
  std::int64_t attributed = 0, attributed_ns = 0;
  std::int64_t by_external_id = 0;      // of those, joined through External id (launch not on record)
  std::int64_t external_id_differs = 0; // time and External id named different ops: time won
  std::int64_t no_launch = 0, no_launch_ns = 0;
  std::int64_t outside_ops = 0, outside_ops_ns = 0;
  std::int64_t no_links = 0, no_links_ns = 0;
  std::int64_t launched = 0, launched_ns = 0;  // kernels whose launch is in the profile
};

// Lookups by string_view without a copy (C++20 heterogeneous lookup).
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIndex = std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>>;

class Profile {
 public:
  std::string source;  // the path as given
  Format format = Format::kineto;
  std::int64_t rank = -1;            // distributedInfo.rank; -1: not recorded
  std::vector<std::string> devices;  // GPU names as recorded ("NVIDIA H100 80GB HBM3")
  std::vector<std::string> threads;  // labels of the CPU threads, "pid 1 tid 2"
  std::vector<Op> ops;               // by thread, then begin
  std::vector<OpInputs> inputs;      // [0]: none recorded
  std::vector<Kernel> kernels;       // kernels, copies and memsets, by start
  std::vector<Launch> launches;
  std::vector<Counters> counters;
  bool links = true;         // the format ties kernels to their launches
  std::string no_links_why;  // why not, in words, with what would
  std::vector<std::string> notes;  // what the reader met and set aside, one sentence each
  AttributionStats attribution;

  Profile();
  // Interning: the same text gets the same index; 0 is "".
  std::uint32_t intern(std::string_view s);
  const std::string& str(std::uint32_t i) const { return strings_[i]; }
  std::size_t string_count() const { return strings_.size(); }
  std::uint32_t thread_of(std::string_view label);
  std::uint32_t intern_inputs(std::string_view key, OpInputs value);
  bool has_ops() const;  // framework ops, not only annotations

 private:
  std::vector<std::string> strings_;
  StringIndex string_index_, thread_index_, inputs_index_;
};

}  // namespace ampcheck::profiles
