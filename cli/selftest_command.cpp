#include "cli/selftest_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "ampcheck_build_info.h"  // AMPCHECK_VERSION
#include "cli/exit_codes.h"
#include "cli/dtype_option.h"
#include "cli/usage_error.h"
#include "engine/device.h"
#include "engine/dtype/dtype.h"
#include "engine/ops/registry.h"
#include "engine/parity.h"
#include "reports/atomic_file.h"
#include "reports/text_table.h"

namespace ampcheck::cli {
namespace {

using nlohmann::ordered_json;

std::string fmt_g(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return v == 0 ? "0" : fmt::format("{:.2e}", v);
}

// JSON has no Inf or NaN: those become the strings "inf", "-inf", "nan".
ordered_json json_number(double v) {
  if (std::isfinite(v)) return v;
  return fmt_g(v);
}

std::vector<Op> parse_ops(const std::vector<std::string>& names) {
  std::vector<Op> ops;
  for (const std::string& n : names) {
    const auto op = op_from_name(n);
    if (!op) {
      const std::string_view best = closest_op_name(n);
      throw UsageError("--op: unknown op \"" + n + "\"" +
                       (best.empty() ? "" : " (did you mean \"" + std::string(best) + "\"?)") +
                       "; ops are named as in engine/ops/op_list.h (`ampcheck ops` lists them)");
    }
    if (std::find(ops.begin(), ops.end(), *op) == ops.end()) ops.push_back(*op);
  }
  return ops;
}

// What the results are of: "cuda (NVIDIA H100, compute capability 9.0)".
std::string device_text(Device device) {
  if (device == Device::cpu || cuda_info().gpus.empty()) return std::string(device_name(device));
  const GpuInfo& gpu = cuda_info().gpus[0];  // the engine computes on GPU 0
  return fmt::format("cuda ({}, compute capability {}.{})", gpu.name, gpu.cc_major, gpu.cc_minor);
}

std::string table(const std::vector<parity::Result>& results) {
  using Align = reports::TextTable::Align;
  reports::TextTable t({"op", "dtype", "dir", "shapes", "NMSE", "threshold", "result", "why"});
  for (std::size_t c : {0, 1, 2, 3, 6, 7}) t.align(c, Align::left);
  for (std::size_t i = 0; i < results.size(); ++i) {
    const parity::Result& r = results[i];
    if (i > 0 && r.op != results[i - 1].op) t.add_separator();
    t.add_row({std::string(op_name(r.op)), std::string(name(r.dtype)), std::string(parity::direction_name(r.direction)),
               r.shapes, r.compared ? fmt_g(r.nmse) : "-", fmt_g(r.threshold),
               std::string(parity::status_name(r.status)), r.reason});
  }
  return t.render();
}

std::string summary_line(const parity::Summary& s, Device device) {
  std::string line = fmt::format("selftest: {} cases, {} passed, {} failed, {} skipped", s.cases, s.passed,
                                 s.failed, s.skipped);
  if (s.failed > 0) return line + ": " + std::string(device_name(device)) + " differs from the CPU reference\n";
  if (device == Device::cpu)
    return line + ": the CPU backend agrees with itself bit for bit and writes inside its tensors\n";
  return line + ": cuda agrees with the CPU reference\n";
}

ordered_json results_json(const std::vector<parity::Result>& results, Device device, const parity::Summary& s) {
  ordered_json rows = ordered_json::array();
  for (const parity::Result& r : results)
    rows.push_back({{"op", op_name(r.op)},
                    {"dtype", name(r.dtype)},
                    {"direction", r.direction == parity::Direction::forward ? "forward" : "backward"},
                    {"shapes", r.shapes},
                    {"tolerance", parity::tolerance_name(parity::tolerance(r.op, r.direction))},
                    {"nmse", r.compared ? json_number(r.nmse) : ordered_json(nullptr)},
                    {"threshold", r.threshold},
                    {"status", r.status == parity::Status::pass   ? "pass"
                               : r.status == parity::Status::fail ? "fail"
                                                                  : "skip"},
                    {"reason", r.reason}});
  ordered_json gpu = nullptr;
  if (device == Device::cuda && !cuda_info().gpus.empty()) {
    const GpuInfo& g = cuda_info().gpus[0];
    gpu = {{"name", g.name}, {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)}};
  }
  return {{"ampcheck_selftest", 1},
          {"version", AMPCHECK_VERSION},
          {"build", cuda_build_description()},
          {"device", device_name(device)},
          {"reference", "cpu"},
          {"gpu", gpu},
          {"summary", {{"cases", s.cases}, {"passed", s.passed}, {"failed", s.failed}, {"skipped", s.skipped}}},
          {"results", rows}};
}

CLI::App* add_options(CLI::App& app, SelftestOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "selftest",
      "Backend parity: every op, in every dtype, forward and backward, on a device against the CPU reference");
  cmd->add_option("--device", o.device,
                  "the backend checked: auto (the GPU if usable, else the CPU against itself), cpu, cuda")
      ->capture_default_str();
  cmd->add_option("--op", o.ops, "only these ops (as in `ampcheck ops`), comma separated or repeated")->delimiter(',');
  cmd->add_option("--dtype", o.dtypes, "only these dtypes (f64, f32, f16, bf16), comma separated or repeated")
      ->delimiter(',');
  cmd->add_option("--json", o.json, "also write every result to this file (atomically)");
  return cmd;
}

