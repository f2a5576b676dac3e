// The kernel families the classifier knows (inspector/kernel_class.h): one entry per family,
// each saying how its names are matched, what reads them (a grammar's reader in
// kernel_readers.cpp, or a fixed reading), and the source its rule rests on. The first entry
// that fits a name and accepts it gives the reading; a name no entry fits reads "unknown".
//
// How to add a kernel family
//   1. Find real names of it, as public profiler output shows them (nsys, Kineto traces, ncu,
//      a library's issue threads), and the vendor's rule for what the name says (its generator
//      source, its documentation). Unknown beats wrong: read only what the rule says.
//   2. Add one entry below, before any entry that would take its names: .name, .form (what
//      kind of name: Form::procedural for a library's name, Form::cxx for a C++ signature's
//      identifier, Form::any for both), .pattern (a glob on the name or identifier: '*', '?',
//      '|' between alternatives), .mentions where the name must also hold a word (a library's
//      namespace), then either .read (a grammar's reader, which may decline a name) or .fixed
//      (the kind, tensor cores, operands and accumulator every member has, or where its
//      template arguments name them), and .source (a [tag] below with the real names seen).
//   3. Add its test rows to tests/inspector_kernel_class_test.cpp (the table of name ->
//      expected reading, written from the vendor's rule, not from the classifier's output),
//      and, for a name captured on a GPU run, a row of tests/data/cuda-kernel-names.tsv.
//   A new grammar (a name with types, shapes and instructions of its own) is a reader in
//   kernel_readers.cpp declared in kernel_grammar.h; a family that always reads the same needs
//   no code, only its entry.
//
// Sources of the rules:
//   [CUTLASS]  CUTLASS's kernel generator, python/cutlass_library/gemm_operation.py and
//              conv2d_operation.py: procedural_name() = cutlass_<opcode class>_<extended
//              name>_<tile>_<layout>_align<N>; extended name = [<C type>_]<core>[_<A type>],
//              the types written only where they differ from the accumulator; core =
//              <accumulator letter><instruction shape><intermediate type><kind>, the
//              instruction shape only for tensor-op classes; letters from ShortDataTypeNames
//              (s f32, d f64, h f16, i s32, c and z complex). CUTLASS 3.x (extended_name_3x):
//              cutlass3x_sm<NN>_<class>_<core>_<A>_<B>_<accumulator>_<C>_<D>_..., the core
//              "gemm" from 3.6 on (before: with the letter and shape, "s64x128x16gemm");
//              block-scaled operands written <scale>x<element> ("ue8m0xe4m3"), blockwise
//              <m>x<k><scale>x<element> ("1x128f32xe4m3"); classes simt, tensorop,
//              wmma_tensorop, sptensorop, bstensorop (block-scaled), bssptensorop; types from
//              DataTypeNames (e4m3 e5m2 e2m1 e2m3 e3m2, f8 f6 f4 the runtime formats, ue8m0 ue4m3
//              the scales). Real names: NVIDIA/cutlass issues 1025, 2286, 2923
//              (cutlass3x_sm100_tensorop_gemm_e4m3_e4m3_f32_bf16_bf16_...), 2186
//              (cutlass3x_sm120_bstensorop_s16x8x32gemm_ue8m0xe4m3_ue8m0xe4m3_f32_void_e5m2_...).
//   [CUTLASS tf32] f32 operands on a tensor-op class run as TF32: "CUTLASS will internally
//              convert fp32 into tf32 before calling the tensor core instructions"
//              (NVIDIA/cutlass issue 466); cuBLAS's copies of these kernels
//              (cutlass_80_tensorop_s1688gemm_*) replace ampere_sgemm_* in PyTorch profiles when
//              TF32 is allowed (torch.backends.cuda.matmul.allow_tf32). The 3xTF32 emulation of
//              f32 is asked for explicitly (OpMultiplyAddFastF32, example
//              27_ampere_3xtf32_fast_accurate_tensorop_gemm), yet the generator names it alike
//              (GenerateSM80_TensorOp_1688_fast_fp32_math: cutlass_tensorop_s1688gemm_...):
//              such a name reads TF32 and its why says the name cannot tell; a name that says
//              3xtf32 reads f32 on tensor cores. s1688tf32gemm (f32 in, one TF32 product,
//              GenerateSM80_TensorOp_1688_fast_math) and s1688gemm_tf32 (TF32 in) say tf32.
//   [cuBLAS]   the same scheme without the class: <arch>_[<C type>_]<core>[_<A type>]_...
//              (volta_fp16_s884gemm_fp16, turing_fp16_s1688cudnn_fp16, volta_sgemm). NVIDIA's
//              MODS GEMM headers (gemmType_t, "accumulator type": SGEMM single-precision,
//              H884GEMM "half-precision using HMMA instruction", S1688CUDNN, I8816GEMM
//              "Int8-precision using IMMA instruction", SCUDNN) and its kernel tables give
//              each name's typeA, typeC and accumulator: volta_int8_h884gemm is f16 in,
//              int8 out, so the word after the arch is the output type, the one after the
//              core the operand type.
//   [TensorRT] TensorRT's builds of cuBLAS's and cuDNN's kernels carry a "trt_" prefix, the
//              name after it in their grammar (trt_volta_scudnn_...: NVIDIA/TensorRT issue
//              1288, "trt_volta_scudnn on tensorrt" where cuDNN ran volta_scudnn); its xmma
//              convolutions trt_<arch>_xmma_implicit_gemm_<A><B><C>_<layouts>_<pass>_..._<warp
//              MMA shape>_<stages>, e.g. trt_volta_xmma_implicit_gemm_f16f16f16_nhwc_nhwc_fprop_
//              idx_64x32x64x1_8x8x4_1stages and trt_turing_..._16x8x8_1stages (TensorRT issue
//              875's tactic log). "fp16x2" is f16 in pairs (half2): CUDA-core HFMA2.
//   [xmma]     sm<NN>_xmma_<op>_..._<t><t>_<t><t>_<t>_..._<instruction>_...: NVIDIA's MODS
//              tables map such names to instructions (sm80_xmma_gemm_f16f16_f16f32_f32_..._
//              tensor16x8x16 -> HMMA_16816_F32_F16; sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma
//              -> FFMA; sm90_xmma_gemm_i8i32_i8i32_f32 "INT32<-INT8"; f32f32_tf32f32_f32 ->
//              HGMMA_F32_TF32): the second pair is the MMA's operand type and accumulator,
//              the first pair the tensors' storage type (input, output), the last the
//              epilogue's scale type; the instruction token (tensorAxBxC, hgmma, igmma,
//              ffma) says tensor cores or not.
//   [PTX]      the PTX ISA: mma/wmma exist from sm_70, warpgroup-level wgmma (the
//              "warpgroup" of sm90 names) from sm_90, tcgen05.mma (kinds f16, tf32,
//              f8f6f4, mxf8f6f4, mxf4, mxf4nvf4) from sm_100; TF32, FP8, FP6 and FP4 are
//              operand formats of the tensor-core instructions only; the HMMA shapes are
//              m8n8k4 (sm70), m16n8k8 (sm75) and m16n8k16 (sm80).
//   [nvjet]    cuBLAS 12.8 and later name their sm90+ GEMMs nvjet_[sm<NN>_]<types>_<tile>...,
//              one letter per type in cuBLAS's own letters (h f16, s f32, d f64), t for bf16
//              and q for fp8. Three letters are operand, accumulator and output: on an H100
//              (cuBLAS 13.1) an f16 GEMM with an f16 result ran nvjet_sm90_hsh_..., with an f32
//              result nvjet_sm90_hss_..., and the same GEMMs in bf16 nvjet_sm90_tst_... and
//              nvjet_sm90_tss_... (this project's GPU run, tests/data/cuda-kernel-names.tsv).
//              Five letters are A, B, C, accumulator and D: torch._scaled_mm on float8_e4m3fn
//              operands runs nvjet_sm90_qqtst_..._ovscale_TNT with a bf16 result and
//              nvjet_qqhsh_... with an f16 one, and MXFP8 operands on a B200
//              nvjet_qqtst_..._Avec32UE8M0_Bvec32UE8M0_TNT, "Avec32UE8M0" one UE8M0 scale per
//              32 elements of A (public profiles of FP8 training and inference).
//   [cuBLAS/cuDNN templates] library kernels written as C++ templates list their element
//              types as template arguments: gemv2N_kernel<int, int, __half, __half, __half,
//              float, ...> (A, x, y, then the compute type), cudnn's
//              conv2d_grouped_direct_kernel<..., float, __half, __half, __half, float, __half>.
//              A multiply kernel whose element types are one of f16/bf16 and float takes
//              the narrow type and computes in float: no library multiplies f32 operands
//              into a f16/bf16 accumulator. cuBLAS's GEMVs: gemv2N/gemv2T/gemvNSP kernels,
//              internal::gemvx::kernel<..., cublasGemvParamsEx<...>>, and gemmk1_kernel, its
//              K = 1 product (an outer product), which reads each element once like a GEMV.
//   [cuDNN legacy] cuDNN's engines from before implicit GEMM on tensor cores, as the V100
//              ResNet-50 and A100 AlexNet traces of ../shared/data/traces record them:
//              dgrad_engine<float, ...>, wgrad_alg0_engine<float, ...>, implicit_convolve_sgemm,
//              explicit_convolve_sgemm, im2col4d_kernel, the Winograd transforms of
//              cudnn::winograd_nonfused (winogradForward{Data,Filter,Output}4x4,
//              winogradWgrad{Data,Delta,Output}4x4) and cudnn::winograd's
//              generateWinogradTilesKernel, the FFT convolution's fft2d_r2c_32x32 /
//              fft2d_c2r_32x32 (cudnnConvolutionFwdAlgo_t FFT and FFT_TILING: cuDNN runs an FFT
//              for no other operation); wgrad_alg1_engine<float, float, ...> in public
//              TensorFlow profiles. Their template arguments name their element types and
//              their tiles; none names an MMA shape, and on a V100 (whose tensor cores take f16
//              only) the f32 ones can only be FFMA: CUDA cores. A convolution's kernels belong
//              to it: the transforms around a Winograd or FFT product are its work (conv
//              kinds), counted with it as cuDNN's own kernels name them (winogradWgrad* name
//              the pass they serve).
//   [cuBLAS legacy] cuBLAS's GEMV-family GEMMs: gemmSN_TN_kernel<float, ...> and
//              gemmSN_NN_kernel (small-N GEMMs launched with cublasGemvTensorStridedBatched
//              parameters) and sgemm_largek_lds64 (a split-K SGEMM: 's' the single-precision
//              letter of gemmType_t), listed among the CUDA-core ("SIMT") f32 GEMMs of public
//              profiles of fp32 training with TF32 off.
//   [trtllm-gen] TensorRT-LLM's generated Blackwell GEMMs (also shipped in FlashInfer and
//              vLLM): bmm_<D>_<A><B>[_cast<T>]_<accumulator>_t<tile>..._sm100a|f: D the output
//              type, A and B the operands written together, each E4m3/E5m2 (fp8), E2m1 (fp4),
//              Bfloat16, Fp16, Fp32, "Mx" before a block-scaled (MX) one; e.g. FP8 in, BF16
//              out is bmm_Bfloat16_E4m3E4m3_Fp32 (FlashInfer's MoE docs). They are tcgen05
//              MMA kernels: sm100 has no other path for FP8/FP4 operands.
//   [fmha]     TensorRT-LLM's fmhaSm100aKernel_Q<T>Kv<T>O<T>H<head dim>... (QkvE4m3: one
//              type for Q, K and V), PyTorch's memory-efficient attention (from xformers)
//              fmha_cutlass<F|B>_<f16|bf16|f32>_..._sm<NN>, TensorRT's fmha_v2_..._<type>_..._sm<NN>:
//              fused attention kernels whose GEMMs use MMA instructions on sm70 and later
//              for 16-bit and 8-bit operands.
//   [cuDNN SDPA] cuDNN's runtime-fused attention, cudnn_generated_fort_native_sdpa_sm<NN>
//              [_flash]_<fprop|bprop>[_<wgmma|wmma>][_f16]_knob_...: the cuDNN frontend's
//              support matrix (docs/operations/Attention) requires sm80 or later and fp16 or
//              bf16 data (fp8 too on Hopper and Blackwell): tensor-core formats. Its "f16" is no
//              precision: PyTorch's cuDNN attention launched ..._sm80_flash_fprop_wmma_f16_knob_3_
//              ... on fp16 q, k, v and ..._sm90_flash_fprop_wgmma_f16 in a bf16 autocast run
//              (public profiles).
//   [flash]    FlashAttention 2 (flash::, pytorch_flash::): flash_fwd_kernel, flash_fwd_splitkv_kernel,
//              flash_bwd_*_kernel over Flash_*_kernel_traits<..., cutlass::bfloat16_t|half_t>:
//              its GEMMs are mma.sync (it requires sm80), its accumulators float
//              (Flash_kernel_traits::ElementAccum); flash_fwd_splitkv_combine_kernel adds the
//              split-KV partial results, a reduction, and flash_bwd_convert_dq /
//              flash_bwd_dot_do_o are its elementwise helpers.
//   [flash3]   FlashAttention 3 (Dao-AILab/flash-attention hopper/): flash::FlashAttnFwdSm90<
//              CollectiveMainloopFwdSm90<Stages, ClusterShape, TileShape, HeadDim, Element,
//              ElementAccum, Sm90, ...>, CollectiveEpilogueFwd<..., ElementOut, ...>, Scheduler>
//              (FlashAttnBwdSm90, and FlashAttnFwdSm80 for sm80-89), launched as
//              cutlass::device_kernel<flash::enable_sm90_or_later<...>> (as public profiles show
//              it): the mainloop's Element is what its GEMMs multiply (bf16, f16 or e4m3),
//              ElementAccum float; wgmma on sm90, mma.sync on sm80. FlashAttnFwdCombine adds
//              split partial results.
//   [Inductor] torch.compile's Triton kernels: triton_poi_* (pointwise), triton_red_* and
//              triton_per_* (reductions), triton_tem_* (templates: mm, addmm, bmm, convolution,
//              flex attention). Their names carry the fused ops, never an element type.
//   [parameter list] a demangled signature lists the kernel's parameter types (the Itanium
//              C++ ABI mangles them into the name): pointers to one floating-point type say what
//              the kernel reads and writes, its operands' storage (matmul_k(float*, float*,
//              float*, int, int, int): f32), never its instruction or accumulator. Read only
//              where every such pointer agrees, for a kernel that may multiply.
#include "inspector/kernel_grammar.h"

