// The profile readers (profiles/) on profiles written here, one schema and one edge at a
// time: Kineto 2022+ and 2021 traces, HTA's older form, Paddle's, gzipped and not, Nsight
// Systems SQLite exports and kern_sum CSVs, Nsight Compute CSVs (details and raw page), tar
// archives and folders of per-rank traces; interleaved threads, kernels before the window,
// CUDA-graph and driver launches, missing External ids; and every kind of bad input. The
// expectations come from the construction: the op whose span holds a launch on the
// launch's thread is the one that launched the kernel.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <string>
#include <vector>

#include "profile_fixtures.h"
#include "profiles/kernel_names.h"
#include "profiles/nsys_sqlite.h"
#include "profiles/profile_error.h"
#include "profiles/read.h"

namespace ampcheck::profiles {
namespace {

using namespace ampcheck::testing;

Profile read_text(const std::string& text, const std::string& name = "trace.json") {
  const fs::path p = scratch_dir() / name;
  write_text(p, text);
  return read_profile(p.string());
}

// The op a kernel was attributed to, by name; "" when none.
std::string op_of(const Profile& p, const Kernel& k) { return k.op >= 0 ? p.str(p.ops[k.op].name) : ""; }

const Kernel& kernel_named(const Profile& p, const std::string& name, std::size_t nth = 0) {
  for (const Kernel& k : p.kernels)
    if (p.str(k.name) == name && nth-- == 0) return k;
  throw std::runtime_error("no kernel " + name);
}

std::string error_of(const std::string& path, const ReadOptions& o = {}) {
  try {
    read_profiles(path, o);
  } catch (const ProfileError& e) {
    return e.what();
  }
  return "(no error)";
}

// --- Kineto 2022+

std::vector<ordered_json> linear_step() {
  ordered_json step = x_event("user_annotation", "ProfilerStep#1", 100, 1, 0, 1000, {{"External id", 1}});
  ordered_json net = x_event("python_function", "nn.Module: Net_0", 100, 1, 5, 500, {{"Python id", 1}});
  ordered_json lin = x_event("python_function", "nn.Module: Linear_0", 100, 1, 10, 100, {{"Python id", 2}});
  return {step,
          net,
          lin,
          cpu_op("aten::linear", 1, 20, 60, 2, {{8, 16}, {32, 16}, {32}},
                 {"c10::BFloat16", "c10::BFloat16", "c10::BFloat16"}),
          cpu_op("aten::addmm", 1, 25, 50, 3, {{32}, {8, 16}, {16, 32}},
                 {"c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"}),
          runtime("cudaLaunchKernel", 1, 30, 500, 3),
          kernel(kBf16Gemm, 40, 7, 500, 3)};
}

TEST(KinetoTrace, AKernelGoesToTheInnermostOpAroundItsLaunchWithModuleAndInputs) {
  const Profile p = read_text(trace_text(linear_step()));
  EXPECT_EQ(p.format, Format::kineto);
  const Kernel& k = kernel_named(p, kBf16Gemm);
  ASSERT_EQ(op_of(p, k), "aten::addmm");
  EXPECT_EQ(k.no_op, NoOp::attributed);
  EXPECT_EQ(p.str(k.launch), "cudaLaunchKernel");
  EXPECT_EQ(k.start_ns, 40000);
  EXPECT_EQ(k.duration_ns, 7000);
  EXPECT_EQ(k.grid, (Dim3{4, 1, 1}));
  const Op& addmm = p.ops[k.op];
  EXPECT_EQ(addmm.phase, Phase::forward);
  EXPECT_EQ(p.str(addmm.module), "Net_0.Linear_0");
  ASSERT_GE(addmm.parent, 0);
  EXPECT_EQ(p.str(p.ops[addmm.parent].name), "aten::linear");
  const OpInputs& in = p.inputs[addmm.inputs];
  EXPECT_EQ(in.dims, (std::vector<std::vector<std::int64_t>>{{32}, {8, 16}, {16, 32}}));
  EXPECT_EQ(in.types.front(), "c10::BFloat16");
  EXPECT_EQ(p.attribution.kernels, 1);
  EXPECT_EQ(p.attribution.attributed_ns, 7000);
}

TEST(KinetoTrace, InterleavedThreadsEachKeepTheirOwnOps) {
  // Thread 1 runs a long op; thread 2 an op inside that time: each launch goes to its own
  // thread's op, whatever is open on the other.
  const Profile p = read_text(trace_text({cpu_op("aten::mm", 1, 0, 100, 1), cpu_op("aten::add", 2, 50, 10, 2),
                                          runtime("cudaLaunchKernel", 2, 55, 7, 2),
                                          runtime("cudaLaunchKernel", 1, 56, 8, 1), kernel(kAdd, 60, 2, 7),
                                          kernel(kBf16Gemm, 63, 5, 8)}));
  EXPECT_EQ(op_of(p, kernel_named(p, kAdd)), "aten::add");
  EXPECT_EQ(op_of(p, kernel_named(p, kBf16Gemm)), "aten::mm");
}

TEST(KinetoTrace, KernelsWhoseLaunchIsBeforeTheWindowAreUnattributableWithTheirTime) {
  // The previous step's kernels still run when the profiler starts: their launches are
  // not in the trace, and nothing else ties them to an op.
  const Profile p = read_text(trace_text({kernel(kBf16Gemm, 1, 20, 9), kernel(kAdd, 2, 3, 10),
                                          cpu_op("aten::add", 1, 30, 10, 2), runtime("cudaLaunchKernel", 1, 32, 11, 2),
                                          kernel(kAdd, 41, 4, 11, 2)}));
  EXPECT_EQ(kernel_named(p, kBf16Gemm).no_op, NoOp::no_launch);
  EXPECT_EQ(p.attribution.no_launch, 2);
  EXPECT_EQ(p.attribution.no_launch_ns, 23000);
  EXPECT_EQ(p.attribution.attributed, 1);
  EXPECT_EQ(p.attribution.launched_ns, 4000);
}

TEST(KinetoTrace, ACudaGraphLaunchGivesEachOfItsKernelsToTheOpAroundIt) {
  // A graph replay launches all its kernels under the correlation id of one
  // cudaGraphLaunch; a driver-API launch (cuLaunchKernelEx, Triton and TensorRT-LLM) is a
  // launch too.
  const Profile p = read_text(trace_text({cpu_op("aten::graph_replay", 1, 0, 100, 1),
                                          runtime("cudaGraphLaunch", 1, 10, 40, 1),
                                          cpu_op("vllm::moe_forward", 1, 200, 100, 2),
                                          runtime("cuLaunchKernelEx", 1, 210, 41, 2, "cuda_driver"),
                                          kernel(kBf16Gemm, 20, 5, 40), kernel(kAdd, 26, 1, 40),
                                          kernel(kBf16Gemm, 28, 5, 40), kernel(kF16Gemm, 220, 9, 41)}));
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(op_of(p, kernel_named(p, kBf16Gemm, i)), "aten::graph_replay");
  EXPECT_EQ(op_of(p, kernel_named(p, kAdd)), "aten::graph_replay");
  EXPECT_EQ(op_of(p, kernel_named(p, kF16Gemm)), "vllm::moe_forward");
  EXPECT_EQ(p.str(kernel_named(p, kF16Gemm).launch), "cuLaunchKernelEx");
  EXPECT_EQ(p.attribution.attributed, 4);
}

TEST(KinetoTrace, MissingExternalIdsJoinByLaunchAndAnExternalIdJoinsWhereTheLaunchIsMissing) {
  const Profile p = read_text(trace_text({cpu_op("aten::mm", 1, 0, 100, 5), runtime("cudaLaunchKernel", 1, 10, 50),
                                          kernel(kBf16Gemm, 20, 5, 50),  // no External id anywhere
                                          cpu_op("aten::add", 1, 200, 10, 6),
                                          kernel(kAdd, 215, 1, 51, 6)}));  // its launch event lost
  const Kernel& gemm = kernel_named(p, kBf16Gemm);
  EXPECT_EQ(op_of(p, gemm), "aten::mm");
  EXPECT_FALSE(gemm.by_external_id);
  const Kernel& add = kernel_named(p, kAdd);
  EXPECT_EQ(op_of(p, add), "aten::add");
  EXPECT_TRUE(add.by_external_id);
  EXPECT_EQ(p.attribution.by_external_id, 1);
}

TEST(KinetoTrace, AFlowStartStandsInForAMissingLaunchEvent) {
  ordered_json flow = {{"ph", "s"}, {"id", 60}, {"pid", 100}, {"tid", 1}, {"ts", 12}, {"cat", "ac2g"}, {"name", "ac2g"}};
  const Profile p = read_text(trace_text({cpu_op("aten::mm", 1, 0, 100, 5), flow, kernel(kBf16Gemm, 20, 5, 60)}));
  EXPECT_EQ(op_of(p, kernel_named(p, kBf16Gemm)), "aten::mm");
}

TEST(KinetoTrace, BackwardIsReadFromAutogradNodesAndTheOptimizerFromItsRange) {
  const Profile p = read_text(trace_text(
      {cpu_op("autograd::engine::evaluate_function: AddmmBackward0", 2, 0, 100, 1),
       cpu_op("AddmmBackward0", 2, 5, 90, 2), cpu_op("aten::mm", 2, 10, 40, 3),
       runtime("cudaLaunchKernel", 2, 15, 70, 3), kernel(kBf16Gemm, 20, 5, 70),
       x_event("user_annotation", "Optimizer.step#AdamW.step", 100, 1, 300, 100, {{"External id", 4}}),
       cpu_op("aten::_foreach_add_", 1, 310, 20, 5), runtime("cudaLaunchKernel", 1, 315, 71, 5),
       kernel(kAdd, 320, 2, 71)}));
  const Kernel& g = kernel_named(p, kBf16Gemm);
  EXPECT_EQ(p.ops[g.op].phase, Phase::backward);
  EXPECT_EQ(p.ops[kernel_named(p, kAdd).op].phase, Phase::optimizer);
}

TEST(KinetoTrace, ABackwardNodeTakesTheModuleOfItsForwardOpBySequenceNumber) {
  ordered_json fwd = cpu_op("aten::linear", 1, 20, 60, 2);
  fwd["args"]["Sequence number"] = 17;
  ordered_json node = cpu_op("autograd::engine::evaluate_function: AddmmBackward0", 2, 500, 100, 9);
  node["args"]["Sequence number"] = 17;
  const Profile p = read_text(trace_text(
      {x_event("python_function", "nn.Module: Net_0", 100, 1, 5, 200), x_event("python_function", "nn.Module: Linear_0", 100, 1, 10, 100),
       fwd, node, cpu_op("aten::mm", 2, 510, 40, 10), runtime("cudaLaunchKernel", 2, 515, 80, 10),
       kernel(kBf16Gemm, 520, 5, 80)}));
  const Op& mm = p.ops[kernel_named(p, kBf16Gemm).op];
  EXPECT_EQ(mm.phase, Phase::backward);
  EXPECT_EQ(p.str(mm.module), "Net_0.Linear_0");
}

// --- Kineto 2021 (PyTorch 1.8-1.10): capitalised categories, "external id", string tids

TEST(Kineto2021Trace, AttributesAndReadsTheAutogradThreadAsBackward) {
  auto ev = [](const std::string& cat, const std::string& name, const std::string& tid, double ts, double dur,
               ordered_json args) {
    ordered_json e = x_event(cat, name, 25738, 0, ts, dur, std::move(args));
    e["tid"] = tid;
    return e;
  };
  const std::string k1 = "volta_scudnn_128x64_relu_medium_nn_v1";
  const std::string k2 = "volta_sgemm_128x64_nn";
  const Profile p = read_text(trace_text({
      ev("Operator", "aten::cudnn_convolution", "25738", 0, 100, {{"External id", 1}, {"Input Dims", {{1, 3, 8, 8}}}}),
      ev("Runtime", "cudaLaunchKernel", "25738", 10, 5, {{"correlation", 7}, {"external id", 1}}),
      ev("Kernel", k1, "stream 7", 20, 30, {{"correlation", 7}, {"external id", 1}, {"stream", 7}}),
      // The autograd engine's thread: its top-level nodes are backward.
      ev("Operator", "CudnnConvolutionBackward", "25772", 200, 100, {{"External id", 2}}),
      ev("Operator", "torch::autograd::AccumulateGrad", "25772", 400, 50, {{"External id", 3}}),
      ev("Runtime", "cudaLaunchKernel", "25772", 410, 5, {{"correlation", 8}, {"external id", 3}}),
      ev("Kernel", k2, "stream 7", 420, 9, {{"correlation", 8}, {"external id", 3}}),
  }));
  EXPECT_EQ(p.format, Format::kineto_2021);
  EXPECT_EQ(op_of(p, kernel_named(p, k1)), "aten::cudnn_convolution");
  EXPECT_EQ(p.ops[kernel_named(p, k1).op].phase, Phase::forward);
  EXPECT_EQ(op_of(p, kernel_named(p, k2)), "torch::autograd::AccumulateGrad");
  EXPECT_EQ(p.ops[kernel_named(p, k2).op].phase, Phase::backward);
}

TEST(KinetoTrace, HtasOlderFormWithoutOpsJoinsKernelsToLaunchesOnly) {
  ordered_json k = kernel(kF16Gemm, 20, 5, 3);
  k["cat"] = "Kernel";
  ordered_json r = runtime("cudaLaunchKernel", 1, 10, 3);
  r["cat"] = "Runtime";
  const Profile p = read_text(trace_text({k, r}, {{"distributedInfo", {{"rank", 1}}}}));
  EXPECT_EQ(p.format, Format::kineto_legacy);
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(kernel_named(p, kF16Gemm).no_op, NoOp::outside_ops);
  ASSERT_FALSE(p.notes.empty());
  EXPECT_NE(p.notes.front().find("no op events"), std::string::npos);
}

// --- PaddlePaddle's profiler

TEST(PaddleTrace, ReadsOpsWithTheirSlotsAndDtypesAndStripsDurationsFromNames) {
  auto host = [](const std::string& cat, const std::string& name, const std::string& tid, double ts, double dur,
                 ordered_json args = ordered_json::object()) {
    ordered_json e = x_event(cat, name, 9, 0, ts, dur, std::move(args));
    e["tid"] = tid;
    return e;
  };
  const std::string gemm = "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage3_warpsize2x2x1_tensor16x8x16_kernel";
  ordered_json k1 = x_event("Kernel", gemm + "[5.000 us]", 0, 7, 110, 5, {{"correlation id", 77}});
  ordered_json k2 = x_event("Kernel", gemm + "[5.000 us]", 0, 7, 260, 5, {{"correlation id", 78}});
  const std::string text = trace_text(
      {host("Operator", "matmul_v2 dygraph[12.000 us]", "5(C++)", 100, 12,
            {{"input_shapes", {{"Y", {{32, 16}}}, {"X", {{8, 32}}}}}, {"input_dtypes", {{"X", {"float16"}}, {"Y", {"float16"}}}}}),
       host("CudaRuntime", "cudaLaunchKernel[3.000 us]", "5(C++)", 104, 3, {{"correlation id", 77}}),
       host("Backward", "Backward[100.000 us]", "5(Python)", 200, 100),
       host("Operator", "matmul_v2_grad grad_node[20.000 us]", "5(C++)", 240, 20),
       host("CudaRuntime", "cudaLaunchKernel[3.000 us]", "5(C++)", 250, 3, {{"correlation id", 78}}), k1, k2,
       ordered_json::object()},
      {{"schemaVersion", "1.0.1"}, {"displayTimeUnit", "ms"}, {"span_indx", "0"}});
  const Profile p = read_text(text);
  EXPECT_EQ(p.format, Format::paddle);
  const Kernel& first = kernel_named(p, gemm);
  ASSERT_EQ(op_of(p, first), "matmul_v2");
  const OpInputs& in = p.inputs[p.ops[first.op].inputs];
  EXPECT_EQ(in.dims, (std::vector<std::vector<std::int64_t>>{{8, 32}, {32, 16}}));  // X before Y
  EXPECT_EQ(in.types, (std::vector<std::string>{"float16", "float16"}));
  const Kernel& second = kernel_named(p, gemm, 1);
  EXPECT_EQ(op_of(p, second), "matmul_v2_grad");
  EXPECT_EQ(p.ops[second.op].phase, Phase::backward);
}

// --- gzip, and what is not a profile

TEST(ProfileFiles, AGzippedTraceReadsAsThePlainOne) {
  const fs::path dir = scratch_dir();
  const std::string text = trace_text(linear_step());
  write_text(dir / "plain.json", text);
  write_gzip(dir / "zipped.bin", text);  // the name says nothing: the content does
  const Profile a = read_profile((dir / "plain.json").string());
  const Profile b = read_profile((dir / "zipped.bin").string());
  EXPECT_EQ(a.kernels.size(), b.kernels.size());
  EXPECT_EQ(a.ops.size(), b.ops.size());
  EXPECT_EQ(a.attribution.attributed_ns, b.attribution.attributed_ns);
}

TEST(ProfileFiles, BadInputIsAnErrorNamingTheFileAndWhatIsWrong) {
  const fs::path dir = scratch_dir();
  auto expect_error = [&](const std::string& name, const std::string& what) {
    const std::string path = (dir / name).string();
    const std::string e = error_of(path);
    EXPECT_EQ(e.rfind(path, 0), 0u) << "the message names the file first: " << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
  };
  const std::string text = trace_text(linear_step());
  write_gzip(dir / "trace.json.gz", text);
  const auto size = fs::file_size(dir / "trace.json.gz");
  fs::resize_file(dir / "trace.json.gz", size / 2);
  expect_error("trace.json.gz", "cut short");
  write_text(dir / "cut.json", text.substr(0, text.size() / 2));
  expect_error("cut.json", "truncated");
  write_text(dir / "empty.json", "");
  expect_error("empty.json", "is empty");
  write_text(dir / "archive.zip", std::string("PK\x03\x04\x14\x00\x00\x00", 8) + std::string(40, 'x'));
  expect_error("archive.zip", "not a profile");
  write_text(dir / "report.json", R"({"schema_version": "1.5", "run": {}})");
  expect_error("report.json", "traceEvents");
  write_text(dir / "cpu.json", trace_text({cpu_op("aten::mm", 1, 0, 10, 1)}));
  expect_error("cpu.json", "no GPU kernels: the profile has 1 CPU ops and no GPU activity; profile with ProfilerActivity.CUDA");
  expect_error("missing.json", "no such file");
}

TEST(ProfileFiles, ASqliteDatabaseOfAnotherToolIsRefusedNamingItsTables) {
  const fs::path path = scratch_dir() / "app.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "CREATE TABLE users(id INTEGER, name TEXT); INSERT INTO users VALUES (1, 'a');", nullptr, nullptr,
               nullptr);
  sqlite3_close(db);
  const std::string e = error_of(path.string());
  EXPECT_NE(e.find("not an Nsight Systems export"), std::string::npos) << e;
  EXPECT_NE(e.find("users"), std::string::npos) << e;
}

TEST(ProfileFiles, AFileBeyondTheBoundIsRefusedBeforeItIsRead) {
  // A sparse 5 GB file: refused from its size, with the fix; nothing is read.
  const fs::path path = scratch_dir() / "huge.json";
  write_text(path, "{");
  fs::resize_file(path, std::uint64_t{5} << 30);
  const std::string e = error_of(path.string());
  EXPECT_NE(e.find("5.0 GB"), std::string::npos) << e;
  EXPECT_NE(e.find("--max-size"), std::string::npos) << e;
  fs::remove(path);
  // Decompressed text counts too: a small gzip that inflates past the bound.
  const fs::path bomb = scratch_dir() / "bomb.json.gz";
  write_gzip(bomb, "[" + std::string(3 << 20, ' ') + "]");
  ReadOptions small;
  small.max_bytes = 1 << 20;
  const std::string b = error_of(bomb.string(), small);
  EXPECT_NE(b.find("once decompressed"), std::string::npos) << b;
}

// --- Nsight Systems

void exec(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "") << "\n" << sql;
}

