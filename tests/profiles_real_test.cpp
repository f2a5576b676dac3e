// `ampcheck kernels` on real profiles of other people's GPU runs (../shared/data/traces,
// its README gives each file's origin; skipped, saying so, where that folder is absent).
// The references are independent of the code under test: the traces are read again here
// whole with nlohmann::json and joined the plain way (each kernel's launch by correlation,
// the shortest op on the launch's thread whose span holds it), and the Nsight Compute CSVs
// are read line by line for their tensor-pipe counters.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_harness.h"
#include "inspector/kernel_class.h"
#include "inspector/profile_check.h"
#include "profile_fixtures.h"
#include "profiles/read.h"
#include "reports/json.h"

namespace ampcheck::inspector {
namespace {

using namespace ampcheck::testing;

const fs::path kTraces = fs::path(AMPCHECK_SOURCE_DIR) / ".." / "shared" / "data" / "traces";

#define NEED_TRACE(file)                                                                                     \
  if (!fs::exists(kTraces / (file)))                                                                         \
  GTEST_SKIP() << (kTraces / (file)).string() << " is absent: the shared traces (../shared/data/traces) are " \
                                                 "not on this machine"

std::string gunzip(const fs::path& p) {
  gzFile f = gzopen(p.c_str(), "rb");
  std::string out;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
  return out;
}

reports::KernelsReport check_file(const std::string& file, const std::string& expect = "auto") {
  ProfileCheckOptions o;
  o.expect = parse_expectation(expect);
  return check_profiles(profiles::read_profiles((kTraces / file).string()), o, file);
}

const char* const kFiles[] = {
    "kineto_a100_alexnet_fp32-tf32_hta.json.gz",        "kineto_b200_vllm_bf16-fp8-mxfp4_tracelens.json.gz",
    "kineto_h100_bert-small_bf16_tracelens.json.gz",    "kineto_h100_qwen1.5-0.5b_bf16_tracelens.json.gz",
    "kineto_v100_fp16_inference_oldschema_hta.json.gz", "kineto_v100_resnet50_fp32_tbplugin2021.json.gz",
    "ncu_rtx5090_deepseek-ocr_bf16_metrics.tar.gz",     "nsys_rtx5090_deepseek-ocr_bf16_cuda_gpu_kern_sum.csv"};

TEST(RealProfiles, EveryKernelIsAttributedOrCountedUnattributableWithItsTime) {
  NEED_TRACE(kFiles[0]);
  for (const char* file : kFiles) {
    SCOPED_TRACE(file);
    for (const profiles::Profile& p : profiles::read_profiles((kTraces / file).string())) {
      const profiles::AttributionStats& a = p.attribution;
      EXPECT_GT(a.kernels, 0);
      EXPECT_EQ(a.attributed + a.no_launch + a.outside_ops + a.no_links, a.kernels);
      EXPECT_EQ(a.attributed_ns + a.no_launch_ns + a.outside_ops_ns + a.no_links_ns, a.kernel_ns);
      // Where the trace has the links (launch events and ops), 99% of the launched time is
      // attributed.
      if (p.links && p.has_ops()) {
        EXPECT_GE(static_cast<double>(a.attributed_ns), 0.99 * static_cast<double>(a.launched_ns));
      }
    }
    // And the command never fails on them: 0 or 1 (a finding), not 2 or 3.
    const CliResult r = run_cli({"kernels", (kTraces / file).string()});
    EXPECT_LE(r.code, 1) << r.err;
  }
}

// The plain join, written again from the trace format: kernel -> launch (cuda_runtime /
// cuda_driver with its correlation) -> the shortest cpu_op or user annotation on the
// launch's pid/tid whose [ts, ts + dur] holds the launch.
struct IndependentJoin {
  std::map<std::pair<long long, std::string>, std::string> op_of;  // (kernel ts in ns, name) -> op name; "" none
  std::int64_t no_launch = 0;
  double no_launch_us = 0;
};

IndependentJoin join_independently(const fs::path& file) {
  const nlohmann::json doc = nlohmann::json::parse(gunzip(file));
  struct Span {
    double ts, end;
    std::string name;
  };
  std::map<std::string, std::vector<Span>> spans;
  std::map<long long, std::pair<std::string, double>> launches;
  auto thread = [](const nlohmann::json& e) { return e["pid"].dump() + "/" + e["tid"].dump(); };
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string cat = e.value("cat", "");
    if (cat == "cpu_op" || (cat == "user_annotation" && e["name"].get<std::string>().rfind("ProfilerStep#", 0) != 0))
      spans[thread(e)].push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>(), e["name"]});
    if (cat == "cuda_runtime" || cat == "cuda_driver")
      launches[e["args"]["correlation"].get<long long>()] = {thread(e), e["ts"].get<double>()};
  }
  IndependentJoin j;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("cat", "") != "kernel") continue;
    const auto l = launches.find(e["args"]["correlation"].get<long long>());
    // Microseconds, an integer (2021-2023) or with three decimals: as nanoseconds, exactly.
    const long long ns = e["ts"].is_number_integer() ? e["ts"].get<long long>() * 1000
                                                     : std::llround(e["ts"].get<double>() * 1000.0);
    const std::pair<long long, std::string> key{ns, e["name"].get<std::string>()};
    if (l == launches.end()) {
      ++j.no_launch;
      j.no_launch_us += e["dur"].get<double>();
      continue;
    }
    const Span* best = nullptr;
    for (const Span& s : spans[l->second.first])
      if (s.ts <= l->second.second && l->second.second <= s.end && (!best || s.end - s.ts < best->end - best->ts))
        best = &s;
    j.op_of[key] = best ? best->name : "";
  }
  return j;
}

