#include "cli/kernels_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>

#include "ampcheck_build_info.h"  // AMPCHECK_VERSION
#include "cli/exit_codes.h"
#include "cli/run_options.h"  // check_output, write_output
#include "cli/usage_error.h"
#include "inspector/profile_check.h"
#include "profiles/profile_error.h"
#include "profiles/read.h"
#include "reports/html.h"
#include "reports/json.h"
#include "reports/text.h"

namespace ampcheck::cli {
namespace {

struct KernelsOptions {
  std::string profile;
  std::string expect = "auto";
  std::string ncu;
  std::string report, html;
  bool json = false;
  std::string fail_on;
  bool per_instance = false;
  std::string max_size = "2G";
};

CLI::App* add_options(CLI::App& app, KernelsOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "kernels",
      "Is AMP really on in your own GPU run? Read a profile (PyTorch/Paddle trace, nsys, ncu) against the policy "
      "you meant (docs/kernels.md)");
  cmd->add_option("profile", o.profile,
                  "the profile: a PyTorch profiler or Paddle Chrome trace (.json or .json.gz), an nsys SQLite export or "
                  "cuda_gpu_kern_sum CSV, an ncu --csv file or archive, or a folder of per-rank traces")
      ->required();
  cmd->add_option("--expect", o.expect,
                  "the policy the run was meant to follow: " + inspector::expectation_choices() +
                      " (auto: the low-precision dtype its matrix work mostly took)")
      ->capture_default_str();
  cmd->add_option("--ncu", o.ncu,
                  "Nsight Compute CSV(s) of the same run: their tensor-pipe counters decide each matching kernel's "
                  "tensor-core use, and every disagreement with the kernel's name is listed");
  cmd->add_option("--report", o.report, "write the JSON report here (reports/schema/kernels.schema.json)");
  cmd->add_option("--html", o.html, "write the HTML report (one self-contained file) here");
  cmd->add_flag("--json", o.json, "print the JSON report instead of the text summary");
  cmd->add_option("--fail-on", o.fail_on,
                  "fallback: exit 1 when AMP is off, or any op the policy puts in fp16/bf16 fell back (for CI)");
  cmd->add_flag("--per-instance", o.per_instance, "also print every op instance (the JSON always has them)");
  cmd->add_option("--max-size", o.max_size, "the largest profile text read, e.g. 2G, 512M (guards the memory)")
      ->capture_default_str();
  return cmd;
}

std::vector<profiles::Profile> read(const std::string& path, const profiles::ReadOptions& options) {
  try {
    return profiles::read_profiles(path, options);
  } catch (const profiles::ProfileError& e) {
    throw UsageError(std::string("kernels: ") + e.what());
  }
}

int run_kernels(const KernelsOptions& o, std::ostream& out, std::ostream& err) {
  inspector::ProfileCheckOptions options;
  try {
    options.expect = inspector::parse_expectation(o.expect);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("kernels: ") + e.what());
  }
  if (!o.fail_on.empty() && o.fail_on != "fallback")
    throw UsageError("kernels: --fail-on \"" + o.fail_on + "\" is not known; the one choice is fallback");
  const auto max = parse_byte_size(o.max_size);
  if (!max || *max == 0)
    throw UsageError("kernels: --max-size \"" + o.max_size + "\" is not a size; write it as 2G, 512M or a byte count");
  check_output("--report", o.report);
  check_output("--html", o.html);
  profiles::ReadOptions read_options;
  read_options.max_bytes = *max;

  std::vector<profiles::Profile> all = read(o.profile, read_options);
  if (!o.ncu.empty()) {
    std::vector<profiles::Profile> ncu = read(o.ncu, read_options);
    if (ncu.size() != 1 || ncu.front().format != profiles::Format::ncu_csv)
      throw UsageError("kernels: --ncu " + o.ncu + ": not an Nsight Compute CSV (" +
                       profiles::format_name(ncu.front().format) + "); give the output of `ncu --csv`");
    for (profiles::Profile& p : all) {
      if (p.format == profiles::Format::ncu_csv) continue;
      const std::size_t joined = inspector::join_counters(p, ncu.front());
      p.notes.push_back(fmt::format("Nsight Compute counters of {} joined onto {} of its kernels by name", o.ncu, joined));
    }
  }
  reports::KernelsReport report = inspector::check_profiles(all, options, o.profile);
  report.ampcheck = AMPCHECK_VERSION;

  if (!o.report.empty()) write_output("--report", o.report, reports::to_json(report));
  if (!o.html.empty()) write_output("--html", o.html, reports::to_html(report));
  out << (o.json ? reports::to_json(report) : reports::to_text(report, o.per_instance));
  (void)err;
  if (o.fail_on == "fallback") {
    const bool off = report.verdict == "amp_off" || report.verdict == "not_fp32" || report.verdict == "fallbacks";
    if (off || report.warnings() > 0) return kCheckFailed;
  }
  return kOk;
}

}  // namespace

std::optional<std::uint64_t> parse_byte_size(const std::string& text) {
  if (text.empty()) return std::nullopt;
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || !std::isfinite(value) || value < 0) return std::nullopt;
  const std::string unit(ptr, end);
  double scale = 1;
  if (unit == "K" || unit == "KB" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "MB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty()) return std::nullopt;
  const double bytes = value * scale;
  if (bytes > 1e18) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

Command add_kernels_command(CLI::App& app) {
  auto options = std::make_shared<KernelsOptions>();
  return {add_options(app, *options),
          [options](std::ostream& out, std::ostream& err) { return run_kernels(*options, out, err); }};
}

}  // namespace ampcheck::cli