TEST(NsysSqlite, KernelsGoToTheirEmitNvtxOpThroughTheRuntimeLaunch) {
  const fs::path path = scratch_dir() / "report.sqlite";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  // The tables and columns of `nsys export --type sqlite` (a subset; extra columns ignored).
  exec(db, "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)");
  exec(db, "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, contextId INT, streamId INT, "
           "correlationId INT, globalPid INT, demangledName INT, shortName INT, mangledName INT, gridX INT, gridY INT, "
           "gridZ INT, blockX INT, blockY INT, blockZ INT, registersPerThread INT)");
  exec(db, "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT, "
           "correlationId INT, nameId INT, returnValue INT)");
  exec(db, "CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, rangeId INT, category INT, color INT, text TEXT, "
           "globalTid INT, endGlobalTid INT, textId INT, domainId INT)");
  const std::int64_t a = (std::int64_t{4242} << 24) | 4242, b = (std::int64_t{4242} << 24) | 4250;  // two threads
  exec(db, "INSERT INTO StringIds VALUES (1, '" + kBf16Gemm + "'), (2, 'cudaLaunchKernel_v7000'), (3, '" + kAdd +
               "'), (4, 'aten::mm, seq = 4, op_id = 12, sizes = [[64, 32], [32, 16]], input_op_ids = [(3, 0)]')");
  exec(db, "INSERT INTO NVTX_EVENTS VALUES (0, 10000, 59, 0, 0, 0, 'train_step', " + std::to_string(a) + ", NULL, NULL, 0)");
  exec(db, "INSERT INTO NVTX_EVENTS VALUES (100, 600, 59, 0, 0, 0, 'aten::addmm, seq = 3, op_id = 9, sizes = [[16], [8, "
           "32], [32, 16]]', " + std::to_string(a) + ", NULL, NULL, 0)");
  exec(db, "INSERT INTO NVTX_EVENTS VALUES (2000, 3000, 59, 0, 0, 0, 'autograd::engine::evaluate_function: MmBackward0', " +
               std::to_string(b) + ", NULL, NULL, 0)");
  exec(db, "INSERT INTO NVTX_EVENTS VALUES (2100, 2900, 59, 0, 0, 0, NULL, " + std::to_string(b) + ", NULL, 4, 0)");
  exec(db, "INSERT INTO NVTX_EVENTS VALUES (50, NULL, 34, 0, 0, 0, 'a mark', " + std::to_string(a) + ", NULL, NULL, 0)");
  exec(db, "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (200, 210, 0, " + std::to_string(a) + ", 1, 2, 0), (2200, 2210, "
           "0, " + std::to_string(b) + ", 2, 2, 0), (5000, 5010, 0, " + std::to_string(a) + ", 3, 2, 0)");
  exec(db, "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (300, 380, 0, 1, 7, 1, 0, 1, 1, 1, 8, 1, 1, 128, 1, 1, 64), "
           "(2300, 2400, 0, 1, 7, 2, 0, 1, 1, 1, 8, 1, 1, 128, 1, 1, 64), (5100, 5110, 0, 1, 7, 3, 0, 3, 3, 3, 8, 1, 1, 128, "
           "1, 1, 32), (10, 30, 0, 1, 7, 99, 0, 3, 3, 3, 8, 1, 1, 128, 1, 1, 32)");
  sqlite3_close(db);

  const Profile p = read_profile(path.string());
  EXPECT_EQ(p.format, Format::nsys_sqlite);
  const Kernel& fwd = kernel_named(p, kBf16Gemm);
  ASSERT_EQ(op_of(p, fwd), "aten::addmm");
  EXPECT_EQ(p.inputs[p.ops[fwd.op].inputs].dims, (std::vector<std::vector<std::int64_t>>{{16}, {8, 32}, {32, 16}}));
  EXPECT_EQ(p.ops[fwd.op].sequence, 3);
  EXPECT_EQ(fwd.duration_ns, 80);
  const Kernel& bwd = kernel_named(p, kBf16Gemm, 1);
  ASSERT_EQ(op_of(p, bwd), "aten::mm");
  EXPECT_EQ(p.ops[bwd.op].phase, Phase::backward);
  EXPECT_EQ(kernel_named(p, kAdd).no_op, NoOp::no_launch);  // at 10 ns: its launch is not in the export
  EXPECT_EQ(op_of(p, kernel_named(p, kAdd, 1)), "train_step");  // the user's own range
  EXPECT_EQ(p.ops[kernel_named(p, kAdd, 1).op].kind, OpKind::annotation);
}

