#include "profiles/profile.h"

#include <algorithm>

namespace ampcheck::profiles {

const char* format_name(Format f) {
  switch (f) {
    case Format::kineto: return "PyTorch profiler (Kineto) trace, 2022+ schema (cpu_op / kernel / cuda_runtime)";
    case Format::kineto_2021: return "PyTorch profiler (Kineto) trace, 2021 schema (Operator / Kernel / Runtime)";
    case Format::kineto_legacy: return "PyTorch profiler (Kineto) trace, HTA's older form (Kernel / Runtime, no ops)";
    case Format::paddle: return "PaddlePaddle profiler trace (Operator / Kernel / CudaRuntime)";
    case Format::nsys_sqlite: return "Nsight Systems SQLite export";
    case Format::nsys_csv: return "Nsight Systems cuda_gpu_kern_sum CSV (totals per kernel name)";
    case Format::ncu_csv: return "Nsight Compute CSV (hardware counters per kernel)";
  }
  return "?";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

const char* no_op_name(NoOp n) {
  switch (n) {
    case NoOp::attributed: return "attributed";
    case NoOp::no_launch: return "no launch in the profile";
    case NoOp::outside_ops: return "launched outside any op";
    case NoOp::no_links: return "the format has no launch links";
  }
  return "?";
}

Profile::Profile() {
  strings_.emplace_back();
  string_index_.emplace("", 0);
  inputs.emplace_back();
}

namespace {
std::uint32_t find_or_add(StringIndex& index, std::string_view key, std::size_t next, bool& fresh) {
  if (const auto it = index.find(key); it != index.end()) {
    fresh = false;
    return it->second;
  }
  fresh = true;
  index.emplace(std::string(key), static_cast<std::uint32_t>(next));
  return static_cast<std::uint32_t>(next);
}
}  // namespace

std::uint32_t Profile::intern(std::string_view s) {
  bool fresh = false;
  const std::uint32_t i = find_or_add(string_index_, s, strings_.size(), fresh);
  if (fresh) strings_.emplace_back(s);
  return i;
}

std::uint32_t Profile::thread_of(std::string_view label) {
  bool fresh = false;
  const std::uint32_t i = find_or_add(thread_index_, label, threads.size(), fresh);
  if (fresh) threads.emplace_back(label);
  return i;
}

std::uint32_t Profile::intern_inputs(std::string_view key, OpInputs value) {
  bool fresh = false;
  const std::uint32_t i = find_or_add(inputs_index_, key, inputs.size(), fresh);
  if (fresh) inputs.push_back(std::move(value));
  return i;
}

bool Profile::has_ops() const {
  return std::any_of(ops.begin(), ops.end(), [](const Op& o) { return o.kind == OpKind::op; });
}

}  // namespace ampcheck::profiles
