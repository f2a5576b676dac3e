// `ampcheck kernels` in-process: exit codes (0; 1 with --fail-on fallback when AMP is off
// or an op fell back; 2 with one line naming the file for bad input), the reports it
// writes, the same bytes for the same profile.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_harness.h"
#include "profile_fixtures.h"

namespace ampcheck::testing {
namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A bf16 mm on tensor cores and, with `fallback`, a float bmm on CUDA cores.
fs::path write_trace(const fs::path& dir, bool fallback) {
  std::vector<ordered_json> e = {cpu_op("aten::mm", 1, 0, 100, 1, {{64, 64}, {64, 64}}, {"c10::BFloat16", "c10::BFloat16"}),
                                 runtime("cudaLaunchKernel", 1, 2, 1, 1), kernel(kBf16Gemm, 5, 10, 1, 1)};
  if (fallback) {
    for (auto x : {cpu_op("aten::bmm", 1, 200, 100, 2, {{1, 32, 1}, {1, 1, 559}}, {"float", "float"}),
                   runtime("cudaLaunchKernel", 1, 202, 2, 2), kernel(kF32SimtGemm, 205, 3, 2, 2)})
      e.push_back(x);
  }
  const fs::path p = dir / (fallback ? "fallback.json.gz" : "clean.json.gz");
  write_gzip(p, trace_text(e));
  return p;
}

TEST(CliKernels, FailOnFallbackExitsOneOnlyWhenAnOpFellBack) {
  const fs::path dir = scratch_dir();
  const CliResult clean = run_cli({"kernels", write_trace(dir, false).string(), "--fail-on", "fallback"});
  EXPECT_EQ(clean.code, 0) << clean.err;
  EXPECT_TRUE(has(clean.out, "verdict: AMP is on")) << clean.out;
  const CliResult bad = run_cli({"kernels", write_trace(dir, true).string(), "--fail-on", "fallback", "--per-instance"});
  EXPECT_EQ(bad.code, 1) << bad.err;
  EXPECT_TRUE(has(bad.out, "warning: aten::bmm#0")) << bad.out;
  EXPECT_TRUE(has(bad.out, "GPU time per op instance")) << bad.out;
  EXPECT_TRUE(has(bad.out, "AMP fallbacks:")) << bad.out;
  // Without --fail-on, findings are reported and the exit is 0.
  EXPECT_EQ(run_cli({"kernels", write_trace(dir, true).string()}).code, 0);
}

TEST(CliKernels, BadInputExitsTwoWithOneLineNamingTheFile) {
  const fs::path dir = scratch_dir();
  const fs::path junk = dir / "junk.bin";
  write_text(junk, std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(100, '\0'));
  const CliResult r = run_cli({"kernels", junk.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "ampcheck: kernels: " + junk.string() + ": not a profile")) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  const fs::path cpu = dir / "cpu.json";
  write_text(cpu, trace_text({cpu_op("aten::mm", 1, 0, 10, 1)}));
  const CliResult c = run_cli({"kernels", cpu.string()});
  EXPECT_EQ(c.code, 2);
  EXPECT_TRUE(has(c.err, "no GPU kernels")) << c.err;
  EXPECT_TRUE(has(c.err, "ProfilerActivity.CUDA")) << c.err;
  const CliResult e = run_cli({"kernels", write_trace(dir, false).string(), "--expect", "autocast-fp8"});
  EXPECT_EQ(e.code, 2);
  EXPECT_TRUE(has(e.err, "autocast-bf16")) << "the choices are named: " << e.err;
  const CliResult m = run_cli({"kernels", write_trace(dir, false).string(), "--max-size", "lots"});
  EXPECT_EQ(m.code, 2);
  const CliResult small = run_cli({"kernels", write_trace(dir, false).string(), "--max-size", "100"});
  EXPECT_EQ(small.code, 2);
  EXPECT_TRUE(has(small.err, "--max-size")) << small.err;
}

TEST(CliKernels, WritesJsonAndHtmlAndTheSameProfileGivesTheSameBytes) {
  const fs::path dir = scratch_dir();
  const fs::path trace = write_trace(dir, true);
  const CliResult a = run_cli({"kernels", trace.string(), "--report", (dir / "a.json").string(), "--html",
                               (dir / "a.html").string()});
  ASSERT_EQ(a.code, 0) << a.err;
  const CliResult b = run_cli({"kernels", trace.string(), "--report", (dir / "b.json").string(), "--html",
                               (dir / "b.html").string()});
  EXPECT_EQ(read_file(dir / "a.json"), read_file(dir / "b.json"));
  EXPECT_EQ(read_file(dir / "a.html"), read_file(dir / "b.html"));
  const std::string json = read_file(dir / "a.json");
  EXPECT_TRUE(has(json, "\"schema_version\": \"1.0\"")) << json.substr(0, 200);
  EXPECT_TRUE(has(json, "\"verdict\": \"fallbacks\""));
  const std::string html = read_file(dir / "a.html");
  EXPECT_TRUE(has(html, "<section id=\"kernels-profile\">"));
  EXPECT_TRUE(has(html, "id=\"kernel-types-kernels-profile\""));
  EXPECT_TRUE(has(html, "What the fallbacks cost"));
  const CliResult j = run_cli({"kernels", trace.string(), "--json"});
  EXPECT_EQ(j.out, json);
  // An unwritable report is a usage error before anything is read.
  EXPECT_EQ(run_cli({"kernels", trace.string(), "--report", (dir / "no" / "such" / "dir.json").string()}).code, 2);
}

}  // namespace
}  // namespace ampcheck::testing