TEST(RealProfiles, AttributionAgreesWithAnIndependentJoinOfTheTrace) {
  NEED_TRACE(kFiles[0]);
  for (const char* file : {"kineto_h100_bert-small_bf16_tracelens.json.gz", "kineto_h100_qwen1.5-0.5b_bf16_tracelens.json.gz",
                           "kineto_b200_vllm_bf16-fp8-mxfp4_tracelens.json.gz", "kineto_a100_alexnet_fp32-tf32_hta.json.gz"}) {
    SCOPED_TRACE(file);
    const IndependentJoin ref = join_independently(kTraces / file);
    const profiles::Profile p = profiles::read_profile((kTraces / file).string());
    std::int64_t compared = 0, differ = 0;
    for (const profiles::Kernel& k : p.kernels) {
      if (k.kind != profiles::ActivityKind::kernel) continue;
      const auto it = ref.op_of.find({static_cast<long long>(k.start_ns), p.str(k.name)});
      if (it == ref.op_of.end()) continue;
      ++compared;
      const std::string mine = k.op >= 0 ? p.str(p.ops[static_cast<std::size_t>(k.op)].name) : "";
      if (mine != it->second) {
        ++differ;
        ADD_FAILURE() << p.str(k.name).substr(0, 80) << ": joined to \"" << mine << "\", the plain join says \""
                      << it->second << "\"";
      }
    }
    EXPECT_EQ(compared + ref.no_launch, p.attribution.kernels);
    EXPECT_EQ(differ, 0);
    EXPECT_EQ(p.attribution.no_launch, ref.no_launch);
    EXPECT_NEAR(static_cast<double>(p.attribution.no_launch_ns), ref.no_launch_us * 1000.0, 1.0 + ref.no_launch_us * 1e-6);
  }
}

TEST(RealProfiles, TheQwenTracesFp32BmmIsAFallbackNamedWithItsInputType) {
  NEED_TRACE("kineto_h100_qwen1.5-0.5b_bf16_tracelens.json.gz");
  const reports::KernelsReport r = check_file("kineto_h100_qwen1.5-0.5b_bf16_tracelens.json.gz");
  ASSERT_EQ(r.ranks.size(), 1u);
  const reports::ProfileRank& q = r.ranks[0];
  EXPECT_EQ(q.expect, "autocast-bf16");  // the model ran in bf16: auto reads it so
  const reports::KernelFinding* bmm = nullptr;
  for (const reports::KernelFinding& f : q.check.findings)
    if (f.type == "aten::bmm") bmm = &f;
  ASSERT_NE(bmm, nullptr) << "no finding on aten::bmm";
  EXPECT_EQ(bmm->severity, "warning");
  EXPECT_EQ(bmm->input, "f32");
  EXPECT_NE(bmm->reason.find("Input type: float, float"), std::string::npos) << bmm->reason;
  EXPECT_NE(bmm->kernel.find("cutlass_80_simt_sgemm"), std::string::npos);
  // The kernels still running from the step before the window: 436 of them, counted apart.
  bool drained = false;
  for (const reports::Unattributable& u : q.unattributable)
    drained = drained || (u.reason == "no launch in the profile" && u.kernels == 436);
  EXPECT_TRUE(drained);
}