namespace ampcheck::inspector::grammar {

// Entries name only the fields they set (designated initializers); every other field keeps its
// default, which GCC's -Wmissing-field-initializers would flag one by one.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
const std::vector<Family>& families() {
  // clang-format off
  static const std::vector<Family> kFamilies = {
      // ---- Libraries' procedural names: a grammar each ----------------------------------
      {.name = "xmma", .form = Form::procedural, .pattern = "sm*_xmma_*", .read = read_xmma,
       .source = "[xmma] MODS tables; cuBLAS, cuDNN and TensorRT kernels"},
      {.name = "TensorRT xmma", .form = Form::procedural, .pattern = "trt_*_xmma_*", .read = read_trt_xmma,
       .source = "[TensorRT] NVIDIA/TensorRT issue 875; [PTX] HMMA shapes"},
      {.name = "TensorRT cuBLAS/cuDNN", .form = Form::procedural, .pattern = "trt_*", .read = read_trt,
       .source = "[TensorRT] NVIDIA/TensorRT issue 1288; [cuBLAS]"},
      {.name = "CUTLASS", .form = Form::procedural, .pattern = "cutlass_*|cutlass3x_*", .read = read_cutlass,
       .source = "[CUTLASS] gemm_operation.py; [CUTLASS tf32] NVIDIA/cutlass issue 466"},
      {.name = "cuBLASLt nvjet", .form = Form::procedural, .pattern = "nvjet_*", .read = read_nvjet,
       .source = "[nvjet] this project's H100 run; public FP8/MXFP8 profiles"},
      {.name = "trtllm-gen GEMM", .form = Form::procedural, .pattern = "bmm_*|gemm_*", .read = read_trtllm,
       .source = "[trtllm-gen] FlashInfer's MoE docs; the B200 vLLM trace"},
      {.name = "fused attention (fmha)", .form = Form::procedural, .pattern = "fmha*", .read = read_fmha,
       .source = "[fmha] TensorRT-LLM, PyTorch's memory-efficient attention, TensorRT"},
      {.name = "cuDNN SDPA", .form = Form::procedural,
       .pattern = "cudnn_generated_fort_native_sdpa_*|sm*_flash_fprop*|sm*_flash_bprop*", .read = read_cudnn_sdpa,
       .source = "[cuDNN SDPA] cuDNN frontend support matrix; public PyTorch profiles"},
      {.name = "Inductor Triton", .form = Form::procedural, .pattern = "triton_*", .read = read_triton,
       .source = "[Inductor]"},
      {.name = "cuBLAS/cuDNN", .form = Form::procedural,
       .pattern = "kepler_*|maxwell_*|pascal_*|volta_*|turing_*|ampere_*|ada_*|hopper_*|cudnn_*", .read = read_cublas,
       .source = "[cuBLAS] MODS gemmType_t and kernel tables"},

      // ---- Library kernels inside C++ signatures ------------------------------------------
      {.name = "a library kernel in a wrapper", .form = Form::cxx, .pattern = "*", .read = read_wrapped,
       .source = "cutlass::Kernel<cutlass_80_...>: the procedural families above"},
      {.name = "a library name with a parameter list", .form = Form::cxx, .pattern = "*",
       .read = read_named_library_kernel, .source = "the procedural families above"},
      {.name = "FlashAttention 2", .form = Form::cxx, .pattern = "flash_fwd_*|flash_bwd_*", .read = read_flash2,
       .source = "[flash]"},
      {.name = "FlashAttention 3 combine", .form = Form::cxx, .pattern = "FlashAttnFwdCombine*",
       .fixed = {.kind = K::reduction, .tensor_cores = TC::no, .why = "adds split partial results, no MMA"},
       .source = "[flash3]"},
      {.name = "FlashAttention 3", .form = Form::cxx, .pattern = "FlashAttn*Sm*", .read = read_flash3,
       .source = "[flash3] hopper/ of Dao-AILab/flash-attention; public profiles"},

      // ---- cuDNN's legacy engines: CUDA cores, types from the template arguments ----------
      {.name = "cuDNN implicit/explicit GEMM convolution", .form = Form::any,
       .pattern = "implicit_convolve*sgemm|explicit_convolve*sgemm",
       .fixed = {.kind = K::conv, .tensor_cores = TC::no, .from_template = true, .accumulate = P::f32,
                 .why = "'sgemm': an f32-accumulating GEMM on CUDA cores (no MMA shape)"},
       .source = "[cuDNN legacy] V100 ResNet-50 trace; pytorch/pytorch issue 42311 (no tensor-core use)"},
      {.name = "cuDNN dgrad_engine", .form = Form::any, .pattern = "dgrad_engine|dgrad2d_alg1_1",
       .fixed = {.kind = K::conv_dgrad, .tensor_cores = TC::no, .from_template = true, .float_computes = true,
                 .why = "a legacy data-gradient engine, FMA on CUDA cores"},
       .source = "[cuDNN legacy] V100 ResNet-50 trace"},
      {.name = "cuDNN wgrad engine", .form = Form::any, .pattern = "wgrad_alg?_engine*",
       .fixed = {.kind = K::conv_wgrad, .tensor_cores = TC::no, .from_template = true, .float_computes = true,
                 .why = "a legacy weight-gradient engine, FMA on CUDA cores"},
       .source = "[cuDNN legacy] V100 ResNet-50 trace; public TensorFlow profiles (wgrad_alg1_engine)"},
      {.name = "cuDNN Winograd forward transform", .form = Form::any, .pattern = "winogradForward*",
       .mentions = "cudnn",
       .fixed = {.kind = K::conv_fprop, .tensor_cores = TC::no, .from_template = true,
                 .why = "a transform of a nonfused Winograd forward convolution, part of its work, on CUDA cores"},
       .source = "[cuDNN legacy] V100 ResNet-50 trace"},
      {.name = "cuDNN Winograd wgrad transform", .form = Form::any, .pattern = "winogradWgrad*", .mentions = "cudnn",
       .fixed = {.kind = K::conv_wgrad, .tensor_cores = TC::no, .from_template = true,
                 .why = "a transform of a nonfused Winograd weight gradient, part of its work, on CUDA cores"},
       .source = "[cuDNN legacy] V100 ResNet-50 trace"},
      {.name = "cuDNN Winograd tiles", .form = Form::any, .pattern = "generateWinogradTilesKernel", .mentions = "cudnn",
       .fixed = {.kind = K::conv, .tensor_cores = TC::no, .from_template = true,
                 .why = "the filter tiles of a fused Winograd convolution (the pass not named), on CUDA cores"},
       .source = "[cuDNN legacy] V100 ResNet-50 trace (launched beside volta_scudnn_winograd_...)"},
      {.name = "cuDNN FFT convolution transform", .form = Form::any, .pattern = "fft2d_*|fft1d_*", .mentions = "cudnn",
       .fixed = {.kind = K::conv, .tensor_cores = TC::no, .from_template = true,
                 .why = "a transform of an FFT convolution (the pass not named), part of its work, on CUDA cores"},
       .source = "[cuDNN legacy] A100 AlexNet trace"},
      {.name = "cuDNN im2col", .form = Form::any, .pattern = "im2col*", .mentions = "cudnn",
       .fixed = {.kind = K::layout, .tensor_cores = TC::no, .from_template = true,
                 .why = "copies image patches into columns for an explicit-GEMM convolution: data movement"},
       .source = "[cuDNN legacy] V100 ResNet-50 trace"},

      // ---- cuBLAS's GEMV-family and legacy GEMMs: CUDA cores ------------------------------
      {.name = "cuBLAS gemmSN", .form = Form::any, .pattern = "gemmSN_*",
       .fixed = {.kind = K::gemm, .tensor_cores = TC::no, .from_template = true, .float_computes = true,
                 .why = "a small-N GEMM of the GEMV family, FMA on CUDA cores"},
       .source = "[cuBLAS legacy] public fp32 profiles"},
      {.name = "cuBLAS gemmk1", .form = Form::any, .pattern = "gemmk1_kernel",
       .fixed = {.kind = K::gemv, .tensor_cores = TC::no, .from_template = true, .float_computes = true,
                 .why = "the K = 1 product (an outer product), memory-bound like a GEMV: no MMA instruction"},
       .source = "[cuBLAS/cuDNN templates] V100 fp16 inference trace; RTX 5090 nsys"},
      {.name = "cuBLAS sgemm_largek", .form = Form::any, .pattern = "sgemm_largek*",
       .fixed = {.kind = K::gemm, .tensor_cores = TC::no, .operands = P::f32, .accumulate = P::f32,
                 .why = "'sgemm': single-precision operands and accumulator, FMA on CUDA cores"},
       .source = "[cuBLAS legacy] gemmType_t's SGEMM; public profiles"},

      // ---- Everything else: the identifier's words, template arguments, parameter list ---
      {.name = "any other kernel", .form = Form::any, .pattern = "*", .read = read_cxx_or_plain,
       .source = "[cuBLAS/cuDNN templates] [parameter list] and the vocabulary of kernel_readers.cpp"},
  };
  // clang-format on
  return kFamilies;
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

const Family* read_by_families(const Name& n, KernelClass& r, Why& why, bool procedural_only) {
  for (const Family& f : families()) {
    if (procedural_only ? f.form != Form::procedural
                        : (n.procedural ? f.form == Form::cxx : f.form == Form::procedural))
      continue;
    const std::string_view text = n.procedural ? std::string_view(n.text) : std::string_view(n.cxx.identifier);
    if (!glob(f.pattern, text)) continue;
    if (!f.mentions.empty() && lower(n.text).find(f.mentions) == std::string::npos) continue;
    KernelClass c;
    Why w;
    if (f.read == nullptr) {
      read_fixed(f, n, c, w);
    } else if (!f.read(n, c, w)) {
      continue;
    }
    r = c;
    why.add(w.text);
    return &f;
  }
  return nullptr;
}

}  // namespace ampcheck::inspector::grammar
