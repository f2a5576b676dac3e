// Profiles written by hand for the tests of profiles/ and `ampcheck kernels`: Chrome-trace
// events in each profiler's own spelling (Kineto 2022+, Kineto 2021, Paddle), files plain
// or gzipped, and a scratch folder per test.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>  // gzopen/gzwrite: the gzipped traces profilers write

#include <unistd.h>  // getpid

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ampcheck::testing {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

// A scratch folder named after the running test, emptied first.
inline fs::path scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::temp_directory_path() / ("ampcheck-profiles-" + std::to_string(::getpid())) /
                       (std::string(info->test_suite_name()) + "." + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

inline void write_gzip(const fs::path& p, const std::string& text) {
  gzFile f = gzopen(p.c_str(), "wb");
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
}

// Kineto 2022+ events (torch.profiler since PyTorch 1.11): microsecond timestamps.
inline ordered_json x_event(const std::string& cat, const std::string& name, int pid, int tid, double ts, double dur,
                            ordered_json args = ordered_json::object()) {
  ordered_json e;
  e["ph"] = "X";
  e["cat"] = cat;
  e["name"] = name;
  e["pid"] = pid;
  e["tid"] = tid;
  e["ts"] = ts;
  e["dur"] = dur;
  e["args"] = std::move(args);
  return e;
}

inline ordered_json cpu_op(const std::string& name, int tid, double ts, double dur, long external_id,
                           ordered_json dims = nullptr, ordered_json types = nullptr) {
  ordered_json args;
  args["External id"] = external_id;
  if (!dims.is_null()) args["Input Dims"] = std::move(dims);
  if (!types.is_null()) args["Input type"] = std::move(types);
  return x_event("cpu_op", name, 100, tid, ts, dur, std::move(args));
}

inline ordered_json runtime(const std::string& name, int tid, double ts, long correlation, long external_id = -1,
                            const std::string& cat = "cuda_runtime") {
  ordered_json args;
  if (external_id >= 0) args["External id"] = external_id;
  args["cbid"] = 211;
  args["correlation"] = correlation;
  return x_event(cat, name, 100, tid, ts, 3, std::move(args));
}

inline ordered_json kernel(const std::string& name, double ts, double dur, long correlation, long external_id = -1) {
  ordered_json args;
  if (external_id >= 0) args["External id"] = external_id;
  args["device"] = 0;
  args["stream"] = 7;
  args["correlation"] = correlation;
  args["grid"] = {4, 1, 1};
  args["block"] = {128, 1, 1};
  return x_event("kernel", name, 0, 7, ts, dur, std::move(args));
}

inline std::string trace_text(const std::vector<ordered_json>& events, ordered_json top = ordered_json::object()) {
  ordered_json doc = std::move(top);
  if (!doc.contains("schemaVersion")) doc["schemaVersion"] = 1;
  doc["traceEvents"] = events;
  return doc.dump(1);
}

// Real kernel names (../shared/data/traces and tests/data/cuda-kernel-names.tsv).
inline const std::string kBf16Gemm = "nvjet_sm90_tst_32x64_64x16_1x1_h_bz_NTN";
inline const std::string kF16Gemm = "nvjet_sm90_hss_64x8_64x16_1x4_h_bz_TNT";
inline const std::string kF32SimtGemm =
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::Params)";
inline const std::string kTf32Conv =
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_"
    "g1_tensor16x8x8_alignc4_execute_kernel_cudnn";
inline const std::string kBf16Gemv =
    "std::enable_if<!T7, void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, "
    "float, (bool)0, (bool)1, (bool)1, (bool)0, (int)7, (bool)0, cublasGemvParamsEx<int, "
    "cublasGemvTensorStridedBatched<const __nv_bfloat16>, cublasGemvTensorStridedBatched<const __nv_bfloat16>, "
    "cublasGemvTensorStridedBatched<__nv_bfloat16>, float>>(T13)";
inline const std::string kAdd =
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, "
    "3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)";

}  // namespace ampcheck::testing