TEST(RealProfiles, TheFp32ResNet50ControlReadsAsAmpOff) {
  NEED_TRACE("kineto_v100_resnet50_fp32_tbplugin2021.json.gz");
  const reports::KernelsReport r = check_file("kineto_v100_resnet50_fp32_tbplugin2021.json.gz");
  EXPECT_EQ(r.verdict, "amp_off");
  EXPECT_EQ(r.ranks.at(0).expect, "none");
  EXPECT_NE(r.verdict_text.find("AMP is NOT on"), std::string::npos) << r.verdict_text;
  // Meant as fp32, it is fp32 (a V100 has no TF32).
  EXPECT_EQ(check_file("kineto_v100_resnet50_fp32_tbplugin2021.json.gz", "fp32").verdict, "fp32");
  // Meant as fp16 autocast, every GEMM and convolution is a fallback.
  const reports::KernelsReport meant = check_file("kineto_v100_resnet50_fp32_tbplugin2021.json.gz", "autocast-fp16");
  EXPECT_EQ(meant.verdict, "amp_off");
  EXPECT_GT(meant.ranks.at(0).check.warnings(), 0);
}

TEST(RealProfiles, TheA100AlexNetsTf32ConvolutionsAreNotFp32) {
  NEED_TRACE("kineto_a100_alexnet_fp32-tf32_hta.json.gz");
  EXPECT_EQ(check_file("kineto_a100_alexnet_fp32-tf32_hta.json.gz").verdict, "amp_off");
  const reports::KernelsReport r = check_file("kineto_a100_alexnet_fp32-tf32_hta.json.gz", "fp32");
  EXPECT_EQ(r.verdict, "not_fp32");
  bool tf32 = false;
  for (const reports::KernelFinding& f : r.ranks.at(0).check.findings)
    tf32 = tf32 || (f.problem == "narrower_kernel" && f.input == "tf32");
  EXPECT_TRUE(tf32);
}

TEST(RealProfiles, TheBf16BertAndTheB200RunAreOnTensorCores) {
  NEED_TRACE("kineto_h100_bert-small_bf16_tracelens.json.gz");
  const reports::KernelsReport bert = check_file("kineto_h100_bert-small_bf16_tracelens.json.gz");
  EXPECT_EQ(bert.verdict, "amp_on") << bert.verdict_text;
  EXPECT_EQ(bert.ranks.at(0).check.warnings(), 0);
  const reports::KernelsReport b200 = check_file("kineto_b200_vllm_bf16-fp8-mxfp4_tracelens.json.gz");
  const reports::ProfileRank& r = b200.ranks.at(0);
  std::int64_t fp8_tc = 0;
  for (const reports::PrecisionShare& s : r.shares)
    if (s.precision == "fp8" && s.tensor_cores == "yes") fp8_tc += s.ns;
  EXPECT_GT(fp8_tc, 0) << "the MXFP4 x MXFP8 MoE GEMMs and the FP8 attention";
  EXPECT_EQ(r.attributed, r.kernels);
}

// The 20 kernels of the shared ncu tarball, extracted with tar and read line by line.
std::map<std::string, double> ncu_tensor_ops(const fs::path& dir) {
  std::map<std::string, double> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename() != "ncu.metrics.csv") continue;
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("\"sm__ops_path_tensor_src_bf16_dst_fp32.sum\"") == std::string::npos) continue;
      // "0","pid","proc","host","<kernel>",...: the name is the fifth quoted field, the value the 15th.
      std::vector<std::string> f;
      for (std::size_t i = 0; i < line.size();) {
        if (line[i] != '"') {
          ++i;
          continue;
        }
        const std::size_t close = line.find('"', i + 1);
        f.push_back(line.substr(i + 1, close - i - 1));
        i = close + 1;
      }
      std::string v;
      for (const char c : f.at(14))
        if (c != ',') v += c;
      out[f.at(4)] = std::stod(v);
    }
  }
  return out;
}

