// "Is AMP really on in your own GPU run?", answered from the profile you already have:
// a profile's ops and kernels (profiles/profile.h) read against the policy you meant
// (PyTorch autocast in fp16 or bf16, Paddle O1 or O2, or fp32), by the same kernel check
// `ampcheck run` applies to its own GPU runs (inspector/kernel_check.h): each op instance
// becomes a CheckedInstance, its framework op name read as the op of ampcheck's lists that
// shares its AMP category (engine/amp/policy.h), its "Input Dims" in that op's convention.
//
// On top of the check: the GPU time of each op type and instance by precision x tensor
// cores, what each fallback cost (its GPU time, and what its FLOPs would take at the
// tensor-core rate this same profile measured for that op), Nsight Compute's counters as
// the ground truth of tensor-core use, and what differs between ranks.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/amp/policy.h"
#include "inspector/kernel_check.h"
#include "profiles/profile.h"
#include "reports/kernels_report.h"

namespace ampcheck::inspector {

// What the user meant the run to do.
struct Expectation {
  std::string name = "auto";  // auto, autocast-fp16, autocast-bf16, paddle-O1, paddle-O2, fp32
  bool automatic = true;      // auto: the dtype the profile's matrix work mostly took
  bool fp32 = false;          // no AMP: every op in float32 (TF32 included as narrower)
  amp::Level level = amp::Level::O1;
  DType dtype = DType::f16;
};
// Throws std::invalid_argument naming the choices.
Expectation parse_expectation(std::string_view text);
// "auto, autocast-fp16, autocast-bf16, paddle-O1, paddle-O2, fp32"
std::string expectation_choices();

// The op of ampcheck's lists a framework op is read as ("aten::addmm" -> linear,
// "matmul_v2" -> matmul, "aten::cudnn_convolution" -> conv2d); nothing for ops the lists
// do not know. Backward ops are read by their own names ("aten::mm" under AddmmBackward0).
std::optional<Op> framework_op(std::string_view name);

// A dtype as a profile writes an input's type: "float", "c10::Half", "c10::BFloat16",
// "double" (PyTorch), "float16", "bfloat16", "float32" (Paddle); nothing for others.
std::optional<DType> recorded_dtype(std::string_view type);

struct ProfileCheckOptions {
  Expectation expect;
};

// One profile, checked.
reports::ProfileRank check_profile(const profiles::Profile& profile, const ProfileCheckOptions& options);

// Every profile read from one path (a file, or a folder of per-rank traces), checked,
// with what differs between the ranks. `path` and `expect` as the user gave them.
reports::KernelsReport check_profiles(const std::vector<profiles::Profile>& profiles,
                                      const ProfileCheckOptions& options, const std::string& path);

// Nsight Compute's counters onto the kernels of a timeline profile of the same run, by
// name (profiles/kernel_names.h); returns how many of the timeline's kernels got them.
std::size_t join_counters(profiles::Profile& timeline, const profiles::Profile& ncu);

}  // namespace ampcheck::inspector
