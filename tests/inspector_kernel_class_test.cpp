// The kernel classifier (inspector/kernel_class.h) against data it was not written from:
//   - every row of ../shared/data/cuda-kernel-names.tsv, real kernel names from public
//     profiler output, each with the precision and tensor-core use listed there;
//   - names in NVIDIA's documented naming: NVIDIA's MODS GEMM tables (which give each
//     cuBLAS/xmma kernel's operand, output and accumulator types and its instruction),
//     CUTLASS's kernel generator and its example 27, TensorRT and profiler logs; the few
//     built from a grammar rather than copied are marked so;
//   - names that fit no grammar, or fit it only in part, which must say unknown;
//   - the project's own kernels, found in kernels/cuda/*.cu, and the notes they write.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
// GCC 12 sees libstdc++'s own regex automaton as maybe-uninitialized under -O2 with the
// sanitizers (a false positive inside the library header), and warnings are errors.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <regex>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#include <sstream>
#include <string>
#include <vector>

#include "inspector/kernel_class.h"
#include "inspector/kernel_grammar.h"  // the family table, for its guard

namespace ampcheck::inspector {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = AMPCHECK_SOURCE_DIR;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// "-" in the shared list means the name does not say.
std::string listed(std::string_view s) { return s == "-" ? "unknown" : std::string(s); }

struct Expected {
  const char* name;
  const char* input;
  const char* accumulate;
  const char* tensor_cores;
  const char* kind;
};

void expect_class(const KernelClass& c, const Expected& e) {
  SCOPED_TRACE(std::string(e.name) + "\n  why: " + c.why);
  EXPECT_EQ(precision_name(c.input), std::string(e.input));
  EXPECT_EQ(precision_name(c.accumulate), std::string(e.accumulate));
  EXPECT_EQ(tensor_cores_name(c.tensor_cores), std::string(e.tensor_cores));
  EXPECT_EQ(kind_name(c.kind), std::string(e.kind));
  EXPECT_FALSE(c.why.empty());
}

// A table of name -> expected reading, each row read by classify_kernel_name.
template <std::size_t N>
void expect_rows(const Expected (&rows)[N]) {
  for (const Expected& e : rows) expect_class(classify_kernel_name(e.name), e);
}

// ---------------------------------------------------------------------------------
// The shared list of real names

// Every row of one copy of the list; returns the rows read.
int check_list(const fs::path& list) {
  std::ifstream in(list);
  EXPECT_TRUE(in) << "cannot read " << list << ": the classifier's reference list (issue 17)";
  std::string line;
  bool header = false;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols;
    std::stringstream s(line);
    for (std::string col; std::getline(s, col, '\t');) cols.push_back(col);
    if (!header) {  // name input accumulate tensor_cores seen_in
      EXPECT_GE(cols.size(), 4u);
      if (cols.size() < 4) return rows;
      EXPECT_EQ(cols[0], "name");
      EXPECT_EQ(cols[1], "input");
      EXPECT_EQ(cols[2], "accumulate");
      EXPECT_EQ(cols[3], "tensor_cores");
      header = true;
      continue;
    }
    EXPECT_GE(cols.size(), 4u) << line;
    if (cols.size() < 4) continue;
    const KernelClass c = classify_kernel_name(cols[0]);
    SCOPED_TRACE(cols[0] + "\n  why: " + c.why);
    EXPECT_EQ(precision_name(c.input), listed(cols[1]));
    EXPECT_EQ(precision_name(c.accumulate), listed(cols[2]));
    EXPECT_EQ(tensor_cores_name(c.tensor_cores), listed(cols[3]));
    ++rows;
  }
  return rows;
}

// The project's copy (tests/data, so a clone alone has it) and, where the checkout sits
// beside it, the shared list itself, which grows with the names captured on GPU runs.
TEST(KernelClass, EveryNameOfTheSharedListAsListed) {
  EXPECT_GE(check_list(kSource / "tests" / "data" / "cuda-kernel-names.tsv"), 14) << "the list lost rows";
  const fs::path shared = kSource / ".." / "shared" / "data" / "cuda-kernel-names.tsv";
  if (fs::exists(shared)) {
    EXPECT_GE(check_list(shared), 14) << "the shared list lost rows";
  }
}

// ---------------------------------------------------------------------------------
// NVIDIA's naming