TEST(RealProfiles, NoTensorCoreVerdictContradictsTheNsightComputeCounters) {
  NEED_TRACE("ncu_rtx5090_deepseek-ocr_bf16_metrics.tar.gz");
  const fs::path dir = scratch_dir();
  ASSERT_EQ(std::system(("tar -xzf '" + (kTraces / "ncu_rtx5090_deepseek-ocr_bf16_metrics.tar.gz").string() + "' -C '" +
                         dir.string() + "'").c_str()),
            0);
  const std::map<std::string, double> truth = ncu_tensor_ops(dir);
  ASSERT_EQ(truth.size(), 20u);
  for (const auto& [name, ops] : truth) {
    SCOPED_TRACE(name);
    const KernelClass c = classify_kernel_name(name);
    if (c.tensor_cores != TensorCores::unknown) {
      EXPECT_EQ(c.tensor_cores == TensorCores::yes, ops > 0) << c.why;
    }
  }
  // The command reads the archive itself and lists no disagreement.
  const reports::KernelsReport r = check_file("ncu_rtx5090_deepseek-ocr_bf16_metrics.tar.gz");
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_EQ(r.ranks[0].counters.size(), 20u);
  EXPECT_EQ(r.ranks[0].counter_disagreements, 0);
  // Joined onto the nsys kernel totals of the same run by name.
  profiles::Profile nsys =
      profiles::read_profile((kTraces / "nsys_rtx5090_deepseek-ocr_bf16_cuda_gpu_kern_sum.csv").string());
  const profiles::Profile ncu = profiles::read_profile((kTraces / "ncu_rtx5090_deepseek-ocr_bf16_metrics.tar.gz").string());
  EXPECT_GE(join_counters(nsys, ncu), 19u);
  ProfileCheckOptions o;
  const reports::ProfileRank joined = check_profile(nsys, o);
  EXPECT_EQ(joined.counter_disagreements, 0);
}

