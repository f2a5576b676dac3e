// The report of `ampcheck kernels PROFILE`: what a user's own GPU profile says about AMP,
// one ProfileRank per profile read (a folder of per-rank traces gives one per rank) and
// what differs between them. Its JSON has its own schema (reports/schema/kernels.schema.json,
// docs/kernels.md), versioned like the run report's; the kernel check's part (`check`) is
// the run report's Kernels, so that the HTML's kernels section is one code path for both.
//
// Same profile, same options => the same report, byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reports/report.h"

namespace ampcheck::reports {

// schema_version "MAJOR.MINOR", read as the run report's is (reports/report.h).
inline constexpr int kKernelsSchemaMajor = 1;
inline constexpr int kKernelsSchemaMinor = 0;

// GPU time of the kernels that multiply (GEMM, GEMV, convolution, attention), by the
// precision their multiplies took and whether they ran on tensor cores.
struct PrecisionShare {
  std::string precision;     // f16, bf16, fp8, fp4, tf32, f32, f64, int8, unknown
  std::string tensor_cores;  // yes, no, unknown
  std::int64_t ns = 0;
  bool operator==(const PrecisionShare&) const = default;
};

// One op type (framework op name and phase), or one op instance.
struct ProfileOp {
  std::string name;    // type: "aten::addmm", "aten::mm (backward)"; instance: "Linear_0/aten::addmm#0"
  std::string type;    // the framework's op name: "aten::addmm", "matmul_v2"
  std::string phase;   // forward, backward, optimizer
  std::string module;  // instances: the nn.Module path, "" where none was recorded
  std::string policy;  // the op of ampcheck's lists it was read as and its list: "linear: white", "" when none
  std::string expected;  // the dtype the policy puts it in: "float16", "bfloat16", "float32"; "" when not judged
  std::int64_t calls = 0;     // op calls that launched GPU work
  std::int64_t launches = 0;  // kernels
  std::int64_t total_ns = 0;   // every kernel
  std::int64_t matrix_ns = 0;  // the multiplying kernels
  std::vector<PrecisionShare> shares;  // of matrix_ns, largest first
  double flops = 0;  // 2 x multiply-adds over its calls, from its input shapes; 0 when not known
  std::vector<std::vector<std::int64_t>> input_dims;  // instances: "Input Dims" of its last call
  std::vector<std::string> input_types;               // instances: "Input type" of its last call
  std::vector<GpuKernel> kernels;                     // instances: its kernels, by name
  bool operator==(const ProfileOp&) const = default;
};

// What one fallback instance cost: its GPU time and what its FLOPs would take at the
// tensor-core rate this same profile measured for its op (or, failing that, for all its
// matrix work in the policy's dtype).
struct FallbackCost {
  std::string op;        // the instance
  std::int64_t gpu_ns = 0;
  double flops = 0;      // 0: no shapes recorded
  std::int64_t at_rate_ns = -1;  // -1: not estimated
  std::string rate;      // "312.4 TFLOP/s, measured on linear in this profile"; "" when not estimated
  bool operator==(const FallbackCost&) const = default;
};

// Kernels no op can be named for, by reason.
struct Unattributable {
  std::string reason;  // "no launch in the profile", "launched outside any op", "the format has no launch links"
  std::int64_t kernels = 0;
  std::int64_t ns = 0;
  std::vector<std::string> top;  // the kernels with the most time, at most 5 ("name: 1.2 ms")
  bool operator==(const Unattributable&) const = default;
};

// A kernel whose Nsight Compute counters say whether it used tensor cores (and in which
// operand precision), against what its name says.
struct CounterCheck {
  std::string kernel;
  std::string name_tensor_cores;      // yes, no, unknown
  std::string counters_tensor_cores;  // yes, no
  std::string name_precision;         // the name's input precision
  std::string counters_precision;     // from sm__ops_path_tensor_src_<type>_*; "" when not said
  std::string metrics;                // the tensor metrics that decided, "metric=value, ..."
  bool agrees = true;                 // the name's tensor cores and precision are the counters' (or not read)
  bool operator==(const CounterCheck&) const = default;
};

struct ProfileRank {
  std::string source;  // the file (or archive member) read
  std::string format;  // profiles::format_name
  std::int64_t rank = -1;  // distributedInfo.rank; -1 not recorded
  std::vector<std::string> devices;
  std::string expect;  // the policy the verdict is against: "autocast-bf16", ...; "none" (AMP off, auto)
  std::string expect_note;  // how `auto` decided, or ""
  std::int64_t kernels = 0, kernel_ns = 0;
  std::int64_t attributed = 0, attributed_ns = 0;
  std::int64_t launched_ns = 0;  // of kernels whose launch is in the profile: the share attribution is judged on
  std::int64_t by_external_id = 0;
  std::string no_links;  // why the format cannot say which op launched what; "" when it can
  std::vector<Unattributable> unattributable;
  std::vector<std::string> notes;
  Kernels check;  // counts, GPU time per op type, the kernel check's findings, kernels outside ops
  std::vector<PrecisionShare> shares;  // every multiplying kernel's time
  std::int64_t matrix_ns = 0;
  std::vector<ProfileOp> types;      // per op type, most GPU time first
  std::vector<ProfileOp> instances;  // per op instance, most GPU time first
  std::vector<FallbackCost> fallbacks;  // most GPU time first
  std::int64_t fallback_ns = 0;
  std::int64_t fallback_at_rate_ns = -1;  // -1: none estimated
  std::string cost_text;  // "AMP fallbacks: 4.1 ms of 38 ms GPU time; at this trace's bf16 tensor-core rate ~0.6 ms"
  std::vector<CounterCheck> counters;  // Nsight Compute data: every kernel it measured
  std::int64_t counter_disagreements = 0;
  std::string verdict;       // amp_on, fallbacks, amp_off, fp32, not_fp32, kernels_only
  std::string verdict_text;  // the one line a person reads
};

// A way the ranks' profiles differ: one text per rank, in the ranks' order.
struct RankDifference {
  std::string what;  // "aten::mm (backward): bf16 on tensor cores vs f32 on CUDA cores", "GPU time"
  std::vector<std::string> per_rank;
  bool operator==(const RankDifference&) const = default;
};

struct KernelsReport {
  std::string schema_version = std::to_string(kKernelsSchemaMajor) + "." + std::to_string(kKernelsSchemaMinor);
  std::string ampcheck;   // the version that wrote it
  std::string profile;    // the path as given
  std::string expect;     // as given: auto, autocast-fp16, autocast-bf16, paddle-O1, paddle-O2, fp32
  std::vector<ProfileRank> ranks;
  std::vector<RankDifference> differences;  // several ranks only
  std::string verdict;       // the worst rank's
  std::string verdict_text;
  std::int64_t warnings() const {
    std::int64_t n = 0;
    for (const ProfileRank& r : ranks) n += r.check.warnings();
    return n;
  }
};

}  // namespace ampcheck::reports