int run_selftest(const SelftestOptions& o, std::ostream& out, std::ostream& err) {
  const auto request = parse_device_request(o.device);
  if (!request) throw UsageError("--device \"" + o.device + "\" is not a device; use auto, cpu or cuda");
  parity::Options options;
  options.ops = parse_ops(o.ops);
  options.dtypes = parse_float_dtypes(o.dtypes);
  if (!o.json.empty()) {
    try {
      reports::check_writable_target(o.json);  // before the run, not after it
    } catch (const reports::WriteError& e) {
      throw UsageError(e.what());
    }
  }
  try {
    options.device = resolve_device(*request, err);
  } catch (const DeviceError& e) {
    throw UsageError(e.what());  // it names --device cuda and why there is no GPU
  }

  out << "ampcheck selftest: " << device_text(options.device) << " against the CPU reference"
      << (options.device == Device::cpu ? " (no GPU checked: the harness, the CPU's determinism and guard bytes)" : "")
      << "\n\n";
  const std::vector<parity::Result> results = parity::run(options);
  const parity::Summary s = parity::summarize(results);
  out << table(results) << '\n';
  // The optimizer's step over every parameter: not an op, the same formulas on both devices.
  const std::vector<parity::StepResult> steps = o.ops.empty() ? parity::run_steps(options.device)
                                                              : std::vector<parity::StepResult>{};
  std::size_t steps_failed = 0;
  for (const parity::StepResult& r : steps) {
    out << "step: " << r.step << ": "
        << (r.status == parity::Status::pass ? "equal to the CPU bit for bit" : "FAIL " + r.reason) << '\n';
    steps_failed += r.status == parity::Status::fail;
  }
  out << summary_line(s, options.device);
  if (steps_failed > 0) out << "selftest: " << steps_failed << " optimizer step(s) differ from the CPU reference\n";

  if (!o.json.empty()) {
    try {
      ordered_json doc = results_json(results, options.device, s);
      ordered_json rows = ordered_json::array();
      for (const parity::StepResult& r : steps)
        rows.push_back({{"step", r.step}, {"status", r.status == parity::Status::pass ? "pass" : "fail"}, {"reason", r.reason}});
      doc["steps"] = rows;
      reports::write_file_atomically(o.json, doc.dump(2) + "\n");
    } catch (const reports::WriteError& e) {
      throw UsageError(e.what());
    }
  }
  return s.failed > 0 || steps_failed > 0 ? kCheckFailed : kOk;
}

}  // namespace

Command add_selftest_command(CLI::App& app) {
  auto options = std::make_shared<SelftestOptions>();
  return {add_options(app, *options),
          [options](std::ostream& out, std::ostream& err) { return run_selftest(*options, out, err); }};
}

}  // namespace ampcheck::cli
