// The report as text: the summary `ampcheck run` ends with and `ampcheck report --text`
// prints from a saved file, readable in ten seconds: what ran, the loss and the scaler,
// the per-op-type dtype table, where values left the low-precision range, the worst
// local errors, the NaN producer, and one verdict line; bisect and compare sections
// when the report has them; for an interrupted run, "interrupted after N of M steps"
// under the settings and in the verdict.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "reports/kernels_report.h"
#include "reports/report.h"

namespace ampcheck::reports {

std::string to_text(const Report& report, std::size_t top = 8);

// `ampcheck kernels`: per profile (rank) what was read and attributed, the matrix work by
// precision and tensor cores, the GPU time per op type, the kernel check's findings, what
// the fallbacks cost, Nsight Compute's counters against the names; the op instances too
// with `per_instance`; then what differs between ranks and the verdict.
std::string to_text(const KernelsReport& report, bool per_instance = false);

// The GPU time per op type with its tensor-core share, the kernel check's line and each
// finding: the part `run`'s and `kernels`' summaries share.
std::string kernel_check_text(const Kernels& kernels);

// "bf16 TC 92%, f32 CUDA 8%": a row's matrix work by precision and tensor cores.
std::string shares_text(const std::vector<PrecisionShare>& shares, std::int64_t whole);

// PaddlePaddle's operator stats table (python/paddle/amp/debugging.py,
// _print_operator_stats), then one line with the AMP policy's inserted casts.
std::string paddle_operator_table(const std::vector<OpTypeRow>& rows, const std::vector<InsertedCasts>& casts);

// bisect-nan --script's candidates that are no op and no module (cli/bisect_command.cpp):
// the cures compare --script names, each said in its own words by fix_text.
inline constexpr std::string_view kCureMasterWeights = "master weights";
inline constexpr std::string_view kCureOptimizerState = "optimizer state";
inline constexpr std::string_view kCureTheLoss = "the loss";
// A found fix: "keep fp32 master weights and run 2, fc1 in fp32" (fp8: "keep fc1 out of fp8").
std::string fix_text(const std::vector<std::string>& culprits, bool fp8);

// A run recorded in the user's own framework (ampcheck record): "recorded in PyTorch 2.15.0
// from python train.py --steps 50"; "" for a run of ampcheck's engine.
std::string recorded_text(const RunInfo& run);
// How the recorded script ended when it did not end normally: "the script failed: exit
// code 1, RuntimeError: boom"; "" when it ended normally (or the run is not recorded).
std::string script_failure_text(const RunInfo& run);
// The recorder's own stop: "the recorder stopped early (...): the steps after it were not
// seen"; "" when it did not.
std::string recorder_error_text(const RunInfo& run);

// Full mode's sampling (run --inspect-every N): "statistics and local errors on steps 10,
// 20, 30, ... and on the 10 steps after each step whose gradients held Inf/NaN"; "" when
// every step was measured.
std::string sampling_text(const RunInfo& run);

// The fraction of a tensor's elements that are NaN/Inf or overflow / underflow in fp16
// (0 when empty): how the text ranks tensors.
double f16_out_of_range(const Numerics& n);

}  // namespace ampcheck::reports