TEST(NsysSqlite, ParsesEmitNvtxRanges) {
  const NvtxOp o = parse_nvtx_range("aten::addmm, seq = 12, op_id = 40, sizes = [[256], [64, 128], [128, 256]]");
  EXPECT_EQ(o.name, "aten::addmm");
  EXPECT_EQ(o.sequence, 12);
  EXPECT_EQ(o.sizes, (std::vector<std::vector<std::int64_t>>{{256}, {64, 128}, {128, 256}}));
  EXPECT_TRUE(o.framework_op);
  const NvtxOp user = parse_nvtx_range("forward");
  EXPECT_EQ(user.name, "forward");
  EXPECT_FALSE(user.framework_op);
}

TEST(NsysCsv, KernSumRowsAreTotalsWithoutLinksInBothHeaderGenerations) {
  const std::string name = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, "
                           "std::array<char *, (unsigned long)3>>(int, T2, T3)";
  const Profile now = read_text("Processing [report.sqlite] with [cuda_gpu_kern_sum.py]...\n\n"
                                "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
                                "60.0,1200,4,300.0,300.0,290,310,8.2,\"" + name + "\"\n"
                                "40.0,800,2,400.0,400.0,390,410,10.0,volta_sgemm_128x64_nn\n",
                                "sum.csv");
  EXPECT_EQ(now.format, Format::nsys_csv);
  EXPECT_FALSE(now.links);
  ASSERT_EQ(now.kernels.size(), 2u);
  EXPECT_EQ(now.str(now.kernels[0].name), name);
  EXPECT_EQ(now.kernels[0].instances, 4);
  EXPECT_EQ(now.kernels[0].duration_ns, 1200);
  EXPECT_EQ(now.attribution.no_links_ns, 2000);
  const Profile old = read_text("Time(%),Total Time (ns),Instances,Average,Minimum,Maximum,StdDev,Name\n"
                                "100.0,500,5,100.0,90,110,5.0,volta_sgemm_128x64_nn\n",
                                "old.csv");
  EXPECT_EQ(old.kernels.front().instances, 5);
  const fs::path api = scratch_dir() / "api.csv";
  write_text(api, "Time (%),Total Time (ns),Num Calls,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n1,2,3,4,5,6,7,8,x\n");
  EXPECT_NE(error_of(api.string()).find("cuda_gpu_kern_sum"), std::string::npos);
}