const Expected kCublasNames[] = {
    // NVIDIA MODS tables: gemmType H884GEMM, typeA/typeC f16.
    {"volta_h884gemm_64x64_ldg8_nn", "f16", "f16", "yes", "gemm"},
    // S884GEMM, typeA f16, typeC f16: the prefix is the output, the suffix the operands.
    {"volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", "f16", "f32", "yes", "gemm"},
    // H884GEMM with typeC int8 and typeA f16: an int8 prefix is the output type only.
    {"volta_int8_h884gemm_128x128_ldg8_mods_nt", "f16", "f16", "yes", "gemm"},
    // I8816GEMM "Int8-precision using IMMA instruction", typeA int8, accumulator int32.
    {"volta_int8_i8816gemm_int8_128x128_ldg16_relu_mods_nt", "int8", "int32", "yes", "gemm"},
    {"volta_int32_i8816gemm_int8_256x128_ldg16_mods_nt", "int8", "int32", "yes", "gemm"},
    {"volta_sgemm_128x128_mods_nt", "f32", "f32", "no", "gemm"},
    {"volta_sgemm_128x64_nn", "f32", "f32", "no", "gemm"},
    {"ampere_sgemm_128x64_tn", "f32", "f32", "no", "gemm"},
    {"turing_h1688gemm_128x128_ldg8_tn", "f16", "f16", "yes", "gemm"},
    {"ampere_h16816gemm_256x128_ldg8_stages_32x3_nn", "f16", "f16", "yes", "gemm"},
    {"ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn", "bf16", "f32", "yes", "gemm"},
    // Built from the grammar: a TF32 operand type after the core.
    {"ampere_tf32_s1688gemm_tf32_256x128_16x3_nn", "tf32", "f32", "yes", "gemm"},
    // Seen in a profiler list (kineto test data): f16 operands written after the core.
    {"volta_h884gemm_fp16_128x128_ldg8_nn", "f16", "f16", "yes", "gemm"},
    // cuDNN's kernels of the same scheme: SCUDNN (no shape: CUDA cores), winograd ones.
    {"maxwell_scudnn_winograd_128x128_ldg1_ldg4_tile150x150", "f32", "f32", "no", "conv"},
    {"volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "f32", "f32", "no", "conv"},
    {"ampere_scudnn_128x64_relu_xregs_large_nn_v1", "f32", "f32", "no", "conv"},
    {"volta_fp16_s884cudnn_fp16_256x128_ldg8_dgrad_f2f_exp_small_nhwc2nchw_tt_v1", "f16", "f32", "yes",
     "conv dgrad"},
    {"turing_fp16_s1688cudnn_fp16_128x128_ldg8_wgrad_idx_exp_interior_nhwc_nt_v1", "f16", "f32", "yes",
     "conv wgrad"},
    // HGEMM on a pre-Volta target; ZGEMM complex double; I8816CUDNN (built from the MODS enum).
    {"maxwell_hgemm_256x128_nt", "f16", "f16", "no", "gemm"},
    {"volta_zgemm_32x32_nt", "f64", "f64", "no", "gemm"},
    {"turing_int8_i8816cudnn_int8_128x128_ldg16_relu_interior_nhwc_tn_v1", "int8", "int32", "yes", "conv"},
    // GCGEMM "Gaussian complex single-precision", from a PyTorch profiler list.
    {"volta_gcgemm_32x32_nt", "f32", "f32", "no", "gemm"},
};
TEST(KernelClass, CublasNames) { expect_rows(kCublasNames); }

const Expected kXmmaNames[] = {
    // NVIDIA MODS tables, name -> instruction.
    {"sm80_xmma_gemm_f16f16_f16f32_f32_nt_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16", "f16", "f32",
     "yes", "gemm"},
    {"sm80_xmma_gemm_f16f16_f16f16_f16_nt_n_tilesize256x128x32_stage3_warpsize4x2x1_tensor16x8x16", "f16", "f16",
     "yes", "gemm"},
    // FFMA: an xmma kernel on CUDA cores, so "xmma" alone says nothing about tensor cores.
    {"sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4", "f32",
     "f32", "no", "gemm"},
    {"sm80_xmma_gemm_tf32tf32_tf32f32_f32_nt_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8", "tf32", "f32",
     "yes", "gemm"},
    {"sm80_xmma_gemm_i8i8_i8i32_f32_tn_n_tilesize256x128x64_stage4_warpsize4x2x1_tensor16x8x32", "int8", "int32",
     "yes", "gemm"},
    {"sm80_xmma_sparse_gemm_f16f16_f16f32_f32_nt_n_tilesize128x128x64_stage3_warpsize2x2x1_sptensor16x8x32", "f16",
     "f32", "yes", "gemm"},
    {"sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize256x128x32_cgasize1x2x1_stage4_gmmastage2_warpgroupsize2x1x1_"
     "hgmma64x128x8",
     "tf32", "f32", "yes", "gemm"},
    {"sm90_xmma_gemm_i8i32_i8i32_f32_tn_n_tilesize128x128x128_cgasize1x2x1_stage4_gmmastage2_warpgroupsize1x1x1_"
     "igmma64x128x32",
     "int8", "int32", "yes", "gemm"},
    {"sm90_xmma_gemm_f64f64_f64f64_f64_nt_n_tilesize128x128x16_stage3_warpsize4x2x1_tensor16x8x16", "f64", "f64",
     "yes", "gemm"},
    // FP8 operands with a bf16 output (a cuBLASLt test's comment).
    {"sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128_cgasize1x2x1_stage4_gmmastage2_"
     "warpgroupsize1x1x1_tensor64x128x32",
     "fp8", "f32", "yes", "gemm"},
    // TensorRT tactics.
    {"sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x64x16_stage6_warpsize2x2x1_tensor16x8x8", "tf32", "f32",
     "yes", "gemm"},
    {"sm80_xmma_fprop_implicit_gemm_indexed_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize128x64x8_stage2_warpsize1x4x1_"
     "g1_ffma_aligna4_alignc4_beta0_packed_stride",
     "f32", "f32", "no", "conv fprop"},
    {"sm75_xmma_fprop_implicit_gemm_indexed_wo_smem_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize128x16x32_stage1_"
     "warpsize4x1x1_g1_tensor16x8x8_aligna2_alignc4",
     "f16", "f16", "yes", "conv fprop"},
    // cuDNN through PyTorch's profiler and nsys.
    {"sm80_xmma_wgrad_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4_warpsize1x1x4_"
     "g8_tensor16x8x16_execute_kernel__5x_cudnn",
     "f16", "f32", "yes", "conv wgrad"},
    {"sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_"
     "tensor16x8x8_alignc4_execute_kernel__5x_cudnn",
     "tf32", "f32", "yes", "conv fprop"},
    {"sm90_xmma_dgrad_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x64x32_warpgroupsize1x1x1_g1_"
     "execute_segment_k_on_kernel__5x_cudnn",
     "tf32", "f32", "yes", "conv dgrad"},
    // Built from the grammar: the Hopper wgrad of the shared list's fprop.
    {"sm90_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_"
     "execute_segment_k_off_kernel__5x_cudnn",
     "bf16", "f32", "yes", "conv wgrad"},
    {"sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16", "bf16", "f32",
     "yes", "gemm"},
    // A profiler table cut the name before the instruction: tensor cores not read.
    {"sm80_xmma_wgrad_implicit_gemm_indexed_f16f16_f16f32_...", "f16", "f32", "unknown", "conv wgrad"},
    // ... but TF32 operands exist only on tensor cores.
    {"sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nh...", "tf32", "f32", "yes", "conv fprop"},
    // A GEMV whose tuple is not the pair/pair/scale form, on a pre-Volta target.
    {"sm50_xmma_cublas_gemvx_f16f16_f32_f32_tn_n_int32_unit_n_launch_param4x32x32_strided_unit_stride", "unknown",
     "unknown", "no", "gemv"},
};
TEST(KernelClass, XmmaNames) { expect_rows(kXmmaNames); }

const Expected kCutlassNames[] = {
    // Benchmarks' kernel filters on the CUTLASS profiler's names.
    {"cutlass_simt_sgemm_128x128_8x2_nn_align1", "f32", "f32", "no", "gemm"},
    {"cutlass_simt_hgemm_256x128_8x2_nn_align1", "f16", "f16", "no", "gemm"},
    {"cutlass_tensorop_h16816gemm_256x128_32x3_nn_align8", "f16", "f16", "yes", "gemm"},
    {"cutlass_tensorop_d884gemm_128x128_16x3_nn_align1", "f64", "f64", "yes", "gemm"},
    {"cutlass_tensorop_bf16_s16816gemm_bf16_256x128_32x3_nn_align8", "bf16", "f32", "yes", "gemm"},
    {"cutlass_tensorop_tf32_s1688gemm_tf32_256x128_16x3_tt_align4", "tf32", "f32", "yes", "gemm"},
    {"cutlass_tensorop_s8_i16832gemm_s8_256x128_64x3_tn_align16", "int8", "int32", "yes", "gemm"},
    {"cutlass_tensorop_i8816gemm_s8_64x128_64x2_tn_align4", "int8", "int32", "yes", "gemm"},
    {"cutlass_75_tensorop_i8816gemm_s8_128x128_tn_align16", "int8", "int32", "yes", "gemm"},
    // CUTLASS example 27's three f32 flavours on tensor cores. The generator names its 3xTF32
    // kernel (GenerateSM80_TensorOp_1688_fast_fp32_math) like a plain f32 tensor-op kernel,
    // which CUTLASS runs as TF32 (NVIDIA/cutlass issue 466): the name reads TF32, the why
    // saying it cannot tell 3xTF32 apart (this row read f32 before issue 42).
    {"cutlass_tensorop_s1688gemm_128x128_16x3_nn_align4", "tf32", "f32", "yes", "gemm"},
    {"cutlass_tensorop_s1688tf32gemm_128x128_16x3_nn_align4", "tf32", "f32", "yes", "gemm"},
    {"cutlass_tensorop_s1688gemm_tf32_128x128_16x3_nn_align4", "tf32", "f32", "yes", "gemm"},
    // Built from conv2d_operation.py's grammar.
    {"cutlass_tensorop_s16816fprop_optimized_f16_128x128_32x3_nhwc_align8", "f16", "f32", "yes", "conv fprop"},
    {"cutlass_tensorop_h16816dgrad_optimized_f16_128x128_32x3_nhwc_align8", "f16", "f16", "yes", "conv dgrad"},
    // Built from the CUTLASS 3 procedural name.
    {"cutlass3x_sm90_tensorop_s64x128x16gemm_f16_f16_f32_f16_f16_128x128x64_1x1x1_0_tnn_align8_warpspecialized_"
     "cooperative_epi_tma",
     "f16", "f32", "yes", "gemm"},
    // A wrapper kernel whose template argument is the CUTLASS name.
    {"void cutlass::Kernel<cutlass_80_tensorop_s16816gemm_f16_128x128_32x4_tn_align8>(cutlass_80_tensorop_"
     "s16816gemm_f16_128x128_32x4_tn_align8::Params)",
     "f16", "f32", "yes", "gemm"},
    {"void cutlass__5x_cudnn::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4>(cutlass_"
     "tensorop_s1688fprop_optimized_tf32_64x64_16x10_nhwc_align4::Params)",
     "tf32", "f32", "yes", "conv fprop"},
    // The WMMA class, built from the generator's grammar.
    {"void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(cutlass_80_wmma_"
     "tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8::Params)",
     "bf16", "f32", "yes", "gemm"},
    // CUTLASS's split-K reduction: no multiply of matrices.
    {"cutlass_80_splitKreduce_kernel", "unknown", "unknown", "no", "reduction"},
};
TEST(KernelClass, CutlassNames) { expect_rows(kCutlassNames); }

const Expected kDemangledTemplates[] = {
    // A Winograd convolution's transforms are its work: conv kinds, as cuDNN's Wgrad
    // transforms already were (these two read "other" before issue 42).
    {"void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::"
     "WinogradDataParams<float, float>)",
     "f32", "unknown", "no", "conv fprop"},
    {"void cudnn::winograd::generateWinogradTilesKernel<0, float, float>(cudnn::winograd::"
     "GenerateWinogradTilesParams<float, float>)",
     "f32", "unknown", "no", "conv"},
    // A legacy FMA engine over float: f32 on CUDA cores (accumulator and tensor cores read
    // "unknown" before issue 42).
    {"void cudnn::detail::wgrad_alg0_engine<float, 128, 6, 8, 3, 3, 5, false, 512>(int, int, int, float const*, "
     "int, float*, float const*, kernel_grad_params, unsigned long long, int, float, int, int, int, int)",
     "f32", "f32", "no", "conv wgrad"},
    {"void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, "
     "int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, "
     "int, float const*, float const*, bool, int, int)",
     "f32", "f32", "no", "conv"},
    // A profiler's cut: the template's closing bracket is gone.
    {"void convolveNd_dgrad_float_engine<float, 3…", "f32", "unknown", "unknown", "conv dgrad"},
    {"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::Half>, "
     "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<c10::Half>, at::detail::Array<char*, 1>)",
     "f16", "unknown", "no", "elementwise"},
    {"void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float, float, float, "
     "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
     "f32", "unknown", "no", "other"},
    {"void cudnn::detail::bn_fw_tr_1C11_kernel_NCHW<__half, float, 512, true, 1>(cudnnTensorStruct, __half const*, "
     "cudnnTensorStruct, __half*, float const*, float const*, float, float, float*, float*, float*, float*, float, "
     "float)",
     "unknown", "unknown", "no", "other"},
    // A layout kernel naming two element types: which is "the" input is not said.
    {"void cudnn::ops::nchwToNhwcKernel<__half, __half, float, false, true, (cudnnKernelDataType_t)0>(cudnn::ops::"
     "nchw2nhwc_params_t<float>, __half const*, __half*)",
     "unknown", "unknown", "no", "layout"},
    // A kernel built on HMMA traits says so in its template arguments.
    {"void xmma_cudnn::gemm::kernel<xmma_cudnn::implicit_gemm::fprop_indexed::Kernel_traits<xmma_cudnn::Ampere_"
     "hmma_fp32_traits, xmma_cudnn::Cta_tile<xmma_cudnn::Ampere, 128, 128, 64, 2, 2, 1, 1>, 4> >(xmma_cudnn::"
     "implicit_gemm::fprop_indexed::Params)",
     "unknown", "unknown", "yes", "unknown"},
    // PyTorch's and CUB's kernels.
    {"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
     "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
     "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
     "unsigned int, float, 4>)",
     "f32", "unknown", "no", "reduction"},
    {"void (anonymous namespace)::softmax_warp_forward<c10::Half, c10::Half, float, 10, false, false>(c10::Half*, "
     "c10::Half const*, int, int, int, bool const*, int, bool)",
     "unknown", "unknown", "no", "other"},
    {"void cub::CUB_200200_800_NS::DeviceRadixSortOnesweepKernel<cub::CUB_200200_800_NS::DeviceRadixSortPolicy<"
     "long, long, unsigned int>::Policy800, false, long, long, unsigned int, int, int>(int*, int*, long const*, "
     "long*, long const*, long*, int, int, int)",
     "unknown", "unknown", "no", "other"},
    {"void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasSplitKParams<"
     "float>, float const*, float const*, float*, float const*, float const*, float const*, float const*, float*, "
     "void*, long, float*, int*)",
     "f32", "unknown", "no", "reduction"},
    // Mangled, as CUPTI hands names over.
    {"_Z10map_kernelPfi", "unknown", "unknown", "no", "elementwise"},
    {"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13BUnaryFunctorIN3c104HalfES4_S4_ZZZNS0_15add_kernel_"
     "cudaERNS_18TensorIteratorBaseERKNS3_6ScalarEENKUlvE_clEvENKUlvE3_clEvEUlS4_S4_E_EENS_6detail5ArrayIPcLi2EEEEEv"
     "iT0_T1_",
     "f16", "unknown", "no", "elementwise"},
};
TEST(KernelClass, DemangledTemplates) { expect_rows(kDemangledTemplates); }

// ---------------------------------------------------------------------------------
// Real profiles

// Names from the real profiles of ../shared/data/traces (its README gives each file's
// origin), read by the grammars added for them. Where Nsight Compute measured the kernel
// (the RTX 5090 run), its tensor-pipe counters are the reference; else the library's own
// documented naming (cited in inspector/kernel_families.cpp).
const Expected kBlackwellTrtllmGenGemms[] = {
    // B200 vLLM trace: the MoE experts in MXFP4 times MXFP8 activations, FP32 accumulation;
    // output MXFP8 (the next layer's input) or BF16. FlashInfer documents
    // bmm_Bfloat16_E4m3E4m3_Fp32 as "FP8 in, BF16 out".
    {"bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_"
     "rM_TN_transOut_schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f",
     "fp8", "f32", "yes", "gemm"},
    {"bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_"
     "rM_TN_transOut_schedP2x1x2x3_biasM_bN_tmaOpt_clmp_dynBatch_sm100f",
     "fp8", "f32", "yes", "gemm"},
    {"bmm_Bfloat16_E4m3E4m3_Fp32_t128x8x128u2_s8_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_"
     "transOut_noShflA_dsFp8_schedS_bN_clmp_dynBatch_sm100a",
     "fp8", "f32", "yes", "gemm"},
    // Both operands FP4: the input is fp4.
    {"bmm_Bfloat16_E2m1E2m1_Fp32_t128x8x512_sm100a", "fp4", "f32", "yes", "gemm"},
};
TEST(KernelClass, BlackwellTrtllmGenGemms) {
  expect_rows(kBlackwellTrtllmGenGemms);
  // "bmm" followed by no type is no trtllm-gen name.
  EXPECT_EQ(classify_kernel_name("bmm_kernel_naive").kind, KernelKind::unknown);
}

const Expected kFusedAttention[] = {
    // B200: TensorRT-LLM's FMHA with FP8 Q, K, V (the FP8 KV cache) and a BF16 output.
    {"fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", "fp8", "unknown", "yes",
     "attention"},
    // RTX 5090 (Nsight Compute: sm__ops_path_tensor_src_bf16_dst_fp32 = 10,192,158,720).
    {"fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<"
     "cutlass::bfloat16_t, cutlass::arch::Sm80, (bool)1, (int)64, (int)64, (int)64, (bool)1, "
     "(bool)1>::Params)",
     "bf16", "unknown", "yes", "attention"},
    // H100 bert: FlashAttention 2 (and on the 5090, its split-KV kernel: 335,544,320 tensor ops).
    {"void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
     "false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> "
     ">, false, false, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
     "bf16", "f32", "yes", "attention"},
    // Its combine step adds partial results: no MMA.
    {"void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, "
     "(int)128, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, "
     "(int)64, (int)128, (int)4, cutlass::bfloat16_t>>, (int)4, (int)3, (bool)1>(flash::"
     "Flash_fwd_params)",
     "unknown", "unknown", "no", "reduction"},
};
TEST(KernelClass, FusedAttention) {
  expect_rows(kFusedAttention);
  EXPECT_TRUE(multiplies_matrices(KernelKind::attention));
}

TEST(KernelClass, CublasGemvsAndTheKEqualsOneProduct) {
  // RTX 5090: nsys's full name and Nsight Compute's short one of the same kernel, whose
  // counters say 0 tensor ops.
  expect_class(classify_kernel_name(
                   "std::enable_if<!T7, void>::type internal::gemvx::kernel<int, int, __nv_bfloat16, __nv_bfloat16, "
                   "__nv_bfloat16, float, (bool)0, (bool)1, (bool)1, (bool)0, (int)7, (bool)0, cublasGemvParamsEx<int, "
                   "cublasGemvTensorStridedBatched<const __nv_bfloat16>, cublasGemvTensorStridedBatched<const "
                   "__nv_bfloat16>, cublasGemvTensorStridedBatched<__nv_bfloat16>, float>>(T13)"),
               {"", "bf16", "f32", "no", "gemv"});
  expect_class(classify_kernel_name("enable_if<!T7, void>::type kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, "
                                    "float, 0, 1, 1, 0, 7, 0, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<const "
                                    "__nv_bfloat16>, cublasGemvTensorStridedBatched<const __nv_bfloat16>, "
                                    "cublasGemvTensorStridedBatched<__nv_bfloat16>, float>>(T13)"),
               {"", "bf16", "f32", "no", "gemv"});
  // V100 fp16 inference: cuBLAS's K = 1 GEMM over f16 tensors, computed in float.
  expect_class(classify_kernel_name("void gemmk1_kernel<float, 256, 5, false, false, false, false, "
                                    "cublasGemvTensorStridedBatched<__half const>, cublasGemvTensorStridedBatched<__half "
                                    "const>, cublasGemvTensorStridedBatched<__half>, float, true, true>(cublasGemmk1Params<"
                                    "float, cublasGemvTensorStridedBatched<__half const>, cublasGemvTensorStridedBatched<"
                                    "__half const>, cublasGemvTensorStridedBatched<__half>, float>)"),
               {"", "f16", "f32", "no", "gemv"});
}

TEST(KernelClass, CudnnPrefixedNamesTritonAndConvHelpers) {
  // A100 AlexNet, fp32: cuDNN 8 prefixes its own kernels with "cudnn_".
  expect_class(classify_kernel_name("cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1"), {"", "f32", "f32", "no", "conv"});
  // B200: torch.compile's pointwise kernel.
  expect_class(classify_kernel_name("triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0"),
               {"", "unknown", "unknown", "no", "elementwise"});
  EXPECT_EQ(classify_kernel_name("triton_tem_fused_mm_0").kind, KernelKind::gemm);
  EXPECT_EQ(classify_kernel_name("triton_tem_fused_mm_0").tensor_cores, TensorCores::unknown);
  // V100 ResNet-50: the offsets a cuDNN wgrad needs, not the wgrad.
  expect_class(classify_kernel_name("cask_cudnn::computeWgradSplitKOffsetsKernel(cask_cudnn::ComputeWgradSplitKOffsetsParams)"),
               {"", "unknown", "unknown", "no", "other"});
}

// ---------------------------------------------------------------------------------
// Issue 42: the families of inspector/kernel_families.cpp, each with the vendor's rule it
// rests on. Rows marked "built from the grammar" are not copied from a profile.

// TF32 read as TF32: f32 operands on a CUTLASS tensor-op class are rounded to TF32 before the
// MMA ("CUTLASS will internally convert fp32 into tf32", NVIDIA/cutlass issue 466); cuBLAS's
// copies of these kernels are what PyTorch runs for an f32 GEMM when TF32 is allowed.
const Expected kTf32OnTensorCores[] = {
    {"cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4", "tf32", "f32", "yes", "gemm"},
    {"cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4", "tf32", "f32", "yes", "gemm"},
    // An nsys table of a long prefill: the wrapper CUTLASS launches its kernels through.
    {"void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_256x128_16x3_nn_align4>(cutlass_80_tensorop_"
     "s1688gemm_256x128_16x3_nn_align4::Params)",
     "tf32", "f32", "yes", "gemm"},
    // Built from the grammar: a name that asks for the 3xTF32 emulation is f32 on tensor cores.
    {"cutlass_tensorop_s1688gemm_3xtf32_128x128_16x3_nn_align4", "f32", "f32", "yes", "gemm"},
    // NVIDIA/cutlass issue 999 and 610: one TF32 product of f32 operands, and TF32 operands.
    {"cutlass_tensorop_s1688tf32gemm_256x128_16x3_nn_align4", "tf32", "f32", "yes", "gemm"},
    {"cutlass_tensorop_tf32_s1688gemm_tf32_256x128_16x3_nn_align4", "tf32", "f32", "yes", "gemm"},
    {"cutlass_tensorop_s1688tf32gemm_128x128_16x3_nt_align1", "tf32", "f32", "yes", "gemm"},
    // The same f32 GEMMs with TF32 off: CUDA cores (the H100 Qwen trace, the A100 AlexNet trace).
    {"void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_8x5_nn_align1::"
     "Params)",
     "f32", "f32", "no", "gemm"},
    {"ampere_sgemm_32x32_sliced1x4_tn", "f32", "f32", "no", "gemm"},
    // f64 on tensor cores is DMMA, no rounding.
    {"cutlass_tensorop_d884gemm_128x128_16x3_nn_align1", "f64", "f64", "yes", "gemm"},
    // cuBLAS's own names say their operand type after the core (Nsight Compute reports of
    // cublasGemmEx in f16 and bf16 with an f32 result).
    {"ampere_s1688gemm_fp16_128x128_ldg8_stages_32x1_nn", "f16", "f32", "yes", "gemm"},
    {"ampere_s16816gemm_bf16_64x64_sliced1x2_ldg8_stages_64x6_nn", "bf16", "f32", "yes", "gemm"},
    // Built from the grammar: no operand type after an 's' core with an MMA shape is f32 data
    // on tensor cores, TF32 on sm80; on sm75 no MMA takes f32, so not read.
    {"ampere_s1688gemm_128x128_ldg8_stages_32x1_nn", "tf32", "f32", "yes", "gemm"},
    {"turing_s1688gemm_128x128_ldg8_nn", "unknown", "f32", "yes", "gemm"},
};
TEST(KernelClass, Tf32OnTensorCoresReadsAsTf32) {
  expect_rows(kTf32OnTensorCores);
  // The why says what the name cannot tell, so that a user who asked for 3xTF32 knows.
  const KernelClass c = classify_kernel_name("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4");
  EXPECT_NE(c.why.find("3xTF32"), std::string::npos) << c.why;
  EXPECT_NE(c.why.find("issue 466"), std::string::npos) << c.why;
}

// cuDNN's and cuBLAS's legacy f32 engines: FMA kernels whose template arguments name their
// element types (the V100 ResNet-50 trace, where f32 can only run on CUDA cores; public
// TensorFlow and PyTorch fp32 profiles; NVIDIA/cutlass issue 282: PyTorch's fp32 GEMM ran
// gemmSN_NN_kernel).
const Expected kLegacyCudaCoreEngines[] = {
    {"void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int, float "
     "const*, int, float*, kernel_grad_params, unsigned long long, int, unsigned long long, int, float, int, int, int)",
     "f32", "f32", "no", "conv dgrad"},
    {"void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*, int, "
     "float*, float const*, kernel_grad_params, unsigned long long, int, float, int, int, int, int)",
     "f32", "f32", "no", "conv wgrad"},
    {"void cudnn::cnn::wgrad_alg1_engine<float, float, 128, 5, 5, 3, 3, 3, false, false>(int, int, int, float const*, "
     "int, float*, float const*, kernel_grad_params, unsigned long long, int, float, int, int, int, int)",
     "f32", "f32", "no", "conv wgrad"},
    {"void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int, int, float "
     "const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float const*, "
     "float const*, bool, int, int)",
     "f32", "f32", "no", "conv"},
    {"void explicit_convolve_sgemm<float, int, 1024, 5, 5, 3, 3, 3, 0, false>(int, int, int, float const*, int, float "
     "const*, int, float*, kernel_conv_params, unsigned long long, int, unsigned long long, int, float, float, int, "
     "float const*, float const*)",
     "f32", "f32", "no", "conv"},
    {"void cudnn::cnn::im2col4d_kernel<float, long>(cudnn::cnn::im2col4d_params, cudnnConvolutionStruct, "
     "cudnnTensor4dStruct, float const*, float*)",
     "f32", "unknown", "no", "layout"},
    {"void gemmSN_TN_kernel<float, 256, 4, 2, 8, 3, 4, false, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<"
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float>, float>)",
     "f32", "f32", "no", "gemm"},
    {"void gemmSN_NN_kernel<float, 256, 4, 2, 8, 4, 4, false, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >(cublasGemmSmallNParams<"
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float>, float>)",
     "f32", "f32", "no", "gemm"},
    // NVIDIA/cutlass issue 282: the short name alone says the family, not the type.
    {"gemmSN_NN_kernel", "unknown", "unknown", "no", "gemm"},
    // 's' is the single-precision letter of cuBLAS's gemmType_t (a TensorFlow fp32 profile).
    {"void sgemm_largek_lds64<false, false, 5, 5, 4, 4, 4, 32>(float*, float const*, float const*, int, int, int, "
     "int, int, int, float const*, float const*, float, float, int, int, int*, int*)",
     "f32", "f32", "no", "gemm"},
    // gemmk1 keeps its GEMV kind; over float it is f32 on CUDA cores (RTX 5090 nsys).
    {"void gemmk1_kernel<int, float, (int)256, (int)5, (bool)1, (bool)0, (bool)0, (bool)0, "
     "cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<const float>, "
     "cublasGemvTensorStridedBatched<float>, float, (int)0>(cublasGemmk1Params<T2, T9, T10, T11, T12, "
     "biasType<T11::value_type, T12>::type>)",
     "f32", "f32", "no", "gemv"},
    {"void gemmk1_kernel<float, 256, 5, false, false, false, false, cublasGemvTensorStridedBatched<float const>, "
     "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float, true, true>("
     "cublasGemmk1Params<float, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float "
     "const>, cublasGemvTensorStridedBatched<float>, float>)",
     "f32", "f32", "no", "gemv"},
    // Built from the grammar: the f16 variants read by their types, on CUDA cores all the same.
    {"void cudnn::detail::dgrad_engine<__half, 512, 6, 5, 3, 3, 3, false>(int, int, int, __half const*, int, "
     "__half const*, int, __half*, kernel_grad_params, unsigned long long, int, unsigned long long, int, float, int, "
     "int, int)",
     "f16", "unknown", "no", "conv dgrad"},
    {"void cudnn::cnn::wgrad_alg0_engine<__half, float, 128, 6, 7, 3, 3, 5, false, 512>(int)", "f16", "f32", "no",
     "conv wgrad"},
};
TEST(KernelClass, LegacyFp32EnginesRunOnCudaCores) { expect_rows(kLegacyCudaCoreEngines); }