TEST(RealProfiles, TheJsonReportFollowsItsSchema) {
  NEED_TRACE("kineto_h100_qwen1.5-0.5b_bf16_tracelens.json.gz");
  if (std::system("python3 -c 'import json, jsonschema' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 with the jsonschema module is needed (Debian: apt-get install python3-jsonschema)";
  const fs::path dir = scratch_dir();
  // One of each kind of report: findings and costs, counters, totals without links, no ops.
  for (const char* file : {"kineto_h100_qwen1.5-0.5b_bf16_tracelens.json.gz", "ncu_rtx5090_deepseek-ocr_bf16_metrics.tar.gz",
                           "nsys_rtx5090_deepseek-ocr_bf16_cuda_gpu_kern_sum.csv",
                           "kineto_v100_fp16_inference_oldschema_hta.json.gz"}) {
    const fs::path out = dir / (std::string(file) + ".report.json");
    const CliResult r = run_cli({"kernels", (kTraces / file).string(), "--report", out.string()});
    ASSERT_LE(r.code, 1) << r.err;
    const std::string cmd = "python3 -c 'import json,jsonschema,sys; jsonschema.validate(json.load(open(sys.argv[2])), "
                            "json.load(open(sys.argv[1])))' '" +
                            (fs::path(AMPCHECK_SOURCE_DIR) / "reports/schema/kernels.schema.json").string() + "' '" +
                            out.string() + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << file;
  }
}

// The project's own GPU-recorded profiles, once committed under bench/results/profiles/
// (a PyTorch autocast training profile per model, an fp32 control, an Nsight Compute CSV
// of one step): each reads with every kernel attributed or counted unattributable, 99% of
// the launched time attributed, the counters agreeing with the names; a name that says
// fp32 reads as AMP off, one that says fp16 or bf16 as AMP on in that dtype.
TEST(ProjectProfiles, EachRecordedProfileReadsAndSaysWhatItsNameSays) {
  const fs::path dir = fs::path(AMPCHECK_SOURCE_DIR) / "bench" / "results" / "profiles";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir.string() << " is absent: no GPU-recorded profile committed yet";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) {
      // The profiles themselves, not ampcheck's reports or the logs beside them.
      const std::string n = e.path().filename().string();
      if (n.find(".trace.json") != std::string::npos || n.ends_with(".ncu.csv") || n.ends_with(".sqlite"))
        files.push_back(e.path());
    }
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    std::vector<profiles::Profile> all;
    try {
      all = profiles::read_profiles(file.string());
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    for (const profiles::Profile& p : all) {
      const profiles::AttributionStats& a = p.attribution;
      EXPECT_EQ(a.attributed + a.no_launch + a.outside_ops + a.no_links, a.kernels);
      if (p.links && p.has_ops()) {
        EXPECT_GE(static_cast<double>(a.attributed_ns), 0.99 * static_cast<double>(a.launched_ns));
      }
    }
    ProfileCheckOptions o;
    const reports::KernelsReport r = check_profiles(all, o, file.string());
    for (const reports::ProfileRank& rank : r.ranks) EXPECT_EQ(rank.counter_disagreements, 0);
    const std::string name = file.filename().string();
    if (name.find("fp32") != std::string::npos) {
      EXPECT_EQ(r.verdict, "amp_off") << r.verdict_text;
    } else if (name.find("fp16") != std::string::npos || name.find("bf16") != std::string::npos) {
      EXPECT_NE(r.verdict, "amp_off") << r.verdict_text;
      if (r.ranks.at(0).format.find("Nsight Compute") == std::string::npos) {
        EXPECT_EQ(r.ranks.at(0).expect, name.find("bf16") != std::string::npos ? "autocast-bf16" : "autocast-fp16");
      }
    }
  }
}


// Issue 29's GPU check: the PyTorch autocast fp16 profile of ResNet-18 (recorded on an
// H200 with torch.profiler) and ampcheck's own CUPTI run of the same model's ONNX export at
// O2 fp16 (bench/results/profiles/ampcheck_resnet18_fp16_o2_cupti.json) must agree on which
// op types did matrix work and that each did most of it on tensor cores: two independent
// views (PyTorch's kernels read from its trace, ampcheck's from CUPTI) of one model.
TEST(ProjectProfiles, TheResNet18ProfileAndAmpchecksCuptiRunAgreeOnTensorCores) {
  const fs::path dir = fs::path(AMPCHECK_SOURCE_DIR) / "bench" / "results" / "profiles";
  const fs::path trace = dir / "resnet18_fp16_autocast.pt.trace.json.gz";
  const fs::path cupti = dir / "ampcheck_resnet18_fp16_o2_cupti.json";
  if (!fs::exists(trace) || !fs::exists(cupti)) GTEST_SKIP() << "no GPU-recorded ResNet-18 profile committed";
  const std::vector<profiles::Profile> all = profiles::read_profiles(trace.string());
  const reports::KernelsReport r = check_profiles(all, ProfileCheckOptions{}, trace.string());
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_EQ(r.ranks[0].expect, "autocast-fp16") << r.ranks[0].expect_note;
  // ampcheck's op -> {matrix time, of it on tensor cores in f16}, forward only.
  std::map<std::string, std::pair<double, double>> profile_ops, cupti_ops;
  for (const reports::ProfileOp& op : r.ranks[0].types) {
    if (op.matrix_ns <= 0 || op.phase != "forward" || op.policy.empty()) continue;
    auto& [matrix, tc] = profile_ops[op.policy.substr(0, op.policy.find(':'))];
    matrix += static_cast<double>(op.matrix_ns);
    for (const reports::PrecisionShare& sh : op.shares)
      if (sh.precision == "f16" && sh.tensor_cores == "yes") tc += static_cast<double>(sh.ns);
  }
  std::ifstream in(cupti);
  std::stringstream text;
  text << in.rdbuf();
  const reports::Report run = reports::from_json(text.str(), cupti.string());
  ASSERT_TRUE(run.kernels.has_value());
  for (const reports::KernelTypeRow& row : run.kernels->by_type)
    if (row.matrix_ns > 0 && !row.type.ends_with("_grad"))
      cupti_ops[row.type] = {static_cast<double>(row.matrix_ns), static_cast<double>(row.tensor_core_ns)};
  std::vector<std::string> in_profile, in_cupti;
  for (const auto& [op, v] : profile_ops) in_profile.push_back(op);
  for (const auto& [op, v] : cupti_ops) in_cupti.push_back(op);
  EXPECT_EQ(in_profile, in_cupti) << "the op types that did matrix work differ";
  for (const auto& [op, v] : cupti_ops) {
    SCOPED_TRACE(op);
    EXPECT_GT(v.second / v.first, 0.5) << "CUPTI: most of " << op << "'s matrix work on tensor cores";
    if (profile_ops.count(op)) {
      const auto& p = profile_ops[op];
      EXPECT_GT(p.second / p.first, 0.5) << "profile: most of " << op << "'s matrix work in f16 on tensor cores";
    }
  }
}

}  // namespace
}  // namespace ampcheck::inspector