// --- Nsight Compute

const std::string kNcuHeader =
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\",\"Grid "
    "Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\",\"Rule Name\",\"Rule "
    "Type\",\"Rule Description\"\n";

std::string ncu_row(int id, const std::string& kernel, const std::string& metric, const std::string& unit,
                    const std::string& value) {
  return "\"" + std::to_string(id) + "\",\"1\",\"python3\",\"h\",\"" + kernel + "\",\"1\",\"7\",\"(128, 1, 1)\",\"(152, 4, "
         "1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"" + metric + "\",\"" + unit + "\",\"" + value + "\",\n";
}

TEST(NcuCsv, ReadsEachKernelsTensorPipeCountersAndDurationInTheDetailsForm) {
  const std::string gemm = "void Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(Params)";
  const Profile p = read_text("==PROF== Connected to process 1\n" + kNcuHeader +
                                  ncu_row(0, gemm, "gpu__time_duration.sum", "us", "23.42") +
                                  ncu_row(0, gemm, "sm__ops_path_tensor_src_bf16_dst_bf16.sum", "", "n/a") +
                                  ncu_row(0, gemm, "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "", "1,275,068,416") +
                                  ncu_row(1, "void add_kernel(float*)", "gpu__time_duration.sum", "nsecond", "900") +
                                  ncu_row(1, "void add_kernel(float*)", "sm__ops_path_tensor_src_bf16_dst_fp32.sum", "", "0"),
                              "ncu.csv");
  EXPECT_EQ(p.format, Format::ncu_csv);
  ASSERT_EQ(p.kernels.size(), 2u);
  const Counters& c = p.counters[p.kernels[0].counters];
  EXPECT_DOUBLE_EQ(c.duration_ns, 23420);
  ASSERT_EQ(c.tensor.size(), 1u);  // n/a is no number
  EXPECT_EQ(c.tensor[0].first, "sm__ops_path_tensor_src_bf16_dst_fp32.sum");
  EXPECT_DOUBLE_EQ(c.tensor[0].second, 1275068416.0);
  EXPECT_EQ(p.kernels[0].block, (Dim3{128, 1, 1}));
  EXPECT_EQ(p.kernels[0].grid, (Dim3{152, 4, 1}));
  EXPECT_TRUE(p.counters[p.kernels[1].counters].tensor_measured);
  EXPECT_EQ(p.kernels[1].duration_ns, 900);
}

TEST(NcuCsv, ReadsTheRawPageFormWithItsUnitsRow) {
  const Profile p = read_text(
      "\"ID\",\"Process ID\",\"Kernel Name\",\"Block Size\",\"Grid Size\",\"gpu__time_duration.sum\","
      "\"sm__inst_executed_pipe_tensor_op_hmma.sum\"\n"
      "\"\",\"\",\"\",\"\",\"\",\"usecond\",\"inst\"\n"
      "\"0\",\"1\",\"volta_h884gemm_64x64_ldg8_nn\",\"(256, 1, 1)\",\"(40, 1, 1)\",\"12.5\",\"20,480\"\n",
      "raw.csv");
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.kernels[0].duration_ns, 12500);
  EXPECT_DOUBLE_EQ(p.counters[0].tensor.at(0).second, 20480.0);
}