// One convolution counted one way: the transforms of cuDNN's Winograd and FFT algorithms are
// the convolution's work, so they count where its GEMM does (conv kinds, multiplies_matrices),
// forward and weight-gradient alike (the V100 ResNet-50 and A100 AlexNet traces).
const Expected kConvolutionTransforms[] = {
    {"void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::"
     "WinogradDataParams<float, float>)",
     "f32", "unknown", "no", "conv fprop"},
    {"void cudnn::winograd_nonfused::winogradForwardFilter4x4<float, float>(cudnn::winograd_nonfused::"
     "WinogradFilterParams<float, float>)",
     "f32", "unknown", "no", "conv fprop"},
    {"void cudnn::winograd_nonfused::winogradForwardOutput4x4<float, float>(cudnn::winograd_nonfused::"
     "WinogradOutputParams<float, float>)",
     "f32", "unknown", "no", "conv fprop"},
    {"void cudnn::winograd_nonfused::winogradWgradData4x4<float, float>(cudnn::winograd_nonfused::"
     "WinogradDataParams<float, float>)",
     "f32", "unknown", "no", "conv wgrad"},
    {"void cudnn::winograd_nonfused::winogradWgradDelta4x4<float, float>(cudnn::winograd_nonfused::"
     "WinogradDeltaParams<float, float>)",
     "f32", "unknown", "no", "conv wgrad"},
    {"void cudnn::winograd_nonfused::winogradWgradOutput4x4<float, float>(cudnn::winograd_nonfused::"
     "WinogradWgradOutputParams<float, float>)",
     "f32", "unknown", "no", "conv wgrad"},
    // Launched beside the fused volta_scudnn_winograd_... forward, which names no pass either.
    {"void cudnn::winograd::generateWinogradTilesKernel<0, float, float>(cudnn::winograd::"
     "GenerateWinogradTilesParams<float, float>)",
     "f32", "unknown", "no", "conv"},
    {"volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "f32", "f32", "no", "conv"},
    {"void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int, int, int, int, int, int, "
     "int, cudnn::reduced_divisor, bool, int2, int, int)",
     "f32", "unknown", "no", "conv"},
    {"void fft2d_c2r_32x32<float, false, false, 0u, false, false>(float*, float2 const*, int, int, int, int, int, "
     "int, int, int, int, float, float, cudnn::reduced_divisor, bool, float*, float*, int2, int, int)",
     "f32", "unknown", "no", "conv"},
    // Built from the grammar: an f16 transform beside float reads f16.
    {"void cudnn::winograd_nonfused::winogradForwardData4x4<__half, float>(cudnn::winograd_nonfused::"
     "WinogradDataParams<__half, float>)",
     "f16", "unknown", "no", "conv fprop"},
};
TEST(KernelClass, AConvolutionsTransformsCountAsTheConvolution) {
  expect_rows(kConvolutionTransforms);
  for (const Expected& e : kConvolutionTransforms) {
    SCOPED_TRACE(e.name);
    EXPECT_TRUE(multiplies_matrices(classify_kernel_name(e.name).kind));
  }
  // The helpers that compute a convolution's offsets and change its layout stay apart.
  EXPECT_EQ(classify_kernel_name("cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)").kind,
            KernelKind::other);
  EXPECT_EQ(classify_kernel_name("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
                                 "(cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)")
                .kind,
            KernelKind::layout);
}

// TensorRT's builds of cuBLAS's and cuDNN's kernels ("trt_" + their name) and its xmma
// convolutions (NVIDIA/TensorRT issues 875 and 1288; public nsys tables of TensorRT-LLM).
const Expected kTensorRtNames[] = {
    {"trt_ampere_h16816gemm_128x64_ldg8_nn_v1", "f16", "f16", "yes", "gemm"},
    {"trt_ampere_h16816gemm_256x128_ldg8_stages_32x3_tn", "f16", "f16", "yes", "gemm"},
    // Built from the grammar.
    {"trt_turing_h1688gemm_256x128_ldg8_tn", "f16", "f16", "yes", "gemm"},
    {"trt_volta_scudnn_128x64_relu_interior_nn_v1", "f32", "f32", "no", "conv"},
    {"trt_turing_h1688cudnn_256x128_ldg8_relu_exp_medium_nhwc_tn_v1", "f16", "f16", "yes", "conv"},
    // Built from the grammar: fp16x2 is f16 in pairs (half2), an 'h' core with no MMA shape.
    {"trt_ampere_fp16x2_hcudnn_fp16x2_128x128_ldg8_relu_exp_small_nhwc_tn_v1", "f16", "f16", "no", "conv"},
    // TensorRT issue 875's tactic log: Volta's HMMA.884 and Turing's HMMA.1688 warp shapes.
    {"trt_volta_xmma_implicit_gemm_f16f16f16_nhwc_nhwc_fprop_idx_64x32x64x1_8x8x4_1stages", "f16", "unknown", "yes",
     "conv fprop"},
    {"trt_turing_xmma_implicit_gemm_f16f16f16_nhwc_nhwc_fprop_64x32x64x1_16x8x8_1stages", "f16", "unknown", "yes",
     "conv fprop"},
    {"turing_h1688cudnn_256x64_sliced1x2_ldg8_relu_exp_medium_nhwc_tn_v1", "f16", "f16", "yes", "conv"},
    {"volta_h884cudnn_256x128_ldg8_relu_exp_small_nhwc_tn_v1", "f16", "f16", "yes", "conv"},
};
TEST(KernelClass, TensorRtNames) { expect_rows(kTensorRtNames); }

// A user's kernel says its operands' type in its parameter list, where every floating-point
// pointer agrees; never its instruction or accumulator, and its kind only by its identifier.
const Expected kUserKernels[] = {
    {"matmul_k(float*, float*, float*, int, int, int)", "f32", "unknown", "unknown", "gemm"},
    // The same, mangled as CUPTI hands it.
    {"_Z8matmul_kPfS_S_iii", "f32", "unknown", "unknown", "gemm"},
    {"void fused_op(__half const*, __half const*, __half*, int)", "f16", "unknown", "unknown", "unknown"},
    {"my_kernel(c10::BFloat16*, c10::BFloat16 const*, long)", "bf16", "unknown", "unknown", "unknown"},
    {"step(double*, double const*, int)", "f64", "unknown", "unknown", "unknown"},
    // Pointers that disagree say nothing.
    {"mixed_kernel(float*, __half const*, int)", "unknown", "unknown", "unknown", "unknown"},
    // An elementwise kernel's pointers are no multiply's operands.
    {"scale_kernel(float*, float, int)", "unknown", "unknown", "no", "elementwise"},
    // A pointer to something else is no element type.
    {"gather_rows(long const*, float2*, int)", "unknown", "unknown", "no", "layout"},
};
TEST(KernelClass, UserKernelsByTheirParameterList) { expect_rows(kUserKernels); }

// CUTLASS 3 names (gemm_operation.py's extended_name_3x) and Blackwell's block-scaled GEMMs:
// the element precision is read, the scale type said in why.
const Expected kCutlass3AndBlockScaled[] = {
    // Built from the generator: CUTLASS 3.6 and later write the core without letter or shape.
    {"cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_128x128x64_1x1x1_0_tnn_align8_warpspecialized_cooperative_"
     "epi_tma",
     "f16", "f32", "yes", "gemm"},
    // NVIDIA/cutlass issue 2923.
    {"cutlass3x_sm100_tensorop_gemm_e4m3_e4m3_f32_bf16_bf16_256x224x128_0x0x1_0_tnt_align16_2sm", "fp8", "f32",
     "yes", "gemm"},
    // NVIDIA/cutlass issue 2186: MXFP8 (ue8m0 scales) on an RTX 5090.
    {"cutlass3x_sm120_bstensorop_s16x8x32gemm_ue8m0xe4m3_ue8m0xe4m3_f32_void_e5m2_128x128x128_1x1x1_0_tnt_align128_"
     "pingpong_q",
     "fp8", "f32", "yes", "gemm"},
    // Built from the generator: NVFP4 (ue4m3 scales, vector size 16), MXFP4 on sm103.
    {"cutlass3x_sm100_bstensorop_gemm_ue4m3xe2m1_ue4m3xe2m1_f32_void_bf16_128x128x256_1x1x1_0_tnt_align32_o_vs16_1sm",
     "fp4", "f32", "yes", "gemm"},
    {"cutlass3x_sm103_bstensorop_gemm_ue8m0xe2m1_ue8m0xe2m1_f32_void_bf16_128x256x768_1x1x1_0_tnt_align32_o_vs32_"
     "ultra_1sm",
     "fp4", "f32", "yes", "gemm"},
    // Built from the generator: MXFP8 activations times MXFP4 weights in one f8f6f4 MMA: the wider.
    {"cutlass3x_sm100_bstensorop_gemm_ue8m0xe4m3_ue8m0xe2m1_f32_void_bf16_256x128x128_2x1x1_0_tnt_align32_q_2sm",
     "fp8", "f32", "yes", "gemm"},
    // Six-bit operands have no precision value: unknown, not fp8 or fp4.
    {"cutlass3x_sm100_bstensorop_gemm_ue8m0xe3m2_ue8m0xe3m2_f32_void_bf16_256x128x128_2x1x1_0_tnt_align32_q_2sm",
     "unknown", "f32", "yes", "gemm"},
    // Built from the generator: blockwise FP8 (one f32 scale per 1x128 block of A).
    {"cutlass3x_sm90_tensorop_gemm_1x128f32xe4m3_128x128f32xe4m3_f32_bf16_bf16_128x128x128_1x2x1_0_tnt_align16_"
     "warpspecialized_cooperative_epi_tma",
     "fp8", "f32", "yes", "gemm"},
    // A public profile's table, cut: CUTLASS 3's CUDA-core SGEMM on a B200.
    {"cutlass3x_sm100_simt_sgemm_f32_f32_f32_f32_f32_32x32x16_1x1x1_\xE2\x80\xA6", "f32", "f32", "no", "gemm"},
    // Built from CUTLASS 3's templates, as a C++ kernel (not the library's procedural name):
    // the sm100 mainloop's tcgen05 UMMA and the sm90 one's GMMA name the tensor cores.
    {"void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
     "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm100TmaUmmaWarpSpecialized<4, 2, 2, "
     "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> > >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<64> >, "
     "cutlass::bfloat16_t, cute::tuple<long, cute::C<1>, long>, cutlass::bfloat16_t, cute::tuple<long, cute::C<1>, "
     "long>, cute::TiledMMA<cute::MMA_Atom<cute::SM100_MMA_F16BF16_SS<cutlass::bfloat16_t, cutlass::bfloat16_t, "
     "float, 128, 128, (cute::UMMA::Major)0, (cute::UMMA::Major)0> > > >, "
     "cutlass::epilogue::collective::CollectiveEpilogue<float> > >(int)",
     "bf16", "f32", "yes", "gemm"},
    {"void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
     "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<4, "
     "cute::tuple<cute::C<2>, cute::C<1>, cute::C<1> >, cutlass::gemm::KernelTmaWarpSpecializedCooperative>, "
     "cute::tuple<cute::C<128>, cute::C<128>, cute::C<64> >, cutlass::half_t, cute::tuple<long, cute::C<1>, long>, "
     "cutlass::half_t, cute::tuple<long, cute::C<1>, long> > > >(int)",
     "f16", "unknown", "yes", "gemm"},
};
TEST(KernelClass, Cutlass3AndBlockScaledGemms) {
  expect_rows(kCutlass3AndBlockScaled);
  const std::pair<const char*, const char*> scales[] = {
      {"cutlass3x_sm120_bstensorop_s16x8x32gemm_ue8m0xe4m3_ue8m0xe4m3_f32_void_e5m2_128x128x128_1x1x1_0_tnt_align128_"
       "pingpong_q",
       "ue8m0 (MXFP8)"},
      {"cutlass3x_sm100_bstensorop_gemm_ue4m3xe2m1_ue4m3xe2m1_f32_void_bf16_128x128x256_1x1x1_0_tnt_align32_o_vs16_1sm",
       "ue4m3 (NVFP4)"},
      {"cutlass3x_sm103_bstensorop_gemm_ue8m0xe2m1_ue8m0xe2m1_f32_void_bf16_128x256x768_1x1x1_0_tnt_align32_o_vs32_"
       "ultra_1sm",
       "ue8m0 (MXFP4)"},
      {"cutlass3x_sm90_tensorop_gemm_1x128f32xe4m3_128x128f32xe4m3_f32_bf16_bf16_128x128x128_1x2x1_0_tnt_align16_"
       "warpspecialized_cooperative_epi_tma",
       "f32 per 1x128 block"},
  };
  for (const auto& [name, scale] : scales) {
    const KernelClass c = classify_kernel_name(name);
    EXPECT_NE(c.why.find(scale), std::string::npos) << name << "\n  why: " << c.why;
  }
}

// cuBLASLt's nvjet kernels: three letters (operand, accumulator, output) or five (A, B, C,
// accumulator, D); q is fp8 (torch._scaled_mm on float8_e4m3fn), block scales after the tile.
const Expected kNvjetVariants[] = {
    // The B200 vLLM trace.
    {"nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "bf16", "f32", "yes", "gemm"},
    // Built from the grammar: the sm100 spelling.
    {"nvjet_sm100_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "bf16", "f32", "yes", "gemm"},
    // Public profiles of FP8 training and inference (H100, B200).
    {"nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_ovscale_TNT", "fp8", "f32", "yes", "gemm"},
    {"nvjet_qqtst_112x128_128x7_2x1_v_bz_coopA_algo2_TNN", "fp8", "f32", "yes", "gemm"},
    {"nvjet_qqtst_128x256_128x6_2x2_2cta_h_bz_Avec32UE8M0_Bvec32UE8M0_TNT", "fp8", "f32", "yes", "gemm"},
    // Built from the grammar: FP8 with an f16 result (public profiles list nvjet_qqhsh_*).
    {"nvjet_qqhsh_128x256_128x6_2x1_2cta_v_bz_TNT", "fp8", "f32", "yes", "gemm"},
};
TEST(KernelClass, NvjetVariants) {
  expect_rows(kNvjetVariants);
  const KernelClass mx = classify_kernel_name("nvjet_qqtst_128x256_128x6_2x2_2cta_h_bz_Avec32UE8M0_Bvec32UE8M0_TNT");
  EXPECT_NE(mx.why.find("one ue8m0 scale per 32 elements"), std::string::npos) << mx.why;
}

// Attention kernels users meet in 2026: cuDNN's fused SDPA (its "f16" means 16-bit: a bf16
// autocast run launched ..._wgmma_f16 too), FlashAttention 3 (hopper/).
const Expected kAttention2026[] = {
    // Public profiles: fp16 q, k, v on an sm80 GPU; a bf16 run on an H100 and its backward.
    {"cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "unknown",
     "unknown", "yes", "attention"},
    {"cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0", "unknown",
     "unknown", "yes", "attention"},
    {"cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x1x1_kernel0_0", "unknown",
     "unknown", "yes", "attention"},
    {"cudnn_generated_fort_native_sdpa_sm100_flash_fprop_f16", "unknown", "unknown", "yes", "attention"},
    {"cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x64_4x1x1_kernel0_0", "unknown", "unknown", "yes",
     "attention"},
    // A public profile's FlashAttention 3 forward in bf16.
    {"void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<"
     "2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<176>, cute::C<128> >, "
     "128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, false, false, false, false, false, false, false, false, "
     "true, true, false, false, false, cutlass::bfloat16_t>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, "
     "cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, "
     "cutlass::arch::Sm90, 256, false, false, false, false>, flash::StaticPersistentTileScheduler<false> > > >("
     "flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2>>::Params)",
     "bf16", "f32", "yes", "attention"},
    // Built from the grammar: its FP8 forward (Element e4m3, a bf16 output).
    {"void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<"
     "2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, "
     "128, cutlass::float_e4m3_t, float, cutlass::arch::Sm90, true, false>, flash::CollectiveEpilogueFwd<cute::tuple<"
     "cute::C<128>, cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
     "cutlass::bfloat16_t, cutlass::arch::Sm90, 256, false, false>, flash::StaticPersistentTileScheduler<false> > > >"
     "(int)",
     "fp8", "f32", "yes", "attention"},
    // A classifier's test string of another project: no element type, so unknown.
    {"cutlass::device_kernel<flash::FlashAttnFwdSm90<CollectiveMainloopFwdSm90, CollectiveEpilogueFwd>>", "unknown",
     "unknown", "unknown", "attention"},
    // Built from the grammar: its split-KV combine adds partial results.
    {"void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, cute::C<128> >, 7, 256, 1, "
     "false, true, cutlass::bfloat16_t, float, cutlass::arch::Sm90> >(int)",
     "unknown", "unknown", "no", "reduction"},
};
TEST(KernelClass, AttentionKernels) { expect_rows(kAttention2026); }

// torch.compile's Inductor kernels: the kind from the name, never the precision (the
// launching op's recorded input types say it).
const Expected kInductorKernels[] = {
    {"triton_tem_fused_mm_0", "unknown", "unknown", "unknown", "gemm"},
    {"triton_tem_fused_addmm_1", "unknown", "unknown", "unknown", "gemm"},
    {"triton_tem_fused_bmm_2", "unknown", "unknown", "unknown", "gemm"},
    {"triton_tem_fused_convolution_3", "unknown", "unknown", "unknown", "conv"},
    {"triton_per_fused__softmax_0", "unknown", "unknown", "no", "reduction"},
    {"triton_red_fused_sum_1", "unknown", "unknown", "no", "reduction"},
    {"triton_poi_fused_add_2", "unknown", "unknown", "no", "elementwise"},
    // FlexAttention's template.
    {"triton_tem_fused_flex_attention_0", "unknown", "unknown", "unknown", "attention"},
};
TEST(KernelClass, InductorKernels) {
  expect_rows(kInductorKernels);
  const KernelClass c = classify_kernel_name("triton_tem_fused_mm_0");
  EXPECT_NE(c.why.find("no element type"), std::string::npos) << c.why;
}

// ---------------------------------------------------------------------------------
// What must stay unknown

const Expected kNamesThatSayNothingAreUnknown[] = {
    {"", "unknown", "unknown", "unknown", "unknown"},
    {"   ", "unknown", "unknown", "unknown", "unknown"},
    {"garbage", "unknown", "unknown", "unknown", "unknown"},
    {"!!@@##", "unknown", "unknown", "unknown", "unknown"},
    // Digits that look like MMA shapes are no core without the grammar around them.
    {"my_kernel_16816", "unknown", "unknown", "unknown", "unknown"},
    {"foo16_bar16816_baz", "unknown", "unknown", "unknown", "unknown"},
    {"layer16816gemmish", "unknown", "unknown", "unknown", "unknown"},
    {"kernel_fp16_1688", "unknown", "unknown", "unknown", "unknown"},
    // An nvjet name whose type word is not three known letters.
    {"nvjet_sm90_qqh_128x256_64x4_2x1_v_bz_coopA_NTN", "unknown", "unknown", "unknown", "gemm"},
    // Not a kernel at all.
    {"Memcpy HtoD (Pageable -> Device)", "unknown", "unknown", "unknown", "unknown"},
    // An arch word with no core after it.
    {"ampere_16x16_kernel", "unknown", "unknown", "unknown", "unknown"},
    // A half-written core (cut by a profiler) is no core; the class before it still
    // says tensor cores.
    {"cutlass_tensorop_s168…", "unknown", "unknown", "yes", "unknown"},
    // A GEMM that names nothing else.
    {"gemm_kernel", "unknown", "unknown", "unknown", "gemm"},
    // Two element types in no library's template convention: the input is ambiguous.
    {"void my_gemm_kernel<__half, float>(int)", "unknown", "unknown", "unknown", "gemm"},
    // cuBLAS 12.8's nvjet kernels without the arch word, as public traces of bf16 and f16
    // training show them; the letters as this project's H100 run captured them.
    {"nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN", "f16", "f32", "yes", "gemm"},
    {"nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "bf16", "f32", "yes", "gemm"},
    // f32 operands: FFMA, TF32 or its emulation: not in the name.
    {"nvjet_sm90_sss_64x64_64x8_1x1_h_bz_NNT", "f32", "f32", "unknown", "gemm"},
    // An xmma GEMM without its type tuple.
    {"sm80_xmma_gemm_nt_n_tilesize128x128x32", "unknown", "unknown", "unknown", "gemm"},
    // The operand type was cut off after the core: not the accumulator's by default.
    {"turing_fp16_s1688gemm…", "unknown", "f32", "yes", "gemm"},
    {"volta_fp16_s884gemm", "unknown", "f32", "yes", "gemm"},
};
TEST(KernelClass, NamesThatSayNothingAreUnknown) { expect_rows(kNamesThatSayNothingAreUnknown); }

// ---------------------------------------------------------------------------------
// The project's own kernels

struct OwnKernel {
  std::string file, ns, name;
};

// Every __global__ function of kernels/cuda/*.cu with the namespace it is declared in.
std::vector<OwnKernel> own_kernels() {
  std::vector<OwnKernel> out;
  const std::regex ns_re(R"(namespace\s+(ampcheck::kernels::cuda(::\w+)?)\s*\{)");
  const std::regex global_re(R"(__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\()");
  for (const auto& entry : fs::directory_iterator(kSource / "kernels" / "cuda")) {
    if (entry.path().extension() != ".cu") continue;
    const std::string text = read_text(entry.path());
    std::smatch ns;
    const std::string ns_name = std::regex_search(text, ns, ns_re) ? ns[1].str() : "ampcheck::kernels::cuda";
    for (auto it = std::sregex_iterator(text.begin(), text.end(), global_re); it != std::sregex_iterator(); ++it)
      out.push_back({entry.path().filename().string(), ns_name, (*it)[1].str()});
  }
  return out;
}

TEST(KernelClass, TheProjectsKernelsUseNoMmaInstruction) {
  // The premise of "tensor cores: no" for the project's kernels.
  const std::regex mma(R"(\bwmma\b|\bwgmma\b|mma\.sync|mma_sync|__hmma|__imma|nvcuda::)");
  for (const auto& entry : fs::directory_iterator(kSource / "kernels" / "cuda")) {
    const std::string text = read_text(entry.path());
    EXPECT_FALSE(std::regex_search(text, mma))
        << entry.path() << " uses an MMA instruction: inspector/kernel_class.cpp answers 'no tensor cores' for "
        << "every kernel in namespace ampcheck and must learn this one";
  }
}

TEST(KernelClass, EveryOwnKernelHasAKindAndNoTensorCores) {
  const auto kernels = own_kernels();
  ASSERT_GE(kernels.size(), 40u) << "kernels/cuda/*.cu: fewer __global__ functions than expected";
  for (const auto& k : kernels) {
    // As a demangler writes them: namespace, anonymous namespace, a template argument.
    const std::string name = "void " + k.ns + "::(anonymous namespace)::" + k.name + "<float>(long, float*)";
    const KernelClass c = classify_kernel_name(name);
    SCOPED_TRACE(k.file + ": " + name + "\n  why: " + c.why);
    EXPECT_EQ(c.tensor_cores, TensorCores::no);
    EXPECT_NE(c.kind, KernelKind::unknown) << "teach the vocabulary in inspector/kernel_class.cpp this kernel's kind";
    // Its template argument is a compute type; the storage dtype is a runtime argument.
    EXPECT_EQ(c.input, KernelPrecision::unknown);
  }
}

const Expected kOwnKernelsByName[] = {
    {"void ampcheck::kernels::cuda::elementwise::(anonymous namespace)::map_kernel<(ampcheck::kernels::MapFn)3, "
     "float>(ampcheck::kernels::cuda::elementwise::(anonymous namespace)::MapInputs, void*, ampcheck::DType, long, "
     "float, float)",
     "unknown", "unknown", "no", "elementwise"},
    {"void ampcheck::kernels::cuda::reduce::(anonymous namespace)::sum_block_kernel<float>(int)", "unknown",
     "unknown", "no", "reduction"},
    {"void ampcheck::kernels::cuda::(anonymous namespace)::permute_kernel<unsigned short>(unsigned short const*, "
     "unsigned short*, ampcheck::kernels::Broadcast, long)",
     "unknown", "unknown", "no", "layout"},
    // Nothing in the identifier; the namespace says pooling.
    {"void ampcheck::kernels::cuda::pool::(anonymous namespace)::adaptive_forward_kernel<float>(int)", "unknown",
     "unknown", "no", "other"},
    {"void ampcheck::kernels::cuda::(anonymous namespace)::max_scatter_kernel<float>(int)", "unknown", "unknown",
     "no", "layout"},
    // Mangled: ampcheck::kernels::cuda::map_kernel(float*, long).
    {"_ZN8ampcheck7kernels4cuda10map_kernelEPfl", "unknown", "unknown", "no", "elementwise"},
};
TEST(KernelClass, OwnKernelsByName) { expect_rows(kOwnKernelsByName); }

// ---------------------------------------------------------------------------------
// The family table

// The table of families (inspector/kernel_families.cpp) and the tables of this file: every family
// has what its entry promises and at least one test row it reads, so a family added without
// its rows fails here.
TEST(KernelClass, EveryFamilyOfTheTableHasTestRows) {
  std::set<std::string> read;
  auto add = [&](const auto& rows) {
    for (const Expected& e : rows)
      if (const grammar::Family* f = grammar::family_of(e.name)) read.insert(std::string(f->name));
  };
  add(kCublasNames);
  add(kXmmaNames);
  add(kCutlassNames);
  add(kDemangledTemplates);
  add(kBlackwellTrtllmGenGemms);
  add(kFusedAttention);
  add(kNamesThatSayNothingAreUnknown);
  add(kOwnKernelsByName);
  add(kTf32OnTensorCores);
  add(kLegacyCudaCoreEngines);
  add(kConvolutionTransforms);
  add(kTensorRtNames);
  add(kUserKernels);
  add(kCutlass3AndBlockScaled);
  add(kNvjetVariants);
  add(kAttention2026);
  add(kInductorKernels);
  for (const grammar::Family& f : grammar::families()) {
    SCOPED_TRACE(std::string(f.name));
    EXPECT_FALSE(f.pattern.empty());
    EXPECT_FALSE(f.source.empty()) << "cite the source the family's rule rests on";
    EXPECT_TRUE(f.read != nullptr || !f.fixed.why.empty()) << "a reader, or a fixed reading that says what it is";
    EXPECT_EQ(read.count(std::string(f.name)), 1u) << "no test row is read by this family";
  }
}

// ---------------------------------------------------------------------------------
// Kernel notes

TEST(KernelClass, TheNotesTheKernelsWriteUseTheWordsTheClassifierReads) {
  // Drift guard: the fragments classify_kernel_note keys on, where the notes are written.
  const std::pair<const char*, std::vector<std::string>> sources[] = {
      {"kernels/cuda/gemm.cu", {"\"cublasLt: A \"", "\" B \"", "\" C \"", "\", compute \"", "\"64F\" : \"32F\"",
                                "\", tensor cores \"", "\"yes\" : \"no\""}},
      {"kernels/cuda/conv.cu", {"\"cuDNN \"", "\" data, \"", "\" compute\"", "\"tensor-op math\"",
                                "\"FMA math (no TF32)\"", "\"default math\"", "\"fwd\"", "\"bwd data\"",
                                "\"bwd filter\"", "CUB block reduce"}},
      {"kernels/cuda/elementwise.cu", {"\": CUDA map kernel, \""}},
      {"kernels/cuda/reduce.cu", {"\"CUDA kernel, one thread per output\"", "\"CUB block reduce\""}},
      {"kernels/cuda/norm_loss.cu", {"CUB block reduce per row", "CUDA kernel", "\" compute\""}},
      {"kernels/cuda/pool.cu", {"\": CUDA kernel, \"", "\" compute\""}},
  };
  for (const auto& [file, fragments] : sources) {
    const std::string text = read_text(kSource / file);
    ASSERT_FALSE(text.empty()) << file;
    for (const auto& f : fragments) EXPECT_NE(text.find(f), std::string::npos) << file << " no longer writes " << f;
  }
}

TEST(KernelClass, ProjectNotes) {
  const Expected notes[] = {
      {"cublasLt: A f16 B f16 C f16, compute 32F, algo id 21, tile id 5, tensor cores yes", "f16", "f32", "yes",
       "gemm"},
      {"cublasLt: A bf16 B bf16 C f32, compute 32F, algo id 6, tile id 18, tensor cores yes", "bf16", "f32", "yes",
       "gemm"},
      // An f16 GEMM with a dimension not a multiple of 8: the library fell back.
      {"cublasLt: A f16 B f16 C f16, compute 32F, algo id 0, tile id 0, tensor cores no", "f16", "f32", "no", "gemm"},
      // compute 32F is not FAST_TF32: f32 operands stay f32.
      {"cublasLt: A f32 B f32 C f32, compute 32F, algo id 0, tile id 0, tensor cores no", "f32", "f32", "no", "gemm"},
      {"cublasLt: A f64 B f64 C f64, compute 64F, algo id 1, tile id 1, tensor cores yes", "f64", "f64", "yes",
       "gemm"},
      // cublasComputeType_t's fast types round f32 operands.
      {"cublasLt: A f32 B f32 C f32, compute 32F_FAST_TF32, algo id 3, tile id 2, tensor cores yes", "tf32", "f32",
       "yes", "gemm"},
      // Tensor-op math permits tensor cores; the kernel's name says whether they ran.
      {"cuDNN fwd: IMPLICIT_PRECOMP_GEMM, tensor-op math, f16 data, f32 compute, bias added in the epilogue (beta = 1)",
       "f16", "f32", "unknown", "conv fprop"},
      {"cuDNN bwd data: ALGO_1, FMA math (no TF32), f32 data, f32 compute", "f32", "f32", "no", "conv dgrad"},
      {"cuDNN bwd filter: ALGO_0, tensor-op math, bf16 data, f32 compute, nondeterministic", "bf16", "f32", "unknown",
       "conv wgrad"},
      {"cuDNN fwd: FFT, default math, f64 data, f64 compute", "f64", "f64", "unknown", "conv fprop"},
      // Default math on f32 data allows TF32 on sm80 and later: input f32 or tf32.
      {"cuDNN fwd: GEMM, default math, f32 data, f32 compute", "unknown", "f32", "unknown", "conv fprop"},
      {"relu: CUDA map kernel, f32 compute", "unknown", "f32", "no", "elementwise"},
      {"sum: CUB block reduce, f32 compute", "unknown", "f32", "no", "reduction"},
      {"max: CUDA kernel, one thread per output, f64 compute", "unknown", "f64", "no", "reduction"},
      {"softmax: CUB block reduce per line, f32 compute", "unknown", "f32", "no", "reduction"},
      {"conv2d bias gradient: CUB block reduce, f32 compute, 4 chunks per channel", "unknown", "f32", "no",
       "reduction"},
      {"max_pool2d forward (window maximum and its index): CUDA kernel, f32 compute", "unknown", "f32", "no", "other"},
      {"avg_pool2d backward (gather, no atomics): CUDA kernel, f64 compute", "unknown", "f64", "no", "other"},
      {"layer_norm backward: CUB block reduce per row, column sums in fixed row chunks, f32 compute", "unknown", "f32",
       "no", "reduction"},
      {"embedding: CUDA kernel, rows copied", "unknown", "unknown", "no", "layout"},
      {"dropout: CUDA kernel, Philox4x32-10 mask (the CPU's bits), f32 compute", "unknown", "f32", "no",
       "elementwise"},
      {"cross_entropy backward: CUDA kernel, f32 compute", "unknown", "f32", "no", "other"},
      // Not notes of a grammar the classifier knows.
      {"", "unknown", "unknown", "unknown", "unknown"},
      {"hello", "unknown", "unknown", "unknown", "unknown"},
      {"somelib: magic, fast", "unknown", "unknown", "unknown", "unknown"},
  };
  for (const auto& e : notes) expect_class(classify_kernel_note(e.name), e);
}

TEST(KernelClass, JoinedNotesOneClassEach) {
  const auto classes = classify_kernel_notes(
      "cuDNN fwd: IMPLICIT_GEMM, tensor-op math, f16 data, f32 compute; "
      "conv2d bias gradient: CUB block reduce, f32 compute, 2 chunks per channel");
  ASSERT_EQ(classes.size(), 2u);
  EXPECT_EQ(classes[0].kind, KernelKind::conv_fprop);
  EXPECT_EQ(classes[0].input, KernelPrecision::f16);
  EXPECT_EQ(classes[1].kind, KernelKind::reduction);
  EXPECT_EQ(classes[1].tensor_cores, TensorCores::no);
  EXPECT_TRUE(classify_kernel_notes("").empty());
}

TEST(KernelClass, NamesOfTheValues) {
  EXPECT_STREQ(precision_name(KernelPrecision::tf32), "tf32");
  EXPECT_STREQ(tensor_cores_name(TensorCores::unknown), "unknown");
  EXPECT_STREQ(kind_name(KernelKind::conv_wgrad), "conv wgrad");
  EXPECT_TRUE(multiplies_matrices(KernelKind::conv));
  EXPECT_FALSE(multiplies_matrices(KernelKind::layout));
}

// One line of text per kernel: the parameter list and "void " go, an anonymous namespace
// stays, a library's procedural name is left alone, a long name is cut.
TEST(KernelLabel, DropsTheParametersKeepsTheTemplateAndCutsLongNames) {
  EXPECT_EQ(kernel_label("void implicit_convolve_sgemm<__half, __half, 128>(int, int, __half const*)"),
            "implicit_convolve_sgemm<__half, __half, 128>");
  EXPECT_EQ(kernel_label("ampcheck::kernels::cuda::(anonymous namespace)::fill_kernel(unsigned char*, long)"),
            "ampcheck::kernels::cuda::(anonymous namespace)::fill_kernel");
  EXPECT_EQ(kernel_label("void f<g(int)>(int)"), "f<g(int)>");
  EXPECT_EQ(kernel_label("nvjet_sm90_hss_64x8_64x16_1x4_h_bz_TNT"), "nvjet_sm90_hss_64x8_64x16_1x4_h_bz_TNT");
  const std::string label = kernel_label(std::string(200, 'k'));
  EXPECT_EQ(label.size(), 140u);
  EXPECT_EQ(label.substr(137), "...");
}

}  // namespace
}  // namespace ampcheck::inspector
