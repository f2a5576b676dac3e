// What a GPU kernel's name says about the arithmetic it ran: the precision of the values
// its multiplies took (input), the precision it accumulated in, whether it ran on tensor
// cores, and what kind of kernel it is. Read from the name's grammar, never from a list
// of full names: PyTorch's profiler plugin keeps such a list and reported no tensor-core
// use at all for Hopper's cuDNN sm90_xmma kernels because the list never learned them
// (pytorch/kineto issue 1041).
//
// The names are read through a table of kernel families (inspector/kernel_families.cpp: one
// entry per family, how it is matched, the reader it calls or the reading it yields, the
// source its rule rests on, and how to add a family). The grammars read:
//   xmma       sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_..._tensor16x8x16_...
//              (cuBLAS, cuDNN, TensorRT): arch, operation, a type tuple whose second pair
//              is the MMA operand type and the accumulator type, the MMA instruction.
//   cuBLAS     volta_fp16_s884gemm_fp16_..., turing_fp16_s1688cudnn_fp16_..., volta_sgemm_...
//              arch, output type, accumulator letter + MMA shape (no shape: CUDA cores),
//              gemm or cudnn, operand type (absent: the accumulator's); TensorRT's builds
//              of them with "trt_" in front, and its trt_<arch>_xmma_implicit_gemm_... .
//   CUTLASS    cutlass_80_tensorop_f16_s16816gemm_f16_..., cutlass_simt_sgemm_...,
//              cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_..., block-scaled
//              cutlass3x_sm100_bstensorop_gemm_ue8m0xe4m3_... (the element read, the scale said);
//              f32 operands on a tensor-op class read TF32 (CUTLASS rounds them; 3xTF32 only
//              where the name says so).
//   nvjet      nvjet_sm90_hsh_64x8_64x16_1x1_h_bz_NNT, nvjet_qqtst_... (cuBLAS 12.8+ on sm90
//              and later): operand, accumulator and output types as one letter each, or A,
//              B, C, accumulator and D; q is fp8.
//   trtllm-gen bmm_Bfloat16_E4m3E4m3_Fp32_t128x8x128u2_..._sm100a (TensorRT-LLM's and
//              FlashInfer's Blackwell GEMMs): output type, A and B types written together,
//              accumulator; "Mx" marks a block-scaled (MXFP8, MXFP4) operand.
//   attention  fmhaSm100aKernel_QkvE4m3OBfloat16H64... (TensorRT-LLM), fmha_cutlassF_bf16_...
//              _sm80 (PyTorch's memory-efficient attention), flash_fwd_kernel<...bfloat16_t...>
//              (FlashAttention 2), flash::FlashAttnFwdSm90<...> (FlashAttention 3),
//              cudnn_generated_fort_native_sdpa_sm90_... (cuDNN's fused attention, whose name
//              gives no precision).
//   Triton     triton_tem_fused_mm_0, triton_poi_..., triton_red_... (torch.compile): the kind
//              from the name, never the precision.
//   C++        demangled (or mangled, demangled here) templates: the kernel's identifier
//              (cuDNN's and cuBLAS's legacy CUDA-core engines by name: dgrad_engine,
//              wgrad_alg0_engine, the Winograd and FFT transforms, which count as their
//              convolution, gemmSN, gemmk1, sgemm_largek) and the element types among its
//              template arguments, else its parameter list's pointers where they agree
//              (matmul_k(float*, float*, float*, int, int, int): f32 operands); a wrapper whose
//              template argument is one of the names above is read as that name.
//   the project's own kernels (namespace ampcheck::), which use no MMA instruction.
// A name, or a part of one, that fits none of these gives "unknown", never a guess.
//
// The project's own kernels also describe themselves in kernel notes (kernels/kernel_note.h:
// "cublasLt: A f16 B f16 C f16, compute 32F, algo id 21, tile id 5, tensor cores yes");
// classify_kernel_note reads those.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ampcheck::inspector {

// tf32 is its own value: f32 storage whose multiplies kept 10 mantissa bits. int32 is
// the accumulator of int8 multiplies. fp8 is e4m3 or e5m2, fp4 e2m1, block-scaled (MX,
// NVFP4) or not: tensor cores multiply them, nothing else does. Six-bit formats (e2m3, e3m2)
// have no value here: a kernel that takes them reads unknown.
enum class KernelPrecision { unknown, f16, bf16, tf32, f32, f64, int8, int32, fp8, fp4 };

enum class TensorCores { unknown, yes, no };

// conv: a convolution whose name does not say which pass; a convolution's own transforms
// (Winograd's, the FFT's) are its work and read as its kind. other: a named kernel that is
// none of the rest (normalization, loss, pooling, the offsets computed for a conv).
enum class KernelKind {
  unknown,
  gemm,
  gemv,  // a matrix-vector product: memory-bound, no MMA (cuBLAS's gemv2N, gemvNSP, ...)
  conv_fprop,
  conv_dgrad,
  conv_wgrad,
  conv,
  attention,  // a fused attention (flash, fmha): its two GEMMs (Q K^T, P V) and the softmax between
  elementwise,
  reduction,
  layout,
  other
};

struct KernelClass {
  KernelPrecision input = KernelPrecision::unknown;       // what the multiplies took
  KernelPrecision accumulate = KernelPrecision::unknown;  // the accumulator; a note's compute type
  TensorCores tensor_cores = TensorCores::unknown;
  KernelKind kind = KernelKind::unknown;
  std::string why;  // the tokens that decided it, e.g. "'s16816gemm': f32 accumulator, MMA m16n8k16"
};

// A kernel name as a profiler shows it (CUPTI, nsys, Kineto): a library's procedural
// name, a demangled C++ signature ("void ns::kernel<__half, 3>(...)"), or a mangled
// one ("_ZN..."). Profiler truncation ("...", "…") is tolerated: what is left is read.
KernelClass classify_kernel_name(std::string_view name);

// One kernel note (kernels/kernel_note.h), e.g. "cuDNN fwd: IMPLICIT_PRECOMP_GEMM,
// tensor-op math, f16 data, f32 compute". A note says what the library was asked and
// what it chose; where it leaves the kernel open (tensor-op math only permits tensor
// cores) the answer is unknown and the kernel's name decides.
KernelClass classify_kernel_note(std::string_view note);
// The notes of one op as take_kernel_notes() joins them ("; "), one class per note.
std::vector<KernelClass> classify_kernel_notes(std::string_view joined);

// A kernel's name for one line of text: a C++ kernel without its parameter list and
// "void ", cut at 140 characters ("implicit_convolve_sgemm<__half, __half, 128, ...>").
std::string kernel_label(std::string_view name);

// "f16", "bf16", "tf32", "f32", "f64", "int8", "int32", "fp8", "fp4", "unknown".
const char* precision_name(KernelPrecision p);
// "yes", "no", "unknown".
const char* tensor_cores_name(TensorCores t);
// "gemm", "gemv", "conv fprop", "conv dgrad", "conv wgrad", "conv", "attention", "elementwise",
// "reduction", "layout", "other", "unknown".
const char* kind_name(KernelKind k);
// Whether a kernel of this kind multiplies matrices: where tensor cores are expected of
// f16/bf16 work (a GEMV is not: it reads each matrix element once, no MMA pays).
bool multiplies_matrices(KernelKind k);
// Whether it multiplies at all (the matrices' kinds and GEMV): where the precision of the
// multiplies says whether an op ran in the dtype its policy asked for.
bool multiplies(KernelKind k);

}  // namespace ampcheck::inspector