// A POSIX ustar archive, written here as tar writes one.
std::string tar(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out;
  for (const auto& [name, data] : files) {
    std::string h(512, '\0');
    auto put = [&h](std::size_t at, std::string_view field) { h.replace(at, field.size(), field); };
    put(0, name);
    put(100, "0000644");
    put(108, "0000000");
    put(116, "0000000");
    char size[13];
    std::snprintf(size, sizeof size, "%011o", static_cast<unsigned>(data.size()));
    put(124, size);
    put(136, "00000000000");
    h[156] = '0';
    put(257, std::string_view("ustar\0", 6));
    put(263, "00");
    put(148, "        ");  // the checksum counts its own field as spaces
    unsigned sum = 0;
    for (const char c : h) sum += static_cast<unsigned char>(c);
    char check[8];
    std::snprintf(check, sizeof check, "%06o", sum);
    put(148, std::string(check, 6) + '\0' + ' ');
    out += h + data + std::string((512 - data.size() % 512) % 512, '\0');
  }
  return out + std::string(1024, '\0');
}

TEST(ProfileArchives, NcuCsvsOfOneRunInATarGzAreOneProfile) {
  const fs::path path = scratch_dir() / "ncu.tar.gz";
  write_gzip(path, tar({{"run/kernel_0002/ncu.metrics.csv", kNcuHeader + ncu_row(0, "b_kernel", "gpu__time_duration.sum", "us", "2")},
                        {"run/env.json", "{\"cuda\": \"12.8\"}"},
                        {"run/kernel_0001/ncu.metrics.csv", kNcuHeader + ncu_row(0, "a_kernel", "gpu__time_duration.sum", "us", "1")}}));
  const std::vector<Profile> all = read_profiles(path.string());
  ASSERT_EQ(all.size(), 1u);
  const Profile& p = all.front();
  EXPECT_EQ(p.format, Format::ncu_csv);
  ASSERT_EQ(p.kernels.size(), 2u);
  EXPECT_EQ(p.str(p.kernels[0].name), "a_kernel");  // members in name order
  EXPECT_EQ(p.kernels[1].duration_ns, 2000);
  bool noted = false;
  for (const std::string& n : p.notes) noted = noted || n.find("env.json") != std::string::npos;
  EXPECT_TRUE(noted) << "the member that is no profile is named";
}

TEST(ProfileArchives, AFolderOfPerRankTracesGivesOneProfilePerRankByRank) {
  const fs::path dir = scratch_dir();
  write_text(dir / "a.json", trace_text(linear_step(), {{"distributedInfo", {{"rank", 1}}}}));
  write_gzip(dir / "b.json.gz", trace_text(linear_step(), {{"distributedInfo", {{"rank", 0}}}}));
  write_text(dir / "notes.txt", "not a profile");
  const std::vector<Profile> all = read_profiles(dir.string());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].rank, 0);
  EXPECT_EQ(all[1].rank, 1);
  EXPECT_EQ(op_of(all[0], kernel_named(all[0], kBf16Gemm)), "aten::addmm");
}

TEST(KernelNames, OneKernelGetsOneKeyInEveryToolsSpelling) {
  // The same kernels as Kineto (cxxabi), nsys and ncu print them.
  EXPECT_EQ(kernel_name_key("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>("
                            "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)"),
            kernel_name_key("void Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(Params)"));
  EXPECT_EQ(kernel_name_key(kAdd), kernel_name_key("void vectorized_elementwise_kernel<4, CUDAFunctor_add<BFloat16>, "
                                                   "array<char *, 3>>(int, T2, T3)"));
  EXPECT_EQ(kernel_name_key(kBf16Gemv),
            kernel_name_key("enable_if<!T7, void>::type kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, "
                            "float, 0, 1, 1, 0, 7, 0, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<const "
                            "__nv_bfloat16>, cublasGemvTensorStridedBatched<const __nv_bfloat16>, "
                            "cublasGemvTensorStridedBatched<__nv_bfloat16>, float>>(T13)"));
  // Literals are kept: the GEMV of (int)6 is another kernel.
  EXPECT_NE(kernel_name_key("kernel<float, (int)6>"), kernel_name_key("kernel<float, (int)7>"));
}

}  // namespace
}  // namespace ampcheck::profiles
