// The kernel classifier (inspector/kernel_class.h): a tokenizer and one reader per naming
// convention, each rule with the place the convention is documented.
//
// Sources of the conventions:
//   [CUTLASS]  CUTLASS's kernel generator, python/cutlass_library/gemm_operation.py and
//              conv2d_operation.py: procedural_name() = cutlass_<opcode class>_<extended
//              name>_<tile>_<layout>_align<N>; extended name = [<C type>_]<core>[_<A type>],
//              the types written only where they differ from the accumulator; core =
//              <accumulator letter><instruction shape><intermediate type><kind>, the
//              instruction shape only for tensor-op classes; letters from ShortDataTypeNames
//              (s f32, d f64, h f16, i s32, c and z complex). CUTLASS 3.x:
//              cutlass3x_sm<NN>_<class>_<core>_<A>_<B>_<accumulator>_<C>_<D>_...
//              examples/27_ampere_3xtf32_fast_accurate_tensorop_gemm lists the f32 flavours:
//              sgemm (CUDA cores), s1688gemm (3xTF32: f32 emulated on tensor cores),
//              s1688tf32gemm (f32 in, one TF32 multiply), s1688gemm_tf32 (TF32 in).
//   [cuBLAS]   the same scheme without the class: <arch>_[<C type>_]<core>[_<A type>]_...
//              (volta_fp16_s884gemm_fp16, turing_fp16_s1688cudnn_fp16, volta_sgemm). NVIDIA's
//              MODS GEMM headers (gemmType_t, "accumulator type": SGEMM single-precision,
//              H884GEMM "half-precision using HMMA instruction", S1688CUDNN, I8816GEMM
//              "Int8-precision using IMMA instruction", SCUDNN) and its kernel tables give
//              each name's typeA, typeC and accumulator: volta_int8_h884gemm is f16 in,
//              int8 out, so the word after the arch is the output type, the one after the
//              core the operand type.
//   [xmma]     sm<NN>_xmma_<op>_..._<t><t>_<t><t>_<t>_..._<instruction>_...: NVIDIA's MODS
//              tables map such names to instructions (sm80_xmma_gemm_f16f16_f16f32_f32_..._
//              tensor16x8x16 -> HMMA_16816_F32_F16; sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma
//              -> FFMA; sm90_xmma_gemm_i8i32_i8i32_f32 "INT32<-INT8"; f32f32_tf32f32_f32 ->
//              HGMMA_F32_TF32): the second pair is the MMA's operand type and accumulator,
//              the first pair the tensors' storage type (input, output), the last the
//              epilogue's scale type; the instruction token (tensorAxBxC, hgmma, igmma,
//              ffma) says tensor cores or not.
//   [PTX]      the PTX ISA: mma/wmma exist from sm_70, warpgroup-level wgmma (the
//              "warpgroup" of sm90 names) from sm_90; TF32 and FP8 are operand formats of
//              the tensor-core instructions only.
//   [cuDNN]    cudnnMathType_t: TENSOR_OP_MATH permits tensor cores, FMA_MATH is
//              "restricted to only kernels that use FMA instructions", DEFAULT_MATH permits
//              TF32 on A100 and later.
//   [cuBLAS API] cublasComputeType_t: 16F, 32F, 64F, 32I, 32F_FAST_16F / _16BF / _TF32.
//   [nvjet]    cuBLAS 12.8 and later name their sm90+ GEMMs nvjet_[sm<NN>_]<a><c><d>_<tile>...,
//              one letter per type in cuBLAS's own letters (h f16, s f32, d f64) and t for
//              bf16: on an H100 (cuBLAS 13.1) an f16 GEMM with an f16 result ran
//              nvjet_sm90_hsh_..., with an f32 result nvjet_sm90_hss_..., and the same GEMMs
//              in bf16 nvjet_sm90_tst_... and nvjet_sm90_tss_... (this project's GPU run,
//              tests/data/cuda-kernel-names.tsv). The letters are operand, accumulator and
//              output, as in cuBLAS's hgemm/sgemm letters and gemmType_t.
//   [cuBLAS/cuDNN templates] library kernels written as C++ templates list their element
//              types as template arguments: gemv2N_kernel<int, int, __half, __half, __half,
//              float, ...> (A, x, y, then the compute type), cudnn's
//              conv2d_grouped_direct_kernel<..., float, __half, __half, __half, float, __half>.
//              A multiply kernel whose element types are one of f16/bf16 and float takes
//              the narrow type and computes in float: no library multiplies f32 operands
//              into a f16/bf16 accumulator. cuBLAS's GEMVs: gemv2N/gemv2T/gemvNSP kernels,
//              internal::gemvx::kernel<..., cublasGemvParamsEx<...>>, and gemmk1_kernel, its
//              K = 1 product (an outer product), which reads each element once like a GEMV.
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
//   [flash]    FlashAttention 2 (flash::, pytorch_flash::): flash_fwd_kernel, flash_fwd_splitkv_kernel,
//              flash_bwd_*_kernel over Flash_*_kernel_traits<..., cutlass::bfloat16_t|half_t>:
//              its GEMMs are mma.sync (it requires sm80), its accumulators float
//              (Flash_kernel_traits::ElementAccum); flash_fwd_splitkv_combine_kernel adds the
//              split-KV partial results, a reduction, and flash_bwd_convert_dq /
//              flash_bwd_dot_do_o are its elementwise helpers.
//   [Inductor] torch.compile's Triton kernels: triton_poi_* (pointwise), triton_red_* and
//              triton_per_* (reductions), triton_tem_* (templates: mm, addmm, bmm, convolution).
#include "inspector/kernel_class.h"

#include <cxxabi.h>  // abi::__cxa_demangle: CUPTI hands mangled names

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ampcheck::inspector {
namespace {

using P = KernelPrecision;
using TC = TensorCores;
using K = KernelKind;

// ---------------------------------------------------------------------------------
// Text

bool is_alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }
bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
bool is_upper(char c) { return std::isupper(static_cast<unsigned char>(c)) != 0; }
bool is_lower(char c) { return std::islower(static_cast<unsigned char>(c)) != 0; }
char to_lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = to_lower(c);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())) != 0) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.remove_suffix(1);
  return s;
}

bool all_digits(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_digit); }

// A short decimal number (an architecture: "80", "sm90"); 0 when not one.
int small_number(std::string_view s) {
  if (!all_digits(s) || s.size() > 4) return 0;
  int n = 0;
  for (char c : s) n = n * 10 + (c - '0');
  return n;
}

// A procedural name's tokens: lower case, split at '_', empty ones (from "__") dropped.
std::vector<std::string> underscore_tokens(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == '_') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += to_lower(c);
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// An identifier's words, for the vocabulary: split at anything not a letter or digit, at
// camelCase humps and at letter/digit boundaries; lower case. "nchwToNhwcKernel" ->
// nchw to nhwc kernel; "max_pool2d" -> max pool 2 d.
std::vector<std::string> words(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(lower(cur));
    cur.clear();
  };
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (!is_alpha(c) && !is_digit(c)) {
      flush();
      continue;
    }
    if (!cur.empty()) {
      const char p = cur.back();
      const bool hump = is_lower(p) && is_upper(c);
      const bool acronym_end = is_upper(p) && is_upper(c) && i + 1 < s.size() && is_lower(s[i + 1]);
      const bool digit_edge = is_digit(p) != is_digit(c);
      if (hump || acronym_end || digit_edge) flush();
    }
    cur += c;
  }
  flush();
  return out;
}

// The "why" text: short clauses joined with "; ".
struct Why {
  std::string text;
  void add(std::string_view s) {
    if (!text.empty()) text += "; ";
    text += s;
  }
};

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// ---------------------------------------------------------------------------------
// Element types, accumulator letters, architectures

// The element-type spellings of the names read here: CUTLASS's DataTypeNames (f16 bf16
// tf32 f32 f64 s8 u8 s32 e4m3 e5m2), the xmma tuples' (i8 i32), cuBLAS's (fp16 bf16 int8
// int32 tf32 fp32).
std::optional<P> type_token(std::string_view t) {
  static constexpr std::pair<std::string_view, P> kTypes[] = {
      {"f16", P::f16},     {"fp16", P::f16},    {"bf16", P::bf16},   {"tf32", P::tf32},   {"f32", P::f32},
      {"fp32", P::f32},    {"f64", P::f64},     {"fp64", P::f64},    {"s8", P::int8},     {"u8", P::int8},
      {"i8", P::int8},     {"int8", P::int8},   {"s32", P::int32},   {"i32", P::int32},   {"int32", P::int32},
      {"e4m3", P::fp8},    {"e5m2", P::fp8},    {"e2m1", P::fp4}};
  for (const auto& [name, p] : kTypes)
    if (t == name) return p;
  return std::nullopt;
}

// An xmma tuple element: two type names written together ("f16f32", "e4m3bf16").
std::optional<std::pair<P, P>> type_pair(std::string_view t) {
  for (std::size_t cut = 2; cut + 2 <= t.size(); ++cut) {
    const auto a = type_token(t.substr(0, cut)), b = type_token(t.substr(cut));
    if (a && b) return std::pair{*a, *b};
  }
  return std::nullopt;
}

// [CUTLASS] ShortDataTypeNames / [cuBLAS] gemmType_t: the letter that leads a core is the
// accumulator's type; c and z are complex f32 and f64, a g before them Gauss's
// three-multiply complex product.
std::optional<P> accumulator_letter(char c) {
  switch (c) {
    case 's': return P::f32;
    case 'd': return P::f64;
    case 'h': return P::f16;
    case 'i': return P::int32;
    case 'c': return P::f32;
    case 'z': return P::f64;
    default: return std::nullopt;
  }
}

// The compute capability a name is written for: "sm80", an arch word of cuBLAS/cuDNN
// names, or 0.
int arch_of(std::string_view t) {
  if (t.size() > 2 && t.substr(0, 2) == "sm") {
    // "sm90a", "sm100f": the arch-specific and family-specific targets of CUDA 12.9+.
    std::string_view n = t.substr(2);
    if (n.size() > 1 && (n.back() == 'a' || n.back() == 'f') && is_digit(n[n.size() - 2])) n.remove_suffix(1);
    return small_number(n);
  }
  static constexpr std::pair<std::string_view, int> kArchs[] = {{"kepler", 30}, {"maxwell", 50}, {"pascal", 60},
                                                                {"volta", 70},  {"turing", 75},  {"ampere", 80},
                                                                {"ada", 89},    {"hopper", 90}};
  for (const auto& [name, sm] : kArchs)
    if (t == name) return sm;
  return 0;
}

// [PTX] no MMA instruction exists before sm_70: a kernel written for an older target runs
// its multiplies on CUDA cores, whatever GPU it runs on.
constexpr int kFirstTensorCoreArch = 70;

// ---------------------------------------------------------------------------------
// The core of CUTLASS and cuBLAS names: <accumulator>[<shape>][xor|and][<intermediate>]<kind>
// "s16816gemm", "h884gemm", "i8816gemm", "s1688tf32gemm", "s16816fprop", "scudnn",
// "sgemm", "gcgemm", "s64x128x16gemm" (CUTLASS 3.x writes the shape with x).

struct Core {
  P accumulate = P::unknown;
  bool complex = false;
  std::string shape;                 // the MMA instruction's shape; empty: CUDA cores
  std::optional<P> intermediate;     // [CUTLASS] the MMA's operand type where it is not A's
  K kind = K::unknown;               // gemm, conv_fprop/dgrad/wgrad, conv (a cudnn core)
};

std::optional<Core> parse_core(std::string_view t) {
  Core core;
  std::size_t i = 0;
  if (t.size() > 1 && t[0] == 'g' && (t[1] == 'c' || t[1] == 'z')) i = 1;  // gaussian complex
  if (i >= t.size()) return std::nullopt;
  const auto acc = accumulator_letter(t[i]);
  if (!acc) return std::nullopt;
  core.accumulate = *acc;
  core.complex = t[i] == 'c' || t[i] == 'z';
  ++i;
  // The shape: digits ("16816"), or digits x digits x digits ("64x128x16").
  std::size_t s = i;
  while (i < t.size() && (is_digit(t[i]) || (t[i] == 'x' && i > s && i + 1 < t.size() && is_digit(t[i + 1])))) ++i;
  core.shape = std::string(t.substr(s, i - s));
  if (!core.shape.empty() && core.shape.size() < 3) return std::nullopt;
  std::string_view rest = t.substr(i);
  for (std::string_view op : {"xor", "and"})  // binary MMA's operation
    if (rest.substr(0, op.size()) == op) rest.remove_prefix(op.size());
  static constexpr std::pair<std::string_view, K> kKinds[] = {
      {"gemm", K::gemm},        {"spgemm", K::gemm},       {"cudnn", K::conv},        {"fprop", K::conv_fprop},
      {"dgrad", K::conv_dgrad}, {"wgrad", K::conv_wgrad},  {"fprop3d", K::conv_fprop}, {"dgrad3d", K::conv_dgrad},
      {"wgrad3d", K::conv_wgrad}};
  for (const auto& [word, kind] : kKinds) {
    if (rest.size() < word.size() || rest.substr(rest.size() - word.size()) != word) continue;
    const std::string_view between = rest.substr(0, rest.size() - word.size());
    if (!between.empty()) {
      const auto inter = type_token(between);
      if (!inter || core.shape.empty()) continue;
      core.intermediate = inter;
    }
    core.kind = kind;
    return core;
  }
  return std::nullopt;
}

std::string core_text(const Core& c) {
  std::string s = std::string(precision_name(c.accumulate)) + (c.complex ? " (complex)" : "") + " accumulator";
  s += c.shape.empty() ? ", no MMA shape: CUDA-core FMA" : ", MMA shape " + c.shape + ": tensor cores";
  return s;
}

// A conv direction named anywhere in a procedural name's tokens.
K direction_of(const std::vector<std::string>& t, K fallback) {
  for (const auto& w : t) {
    if (w == "fprop") return K::conv_fprop;
    if (w == "dgrad") return K::conv_dgrad;
    if (w == "wgrad") return K::conv_wgrad;
  }
  return fallback;
}

// After a core, the operand type: the first type token before the tile shape (the first
// token that starts with a digit); words between (an epilogue such as "relu", cuDNN's
// "winograd", CUTLASS's iterator "optimized") are skipped. Absent with the tile in sight,
// the operand type is the accumulator's ([CUTLASS] extended_name writes it only where it
// differs); absent with the name cut short, it is not known.
struct Operand {
  std::optional<P> type;
  bool omitted = false;  // the tile came first
  std::string token;
};
Operand operand_after(const std::vector<std::string>& t, std::size_t core_at) {
  Operand o;
  for (std::size_t j = core_at + 1; j < t.size(); ++j) {
    if (const auto p = type_token(t[j])) {
      o.type = p;
      o.token = t[j];
      return o;
    }
    if (is_digit(t[j][0])) {
      o.omitted = true;
      return o;
    }
  }
  return o;
}

void finish_core_input(const Core& core, const Operand& a, KernelClass& r, Why& why) {
  if (core.intermediate) {
    r.input = *core.intermediate;
    why.add(std::string("MMA operands ") + precision_name(r.input) + " (intermediate type in the core)");
  } else if (a.type) {
    r.input = *a.type;
    why.add(quoted(a.token) + " after the core: operands " + precision_name(r.input));
  } else if (a.omitted) {
    r.input = core.accumulate;
    why.add(std::string("no operand type before the tile: operands are the accumulator's, ") +
            precision_name(r.input));
  } else {
    why.add("operand type cut off");
  }
}

// ---------------------------------------------------------------------------------
// [xmma] sm<NN>_xmma_<op>..._<pair>_<pair>_<type>_..._<instruction>

// "tensor16x8x16", "sptensor16x8x32", "hgmma64x128x16", "igmma64x128x32": an MMA
// instruction with its shape.
bool mma_instruction(std::string_view t) {
  if (t.substr(0, 2) == "sp") t.remove_prefix(2);
  for (std::string_view op : {"tensor", "hgmma", "igmma", "qgmma", "gmma", "hmma", "imma", "dmma"}) {
    if (t.substr(0, op.size()) != op) continue;
    const std::string_view shape = t.substr(op.size());
    const std::size_t x1 = shape.find('x'), x2 = shape.rfind('x');
    return x1 != std::string_view::npos && x2 != x1 && all_digits(shape.substr(0, x1)) &&
           all_digits(shape.substr(x1 + 1, x2 - x1 - 1)) && all_digits(shape.substr(x2 + 1));
  }
  return false;
}
bool fma_instruction(std::string_view t) {
  return t == "ffma" || t == "hfma2" || t == "hfma" || t == "dfma" || t == "fma" || t == "simt";
}

bool read_xmma(const std::vector<std::string>& t, KernelClass& r, Why& why) {
  if (t.size() < 2 || t[1] != "xmma") return false;
  const int arch = arch_of(t[0]);
  if (arch == 0) return false;
  why.add("xmma name, " + t[0]);
  std::size_t i = 2;
  for (; i < t.size() && !type_pair(t[i]); ++i) {
    const std::string& w = t[i];
    if (w == "fprop" || w == "dgrad" || w == "wgrad") {
      if (r.kind == K::unknown) r.kind = direction_of({w}, K::conv);
    } else if (w == "gemm" && r.kind == K::unknown) {
      r.kind = K::gemm;
    } else if ((w == "gemv" || w == "gemvx") && r.kind == K::unknown) {
      r.kind = K::gemv;
    }
  }
  if (r.kind != K::unknown) why.add(std::string("operation ") + kind_name(r.kind));
  std::optional<P> math;
  if (i + 1 < t.size() && type_pair(t[i]) && type_pair(t[i + 1])) {
    const auto operands = *type_pair(t[i + 1]);
    math = operands.first;
    r.input = operands.first;
    r.accumulate = operands.second;
    why.add(quoted(t[i] + "_" + t[i + 1]) + ": MMA operands " + precision_name(r.input) + ", accumulator " +
            precision_name(r.accumulate));
  } else if (i < t.size()) {
    why.add(quoted(t[i]) + " starts no <storage pair>_<operand/accumulator pair> tuple: precision not read");
  } else {
    why.add("no type tuple");
  }
  // Tensor cores: the instruction token first; then what an sm90 name or the operand
  // format implies.
  if (arch < kFirstTensorCoreArch) {
    r.tensor_cores = TC::no;
    why.add(t[0] + " predates MMA instructions");
    return true;
  }
  for (std::size_t j = 2; j < t.size(); ++j) {
    if (mma_instruction(t[j])) {
      r.tensor_cores = TC::yes;
      why.add(quoted(t[j]) + ": MMA instruction");
      return true;
    }
    if (fma_instruction(t[j])) {
      r.tensor_cores = TC::no;
      why.add(quoted(t[j]) + ": FMA on CUDA cores");
      return true;
    }
  }
  if (arch >= 90) {
    for (const auto& w : t) {
      if (w.substr(0, 13) == "warpgroupsize") {
        r.tensor_cores = TC::yes;
        why.add(quoted(w) + ": warpgroup tiling, the sm90 warpgroup MMA (wgmma)");
        return true;
      }
    }
  }
  if (math == P::tf32 || math == P::fp8 || math == P::fp4) {
    r.tensor_cores = TC::yes;
    why.add(std::string(precision_name(*math)) + " operands exist only on tensor cores");
    return true;
  }
  why.add("no instruction token: tensor cores not read");
  return true;
}

// ---------------------------------------------------------------------------------
// [cuBLAS] <arch>_[<C type>_]<core>[_<A type>]_<tile>...

bool read_cublas(const std::vector<std::string>& t_in, KernelClass& r, Why& why) {
  // cuDNN 8 writes its own kernels' names after a "cudnn_" (cudnn_ampere_scudnn_128x64_...).
  const bool cudnn = t_in.size() > 2 && t_in[0] == "cudnn" && arch_of(t_in[1]) != 0;
  const std::vector<std::string> t = cudnn ? std::vector<std::string>(t_in.begin() + 1, t_in.end()) : t_in;
  if (t.size() < 2) return false;
  const int arch = arch_of(t[0]);
  if (arch == 0 || t[0].substr(0, 2) == "sm") return false;
  // The core, after an optional output type.
  std::size_t at = 1;
  std::optional<Core> core = parse_core(t[1]);
  if (!core && t.size() > 2 && type_token(t[1])) {
    at = 2;
    core = parse_core(t[2]);
  }
  if (!core) return false;
  r.accumulate = core->accumulate;
  r.kind = core->kind == K::conv ? direction_of(t, K::conv) : core->kind;
  why.add(t[0] + " library name" + (at == 2 ? ", output " + t[1] : std::string()));
  why.add(quoted(t[at]) + ": " + core_text(*core));
  finish_core_input(*core, operand_after(t, at), r, why);
  if (arch < kFirstTensorCoreArch) {
    r.tensor_cores = TC::no;
    why.add(t[0] + " predates MMA instructions");
  } else {
    r.tensor_cores = core->shape.empty() ? TC::no : TC::yes;
  }
  return true;
}

// ---------------------------------------------------------------------------------
// [CUTLASS] cutlass[_<NN>]_<class>_[<C type>_]<core>[_<A type>]_<tile>..., and
// cutlass3x_sm<NN>_<class>_<core>_<A>_<B>_<accumulator>_<C>_<D>_...

bool read_cutlass(const std::vector<std::string>& t, KernelClass& r, Why& why) {
  if (t.empty()) return false;
  const bool v3 = t[0] == "cutlass3x";
  if (t[0] != "cutlass" && !v3) return false;
  std::size_t i = 1;
  int arch = 0;
  if (i < t.size() && (small_number(t[i]) != 0 || arch_of(t[i]) != 0)) {
    arch = small_number(t[i]) != 0 ? small_number(t[i]) : arch_of(t[i]);
    ++i;
  }
  if (i >= t.size()) return false;
  bool tensor_op = false;
  if (t[i] == "tensorop" || t[i] == "sptensorop" || t[i] == "bstensorop") {
    tensor_op = true;
    ++i;
  } else if (t[i] == "wmma" && i + 1 < t.size() && t[i + 1] == "tensorop") {
    tensor_op = true;
    i += 2;
  } else if (t[i] == "simt") {
    ++i;
  } else {
    return false;
  }
  // The opcode class decides tensor cores, whatever the rest of the name says or lost.
  const std::string opclass = t[i - 1];
  why.add(std::string(v3 ? "CUTLASS 3" : "CUTLASS") + " name, class " + opclass);
  if (arch != 0 && arch < kFirstTensorCoreArch) {
    r.tensor_cores = TC::no;
    why.add("sm" + std::to_string(arch) + " predates MMA instructions");
  } else {
    r.tensor_cores = tensor_op ? TC::yes : TC::no;
    why.add(tensor_op ? "tensor cores" : "CUDA cores");
  }
  if (i >= t.size() || (!parse_core(t[i]) && !(v3 && t[i] == "gemm") &&
                        !(i + 1 < t.size() && type_token(t[i]) && parse_core(t[i + 1])))) {
    why.add("no core after the class (cut short?): precision and kind not read");
    return true;
  }

  if (v3) {
    // The core, then A B accumulator C D.
    const std::optional<Core> core = parse_core(t[i]);
    r.kind = core ? core->kind : K::gemm;
    std::vector<P> types;
    for (std::size_t j = i + 1; j < t.size() && j <= i + 5; ++j) {
      const auto p = type_token(t[j]);
      if (!p) break;
      types.push_back(*p);
    }
    if (types.size() >= 3) {
      r.accumulate = types[2];
      if (types[0] == types[1]) {
        r.input = types[0];
        why.add("A and B " + std::string(precision_name(r.input)) + ", accumulator " + precision_name(r.accumulate));
      } else {
        why.add(std::string("A ") + precision_name(types[0]) + " and B " + precision_name(types[1]) +
                " differ: input not one precision");
      }
    } else {
      why.add("fewer than three types after the core: precision not read");
      if (core) r.accumulate = core->accumulate;
    }
  } else {
    std::size_t at = i;
    std::optional<Core> core = parse_core(t[at]);
    if (!core) core = parse_core(t[++at]);  // after the output type
    r.kind = core->kind == K::conv ? direction_of(t, K::conv) : core->kind;
    r.accumulate = core->accumulate;
    if (at > i) why.add("output " + t[i]);
    why.add(quoted(t[at]) + ": " + core_text(*core));
    finish_core_input(*core, operand_after(t, at), r, why);
    if (tensor_op && r.input == P::f32 && !core->intermediate)
      why.add("f32 operands on tensor cores: 3xTF32 emulation of f32 (CUTLASS example 27)");
  }
  return true;
}

// ---------------------------------------------------------------------------------
// [nvjet] nvjet_[sm<NN>_]<operand><accumulator><output>_<tile>...

std::optional<P> nvjet_letter(char c) {
  switch (c) {
    case 'h': return P::f16;
    case 't': return P::bf16;
    case 's': return P::f32;
    case 'd': return P::f64;
    default: return std::nullopt;
  }
}

bool read_nvjet(const std::vector<std::string>& t, KernelClass& r, Why& why) {
  if (t.empty() || t[0] != "nvjet") return false;
  std::size_t i = 1;
  int arch = 0;
  if (i < t.size() && arch_of(t[i]) != 0) arch = arch_of(t[i++]);
  r.kind = K::gemm;
  why.add("nvjet name (cuBLAS's sm90+ GEMMs)" + (arch ? ", sm" + std::to_string(arch) : std::string()));
  if (i >= t.size() || t[i].size() != 3) {
    why.add("no three-letter type word: precision not read");
    return true;
  }
  const std::string& types = t[i];
  const auto a = nvjet_letter(types[0]), c = nvjet_letter(types[1]);
  if (!a || !c) {
    why.add(quoted(types) + ": a type letter not read (h f16, t bf16, s f32, d f64)");
    return true;
  }
  r.input = *a;
  r.accumulate = *c;
  why.add(quoted(types) + ": operands " + precision_name(r.input) + ", accumulator " + precision_name(r.accumulate));
  // f16/bf16 operands with an f32 accumulator: the tensor cores' instruction on sm90 (the
  // only way cuBLAS multiplies narrow types into f32 there); f32/f64 operands say nothing
  // of FFMA, DMMA or TF32 emulation, so tensor cores stay unknown.
  if ((r.input == P::f16 || r.input == P::bf16) && r.accumulate == P::f32) {
    r.tensor_cores = TC::yes;
    why.add("f16/bf16 operands into f32 on sm90+: warpgroup MMA");
  } else {
    why.add("operand type alone does not say tensor cores");
  }
  return true;
}

// ---------------------------------------------------------------------------------
// [trtllm-gen] bmm_<D>_<A><B>[_cast<T>]_<accumulator>_..._sm<NN>[af]

std::optional<P> trtllm_type(std::string_view t) {
  if (t.substr(0, 2) == "mx") t.remove_prefix(2);  // block-scaled: the element type is what multiplies
  static constexpr std::pair<std::string_view, P> kTypes[] = {
      {"bfloat16", P::bf16}, {"fp16", P::f16}, {"fp32", P::f32}, {"e4m3", P::fp8},
      {"e5m2", P::fp8},      {"e2m1", P::fp4}, {"int8", P::int8}};
  for (const auto& [name, p] : kTypes)
    if (t == name) return p;
  return std::nullopt;
}

// The narrower of two operand formats is the one the MMA is sized by; the wider one is
// what the kernel is said to take (its A and B are both named in the why).
int width_of(P p) {
  switch (p) {
    case P::fp4: return 4;
    case P::fp8:
    case P::int8: return 8;
    case P::f16:
    case P::bf16: return 16;
    case P::tf32: return 19;
    case P::f32: return 32;
    case P::f64: return 64;
    default: return 0;
  }
}

bool read_trtllm(const std::vector<std::string>& t, KernelClass& r, Why& why) {
  if (t.size() < 4 || (t[0] != "bmm" && t[0] != "gemm")) return false;
  const auto out = trtllm_type(t[1]);
  if (!out) return false;
  std::optional<std::pair<P, P>> ab;
  std::string a_name, b_name;
  for (std::size_t cut = 2; cut + 2 <= t[2].size() && !ab; ++cut) {
    const auto a = trtllm_type(std::string_view(t[2]).substr(0, cut)), b = trtllm_type(std::string_view(t[2]).substr(cut));
    if (a && b) {
      ab = std::pair{*a, *b};
      a_name = t[2].substr(0, cut);
      b_name = t[2].substr(cut);
    }
  }
  if (!ab) return false;
  std::size_t i = 3;
  if (i < t.size() && t[i].substr(0, 4) == "cast") ++i;  // the operands' conversion before the MMA
  if (i >= t.size()) return false;
  const auto acc = trtllm_type(t[i]);
  if (!acc) return false;
  r.kind = K::gemm;
  r.accumulate = *acc;
  const P a = ab->first, b = ab->second;
  r.input = width_of(a) >= width_of(b) ? a : b;
  why.add("trtllm-gen GEMM name: output " + t[1] + ", A " + a_name + " (" + precision_name(a) + "), B " + b_name +
          " (" + precision_name(b) + "), accumulator " + precision_name(*acc));
  int arch = 0;
  for (const auto& w : t)
    if (arch_of(w) != 0) arch = arch_of(w);
  if (arch >= 100 || a == P::fp8 || a == P::fp4 || b == P::fp8 || b == P::fp4) {
    r.tensor_cores = TC::yes;
    why.add(arch >= 100 ? "sm" + std::to_string(arch) + " trtllm-gen kernel: tcgen05 MMA"
                        : std::string("fp8/fp4 operands exist only on tensor cores"));
  } else {
    why.add("no sm100 target in the name: tensor cores not read");
  }
  return true;
}

// ---------------------------------------------------------------------------------
// [fmha] fused attention kernels named by their library

// TensorRT-LLM's camel-case spelling after a marker: "QkvE4m3", "OBfloat16", "KvE2m1".
std::optional<P> camel_type_after(std::string_view s, std::string_view marker, std::string* spelled) {
  static constexpr std::pair<std::string_view, P> kTypes[] = {
      {"Bfloat16", P::bf16}, {"Fp16", P::f16}, {"Fp32", P::f32}, {"E4m3", P::fp8},
      {"E5m2", P::fp8},      {"E2m1", P::fp4}, {"Int8", P::int8}};
  for (std::size_t at = s.find(marker); at != std::string_view::npos; at = s.find(marker, at + 1)) {
    std::string_view rest = s.substr(at + marker.size());
    if (rest.substr(0, 2) == "Mx") rest.remove_prefix(2);
    for (const auto& [name, p] : kTypes)
      if (rest.substr(0, name.size()) == name) {
        if (spelled) *spelled = std::string(marker) + std::string(name);
        return p;
      }
  }
  return std::nullopt;
}

bool read_fmha(std::string_view name, const std::vector<std::string>& t, KernelClass& r, Why& why) {
  if (t.empty() || t[0].substr(0, 4) != "fmha") return false;
  int arch = 0;
  for (const auto& w : t)
    if (arch_of(w) != 0) arch = arch_of(w);
  if (t[0].size() > 4) {  // fmhaSm100aKernel_QkvE4m3OBfloat16H64...
    const std::string lower_first = t[0];
    const std::size_t sm = lower_first.find("sm");
    if (sm != std::string::npos) {
      std::size_t e = sm + 2;
      while (e < lower_first.size() && is_digit(lower_first[e])) ++e;
      arch = small_number(std::string_view(lower_first).substr(sm + 2, e - sm - 2));
    }
    std::string q_name, o_name;
    auto q = camel_type_after(name, "Qkv", &q_name);
    if (!q) q = camel_type_after(name, "Q", &q_name);
    if (!q) return false;
    r.kind = K::attention;
    r.input = *q;
    why.add("TensorRT-LLM fmha name" + (arch ? ", sm" + std::to_string(arch) : std::string()) + "; " + quoted(q_name) +
            ": Q (and K, V) " + precision_name(r.input));
    if (camel_type_after(name, "O", &o_name)) why.add(quoted(o_name) + ": output");
  } else {
    // fmha_cutlassF_bf16_aligned_64x64_rf_sm80, fmha_v2_flash_attention_fp16_..._sm80_kernel
    std::optional<P> type;
    std::string spelled;
    for (std::size_t i = 1; i < t.size() && !type; ++i)
      if ((type = type_token(t[i]))) spelled = t[i];
    r.kind = K::attention;
    why.add("fused attention name (" + t[0] + "_" + (t.size() > 1 ? t[1] : std::string()) + ")" +
            (arch ? ", sm" + std::to_string(arch) : std::string()));
    if (!type) {
      why.add("no element type in the name: precision not read");
      return true;
    }
    r.input = *type;
    why.add(quoted(spelled) + ": operands " + precision_name(r.input));
  }
  if (arch != 0 && arch < kFirstTensorCoreArch) {
    r.tensor_cores = TC::no;
    why.add("sm" + std::to_string(arch) + " predates MMA instructions");
  } else if (r.input == P::f16 || r.input == P::bf16 || r.input == P::fp8 || r.input == P::fp4 || r.input == P::int8) {
    if (arch != 0) {
      r.tensor_cores = TC::yes;
      why.add(std::string(precision_name(r.input)) + " attention GEMMs on sm" + std::to_string(arch) + ": MMA instructions");
    } else {
      why.add("no sm target in the name: tensor cores not read");
    }
  } else {
    why.add(std::string(precision_name(r.input)) + " operands: the name does not say which instruction");
  }
  return true;
}

// ---------------------------------------------------------------------------------
// [Inductor] triton_<poi|red|per|tem>_fused_...

bool read_triton(const std::vector<std::string>& t, KernelClass& r, Why& why) {
  if (t.size() < 2 || t[0] != "triton") return false;
  const std::string& k = t[1];
  if (k == "poi") {
    r.kind = K::elementwise;
    r.tensor_cores = TC::no;
    why.add("'triton_poi': a torch.compile pointwise kernel, no matrix multiply");
  } else if (k == "red" || k == "per") {
    r.kind = K::reduction;
    r.tensor_cores = TC::no;
    why.add(quoted("triton_" + k) + ": a torch.compile reduction kernel, no matrix multiply");
  } else if (k == "tem") {
    for (const auto& w : t) {
      if (w == "mm" || w == "addmm" || w == "bmm" || w == "baddbmm") r.kind = K::gemm;
      if (w == "convolution" || w == "conv") r.kind = K::conv;
    }
    why.add("'triton_tem': a torch.compile template kernel" +
            (r.kind == K::unknown ? std::string() : std::string(", ") + kind_name(r.kind)) +
            "; Triton's tl.dot picks its instruction from the operand types, which the name does not give");
  } else {
    return false;
  }
  return true;
}

// A library's procedural name, read by whichever grammar it fits.
bool read_procedural(std::string_view name, KernelClass& r, Why& why) {
  const auto t = underscore_tokens(name);
  return read_xmma(t, r, why) || read_cutlass(t, r, why) || read_nvjet(t, r, why) || read_trtllm(t, r, why) ||
         read_fmha(name, t, r, why) || read_triton(t, r, why) || read_cublas(t, r, why);
}

// ---------------------------------------------------------------------------------
// The vocabulary of kernels that do not multiply matrices, by identifier word. Checked
// in this order (a max_pool kernel is pooling before it is a max; a softmax kernel is a
// normalization before it is a max).

struct WordClass {
  K kind;
  const char* what;
  std::vector<std::string_view> words;
};
const std::vector<WordClass>& vocabulary() {
  static const std::vector<WordClass> kClasses = {
      {K::layout,
       "data movement",
       {"transpose", "permute", "copy", "scatter", "gather", "embedding", "reformat", "reorder"}},
      {K::other, "pooling", {"pool", "pooling"}},
      {K::other, "normalization or loss", {"norm", "bn", "softmax", "entropy", "mse", "loss"}},
      // "<x>_blocks": per-block partial results (this project's naming).
      {K::reduction,
       "reduction",
       {"reduce", "reduction", "sum", "sums", "mean", "partial", "partials", "max", "min", "argmax", "argmin", "stats",
        "scan", "any", "squares", "final", "blocks"}},
      {K::other, "helper around a conv or sort", {"offsets", "winograd", "sort", "fft"}},
      {K::elementwise,
       "elementwise",
       {"map", "elementwise", "fill", "convert", "cast", "scale", "unscale", "sgd", "adam", "dropout", "broadcast",
        "iota", "finish"}}};
  return kClasses;
}

bool layout_name(std::string_view w) {
  return w == "nchw" || w == "nhwc" || w == "nc" || w == "chw" || w == "hwc" || w == "ncdhw" || w == "ndhwc";
}

// The kind a list of words names through the vocabulary ("nchw to nhwc" is a layout
// change); K::unknown when none.
K vocabulary_kind(const std::vector<std::string>& ws, Why& why) {
  for (std::size_t i = 0; i + 2 < ws.size(); ++i) {
    if (layout_name(ws[i]) && ws[i + 1] == "to" && layout_name(ws[i + 2])) {
      why.add(quoted(ws[i] + " to " + ws[i + 2]) + ": layout change");
      return K::layout;
    }
  }
  std::vector<std::string> all = ws;
  for (std::size_t i = 0; i + 1 < ws.size(); ++i) all.push_back(ws[i] + ws[i + 1]);  // "soft max" -> softmax
  for (const auto& cls : vocabulary()) {
    for (const auto& w : all) {
      const bool reduce_suffix = cls.kind == K::reduction && w.size() > 6 && w.substr(w.size() - 6) == "reduce";
      if (reduce_suffix || std::find(cls.words.begin(), cls.words.end(), w) != cls.words.end()) {
        why.add(quoted(w) + ": " + cls.what);
        return cls.kind;
      }
    }
  }
  return K::unknown;
}

// ---------------------------------------------------------------------------------
// C++ names: "void ns::(anonymous namespace)::kernel<__half, int=3>(args)"

struct CxxName {
  std::vector<std::string> namespaces;  // outermost first, without template arguments
  std::string identifier;
  std::string template_args;  // inside the identifier's <...>; to the end where cut short
  bool cxx = false;           // any C++ syntax at all
};

CxxName parse_cxx(std::string_view s) {
  CxxName n;
  s = trim(s);
  if (s.substr(0, 5) == "void ") {
    s.remove_prefix(5);
    n.cxx = true;
  }
  static constexpr std::string_view kAnon = "(anonymous namespace)";
  // The parameter list starts at the first '(' outside <...> that is no anonymous namespace.
  int depth = 0;
  std::size_t end = s.size();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') {
      ++depth;
    } else if (s[i] == '>') {
      if (depth > 0) --depth;
    } else if (s[i] == '(' && depth == 0) {
      if (s.substr(i, kAnon.size()) == kAnon) {
        i += kAnon.size() - 1;
        continue;
      }
      end = i;
      n.cxx = true;
      break;
    }
  }
  const std::string_view q = trim(s.substr(0, end));
  std::vector<std::string_view> parts;
  depth = 0;
  int paren = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < q.size(); ++i) {
    const char c = q[i];
    if (c == '<') ++depth;
    if (c == '>' && depth > 0) --depth;
    if (c == '(') ++paren;
    if (c == ')' && paren > 0) --paren;
    if (depth == 0 && paren == 0 && c == ':' && i + 1 < q.size() && q[i + 1] == ':') {
      parts.push_back(q.substr(start, i - start));
      start = i + 2;
      ++i;
      n.cxx = true;
    }
  }
  const std::string_view last = q.substr(start);
  const std::size_t lt = last.find('<');
  if (lt == std::string_view::npos) {
    n.identifier = std::string(trim(last));
  } else {
    n.cxx = true;
    n.identifier = std::string(trim(last.substr(0, lt)));
    const std::size_t gt = last.rfind('>');
    n.template_args = std::string(gt != std::string_view::npos && gt > lt ? last.substr(lt + 1, gt - lt - 1)
                                                                          : last.substr(lt + 1));
  }
  for (const auto part : parts) {
    const std::string_view p = trim(part.substr(0, part.find('<')));
    if (!p.empty() && p != kAnon) n.namespaces.emplace_back(p);
  }
  return n;
}

// Top-level template arguments, split at commas outside <...>, (...) and {...}.
std::vector<std::string_view> template_arguments(std::string_view args) {
  std::vector<std::string_view> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const char c = args[i];
    if (c == '<' || c == '(' || c == '{') ++depth;
    if ((c == '>' || c == ')' || c == '}') && depth > 0) --depth;
    if (c == ',' && depth == 0) {
      out.push_back(trim(args.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (!trim(args.substr(start)).empty()) out.push_back(trim(args.substr(start)));
  return out;
}

// The element types a template argument list names (C++ spellings of CUDA, PyTorch and
// CUTLASS types), each with the spelling that named it.
std::vector<std::pair<P, std::string>> element_types(std::string_view args) {
  static constexpr std::pair<std::string_view, P> kTypes[] = {
      {"__half", P::f16},          {"half", P::f16},           {"Half", P::f16},          {"half_t", P::f16},
      {"__nv_bfloat16", P::bf16},  {"BFloat16", P::bf16},      {"bfloat16_t", P::bf16},   {"tfloat32_t", P::tf32},
      {"float", P::f32},           {"double", P::f64},         {"__nv_fp8_e4m3", P::fp8}, {"__nv_fp8_e5m2", P::fp8},
      {"Float8_e4m3fn", P::fp8},   {"Float8_e5m2", P::fp8},    {"float_e4m3_t", P::fp8},  {"float_e5m2_t", P::fp8},
      {"int8_t", P::int8},         {"float_e2m1_t", P::fp4},   {"__nv_fp4_e2m1", P::fp4}, {"Float4_e2m1fn_x2", P::fp4}};
  std::vector<std::pair<P, std::string>> out;
  std::string cur;
  auto flush = [&] {
    const std::size_t colon = cur.rfind(':');
    const std::string_view name = std::string_view(cur).substr(colon == std::string::npos ? 0 : colon + 1);
    for (const auto& [spelling, p] : kTypes)
      if (name == spelling) out.emplace_back(p, cur);
    cur.clear();
  };
  for (char c : args) {
    if (is_alpha(c) || is_digit(c) || c == '_' || c == ':') {
      cur += c;
    } else {
      flush();
    }
  }
  flush();
  return out;
}

// Words naming the MMA instructions ("Ampere_hmma_fp32_traits", "MmaTensorOp") or CUDA-core
// arithmetic ("MmaSimt", "ffma") in a C++ name.
TC instruction_words(const std::vector<std::string>& ws, Why& why) {
  bool mma = false, fma = false;
  std::string mma_word, fma_word;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const std::string& w = ws[i];
    const std::string pair = i + 1 < ws.size() ? w + ws[i + 1] : std::string();
    for (std::string_view m : {"hmma", "imma", "dmma", "bmma", "hgmma", "igmma", "qgmma", "wgmma", "wmma"}) {
      if (w == m) {
        mma = true;
        mma_word = w;
      }
    }
    if (pair == "tensorop") {
      mma = true;
      mma_word = pair;
    }
    if (fma_instruction(w)) {
      fma = true;
      fma_word = w;
    }
  }
  if (mma && fma) {
    why.add(quoted(mma_word) + " and " + quoted(fma_word) + ": both tensor-core and CUDA-core words");
    return TC::unknown;
  }
  if (mma) why.add(quoted(mma_word) + ": MMA instruction");
  if (fma) why.add(quoted(fma_word) + ": CUDA-core arithmetic");
  return mma ? TC::yes : fma ? TC::no : TC::unknown;
}

KernelClass classify_cxx_or_plain(const CxxName& n, Why& why) {
  KernelClass r;
  const bool own = !n.namespaces.empty() && n.namespaces.front() == "ampcheck";

  // A wrapper around a library kernel: cutlass::Kernel<cutlass_80_tensorop_...>.
  for (const auto arg : template_arguments(n.template_args)) {
    const std::size_t colon = arg.rfind("::");
    const std::string_view inner = colon == std::string_view::npos ? arg : arg.substr(colon + 2);
    if (inner.find_first_of("<>(), ") != std::string_view::npos) continue;
    Why inner_why;
    if (read_procedural(inner, r, inner_why)) {
      why.add(n.identifier + "<" + std::string(inner) + ">: the wrapped kernel's name");
      why.add(inner_why.text);
      return r;
    }
  }
  // The identifier itself may be a library name ("void sm80_xmma_gemm_...(...)").
  if (read_procedural(n.identifier, r, why)) return r;

  const auto tokens = underscore_tokens(n.identifier);
  const auto ws = words(n.identifier);

  // [flash] FlashAttention 2's kernels, by identifier; the element type from the traits.
  if (!tokens.empty() && tokens[0] == "flash" && tokens.size() > 1 && (tokens[1] == "fwd" || tokens[1] == "bwd")) {
    const auto types = element_types(n.template_args);
    std::set<P> distinct;
    for (const auto& [p, spelling] : types)
      if (p != P::f32) distinct.insert(p);
    const bool helper_combine = std::find(tokens.begin(), tokens.end(), "combine") != tokens.end();
    const bool helper_convert = std::find(tokens.begin(), tokens.end(), "convert") != tokens.end();
    const bool helper_dot = std::find(tokens.begin(), tokens.end(), "dot") != tokens.end();
    if (helper_combine || helper_dot) {
      r.kind = K::reduction;
      r.tensor_cores = TC::no;
      why.add(quoted(n.identifier) + ": FlashAttention's reduction of partial results, no MMA");
    } else if (helper_convert) {
      r.kind = K::elementwise;
      r.tensor_cores = TC::no;
      why.add(quoted(n.identifier) + ": FlashAttention's conversion helper, no MMA");
    } else {
      if (distinct.size() == 1) {
        r.input = *distinct.begin();
        why.add("FlashAttention traits name " + std::string(precision_name(r.input)));
      }
      r.kind = K::attention;
      r.accumulate = P::f32;
      why.add(quoted(n.identifier) + ": FlashAttention 2, f32 accumulators (ElementAccum)");
      if (r.input == P::f16 || r.input == P::bf16) {
        r.tensor_cores = TC::yes;
        why.add("its GEMMs are mma.sync instructions (FlashAttention 2 needs sm80)");
      }
    }
    return r;
  }

  // Element types among the template arguments: one precision, or ambiguous (a multiply
  // kernel's narrow type and float are read below, once the kind is known).
  std::set<P> distinct;
  std::vector<std::pair<P, std::string>> types;
  if (!own) {
    types = element_types(n.template_args);
    for (const auto& [p, spelling] : types) distinct.insert(p);
    if (distinct.size() == 1) {
      r.input = *distinct.begin();
      why.add("template argument " + quoted(types.front().second) + ": " + precision_name(r.input));
    }
  }

  // A core in the identifier ("implicit_convolveNd_sgemm"): the accumulator and, by its
  // shape, tensor cores. The omitted-operand rule of procedural names does not apply:
  // these names carry their types as template arguments.
  std::optional<Core> core;
  for (const auto& tok : tokens) {
    if ((core = parse_core(tok))) {
      r.accumulate = core->accumulate;
      r.kind = core->kind;
      why.add(quoted(tok) + ": " + core_text(*core));
      break;
    }
  }
  // The kind from the identifier's words: a convolution (an implicit-GEMM one too), a
  // GEMM or GEMV, then the vocabulary. A reduction that finishes a convolution's pass
  // (cudnn's reduce_wgrad_nchw_helper) is a reduction: it adds partial results.
  bool conv = false, gemm = false, gemv = false, direct = false, reduces = false;
  K direction = K::conv;
  // A helper that computes a convolution's offsets (cask_cudnn::computeWgradOffsetsKernel)
  // names the pass it serves, not what it does.
  const bool helper = std::find(ws.begin(), ws.end(), "offsets") != ws.end();
  for (const auto& ns : n.namespaces)
    for (const auto& w : words(ns))
      if (w == "gemv" || w == "gemvx") gemv = true;
  if (n.template_args.find("cublasGemv") != std::string::npos &&
      std::find(ws.begin(), ws.end(), "kernel") != ws.end() && ws.size() <= 2)
    gemv = true;  // cuBLAS's GEMV, its namespace cut off (Nsight Compute's short names)
  for (const auto& w : ws) {
    if (helper) break;
    if (w == "conv" || w == "convolve" || w == "convolution" || w == "fprop" || w == "dgrad" || w == "wgrad")
      conv = true;
    if (w == "gemm" || w == "matmul") gemm = true;
    if (w == "gemv" || w == "gemvx" || w == "gemmk") gemv = true;
    if (w == "direct") direct = true;
    if (w == "reduce" || w == "reduction") reduces = true;
    if (w == "fprop") direction = K::conv_fprop;
    if (w == "dgrad") direction = K::conv_dgrad;
    if (w == "wgrad") direction = K::conv_wgrad;
  }
  if (reduces && (conv || gemm)) {
    r.kind = K::reduction;
    why.add("identifier names a reduction of a convolution's or GEMM's partial results");
  } else if (gemv && !conv) {
    r.kind = K::gemv;
    why.add(std::find(ws.begin(), ws.end(), "gemmk") != ws.end()
                ? "'gemmk1': cuBLAS's K = 1 product (an outer product), memory-bound like a GEMV"
                : "names a GEMV (matrix-vector product)");
  } else if (conv) {
    for (const auto& w : ws)
      if (direction == K::conv && (w == "fwd" || w == "forward")) direction = K::conv_fprop;
    r.kind = direction;
    why.add(std::string("identifier names a convolution: ") + kind_name(r.kind));
  } else if (gemm && r.kind == K::unknown) {
    r.kind = K::gemm;
    why.add("identifier names a GEMM");
  } else if (r.kind == K::unknown) {
    r.kind = vocabulary_kind(ws, why);
    // Namespaces say what a bare "kernel" does only through the same vocabulary
    // (ampcheck::kernels::cuda::pool::adaptive_forward_kernel): never gemm or conv.
    for (auto ns = n.namespaces.rbegin(); r.kind == K::unknown && ns != n.namespaces.rend(); ++ns)
      r.kind = vocabulary_kind(words(*ns), why);
  }

  // [cuBLAS/cuDNN templates] a multiply kernel over one narrow type and float.
  if (distinct.size() > 1) {
    const bool narrow_and_float = distinct.size() == 2 && distinct.count(P::f32) == 1 &&
                                  (distinct.count(P::f16) == 1 || distinct.count(P::bf16) == 1);
    std::string listed;
    for (const P p : distinct) listed += (listed.empty() ? "" : " and ") + std::string(precision_name(p));
    // Only where the library's convention is known: cuBLAS's, cuBLASLt's, cuDNN's and
    // CUTLASS's templates; anyone else's template order says nothing.
    const std::string_view ns = n.namespaces.empty() ? std::string_view() : std::string_view(n.namespaces.front());
    const bool library = ns == "cudnn" || ns == "cublas" || ns == "cublasLt" || ns == "cutlass" ||
                         n.template_args.find("cublas") != std::string::npos;
    if (narrow_and_float && library && multiplies(r.kind)) {
      r.input = distinct.count(P::f16) ? P::f16 : P::bf16;
      if (r.accumulate == P::unknown) r.accumulate = P::f32;
      why.add("template arguments name " + listed + ": a multiply kernel takes the " + precision_name(r.input) +
              " operands and computes in f32");
    } else {
      why.add("template arguments name " + listed + ": input ambiguous");
    }
  }

  // Tensor cores.
  if (own) {
    r.tensor_cores = TC::no;
    why.add("the project's own kernel (namespace ampcheck): no MMA instruction");
    return r;
  }
  if (r.kind == K::gemv) {
    r.tensor_cores = TC::no;
    why.add("a matrix-vector product: no MMA instruction");
    return r;
  }
  if (direct && !core) {
    r.tensor_cores = TC::no;
    why.add("'direct': a direct convolution, no implicit GEMM and no MMA instruction");
    return r;
  }
  std::vector<std::string> all_words = ws;
  const auto arg_words = words(n.template_args);
  all_words.insert(all_words.end(), arg_words.begin(), arg_words.end());
  const TC named = instruction_words(all_words, why);
  if (named != TC::unknown) {
    r.tensor_cores = named;
  } else if (core) {
    r.tensor_cores = core->shape.empty() ? TC::no : TC::yes;
  } else if (r.kind == K::elementwise || r.kind == K::reduction || r.kind == K::layout || r.kind == K::other) {
    r.tensor_cores = TC::no;
    why.add(std::string(kind_name(r.kind)) + " kernel: no matrix multiply");
  }
  if (!tokens.empty() && arch_of(tokens.front()) != 0 && arch_of(tokens.front()) < kFirstTensorCoreArch) {
    r.tensor_cores = TC::no;
    why.add(tokens.front() + " predates MMA instructions");
  }
  return r;
}

// Profilers cut long names: "..." or "…" at the end.
std::string_view without_ellipsis(std::string_view s) {
  s = trim(s);
  for (std::string_view cut : {std::string_view("..."), std::string_view("\xE2\x80\xA6")}) {
    while (s.size() >= cut.size() && s.substr(s.size() - cut.size()) == cut)
      s = trim(s.substr(0, s.size() - cut.size()));
  }
  return s;
}

std::string demangled(std::string_view name) {
  if (name.substr(0, 2) != "_Z") return {};
  int status = 0;
  const std::string copy(name);
  const std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(copy.c_str(), nullptr, nullptr, &status),
                                                        &std::free);
  return status == 0 && out ? std::string(out.get()) : std::string();
}

bool decided(const KernelClass& r) {
  return r.input != P::unknown || r.accumulate != P::unknown || r.tensor_cores != TC::unknown || r.kind != K::unknown;
}

// ---------------------------------------------------------------------------------
// Notes (kernels/kernel_note.h), "<what>: <clause>, <clause>, ..."

std::vector<std::string_view> split(std::string_view s, std::string_view sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (std::size_t at = s.find(sep); at != std::string_view::npos; at = s.find(sep, start)) {
    out.push_back(trim(s.substr(start, at - start)));
    start = at + sep.size();
  }
  out.push_back(trim(s.substr(start)));
  return out;
}

std::vector<std::string> space_words(std::string_view s) {
  std::vector<std::string> out;
  for (const auto w : split(s, " "))
    if (!w.empty()) out.emplace_back(w);
  return out;
}

// [cuBLAS API] a compute type, with or without its CUBLAS_COMPUTE_ prefix.
struct Compute {
  P accumulate = P::unknown;
  std::optional<P> operands;  // a FAST_ type: f32 operands rounded to it
};
std::optional<Compute> cublas_compute(std::string_view c) {
  if (c.substr(0, 15) == "CUBLAS_COMPUTE_") c.remove_prefix(15);
  Compute out;
  if (c.substr(0, 3) == "16F") out.accumulate = P::f16;
  else if (c.substr(0, 3) == "32F") out.accumulate = P::f32;
  else if (c.substr(0, 3) == "64F") out.accumulate = P::f64;
  else if (c.substr(0, 3) == "32I") out.accumulate = P::int32;
  else return std::nullopt;
  if (c == "32F_FAST_TF32") out.operands = P::tf32;
  if (c == "32F_FAST_16F") out.operands = P::f16;
  if (c == "32F_FAST_16BF") out.operands = P::bf16;
  return out;
}

KernelClass classify_cublaslt_note(const std::vector<std::string_view>& clauses, Why& why) {
  KernelClass r;
  r.kind = K::gemm;
  why.add("cuBLASLt note: gemm");
  std::optional<P> a, b;
  for (const auto clause : clauses) {
    const auto w = space_words(clause);
    if (w.size() >= 4 && w[0] == "A" && w[2] == "B") {
      a = type_token(lower(w[1]));
      b = type_token(lower(w[3]));
    } else if (w.size() == 2 && w[0] == "compute") {
      if (const auto c = cublas_compute(w[1])) {
        r.accumulate = c->accumulate;
        why.add("compute " + w[1] + ": accumulator " + precision_name(r.accumulate));
        if (c->operands && a == P::f32 && b == P::f32) {
          a = b = c->operands;
          why.add(std::string("f32 operands rounded to ") + precision_name(*c->operands));
        }
      }
    } else if (w.size() == 3 && w[0] == "tensor" && w[1] == "cores") {
      r.tensor_cores = w[2] == "yes" ? TC::yes : w[2] == "no" ? TC::no : TC::unknown;
      why.add("tensor cores " + w[2] + " (the algorithm's TENSOR_OP numerical flag)");
    }
  }
  if (a && b && *a == *b) {
    r.input = *a;
    why.add(std::string("A and B ") + precision_name(r.input));
  } else if (a && b) {
    why.add("A and B differ: input not one precision");
  }
  return r;
}

KernelClass classify_cudnn_note(std::string_view pass, const std::vector<std::string_view>& clauses, Why& why) {
  KernelClass r;
  // conv.cu's pass names.
  r.kind = pass == "fwd"          ? K::conv_fprop
           : pass == "bwd data"   ? K::conv_dgrad
           : pass == "bwd filter" ? K::conv_wgrad
                                  : K::conv;
  why.add("cuDNN " + std::string(pass) + ": " + kind_name(r.kind));
  if (!clauses.empty()) why.add("algorithm " + std::string(clauses.front()));
  std::optional<P> data;
  enum class Math { unknown, fma, tensor_op, tensor_op_conversion, default_math } math = Math::unknown;
  for (const auto clause : clauses) {
    const auto w = space_words(clause);
    if (w.size() == 2 && w[1] == "data") data = type_token(w[0]);
    if (w.size() == 2 && w[1] == "compute") {
      if (const auto p = type_token(w[0])) r.accumulate = *p;
    }
    if (clause.substr(0, 8) == "FMA math") math = Math::fma;
    if (clause == "tensor-op math") math = Math::tensor_op;
    if (clause == "tensor-op math with conversion") math = Math::tensor_op_conversion;
    if (clause == "default math") math = Math::default_math;
  }
  if (r.accumulate != P::unknown) why.add(std::string("compute ") + precision_name(r.accumulate));
  // [cuDNN] what the math type allows.
  switch (math) {
    case Math::fma:
      r.tensor_cores = TC::no;
      why.add("FMA math: FMA kernels only");
      if (data) r.input = *data;
      break;
    case Math::tensor_op:
    case Math::default_math:
      why.add(math == Math::tensor_op ? "tensor-op math permits tensor cores: the kernel name decides"
                                      : "default math: tensor cores (TF32) permitted on sm80 and later");
      if (data == P::f32) {
        why.add("f32 data may run as TF32");
      } else if (data) {
        r.input = *data;
      }
      break;
    case Math::tensor_op_conversion:
      why.add("tensor-op math with conversion: operands may be rounded to f16/bf16");
      break;
    case Math::unknown:
      why.add("no math type named");
      if (data && data != P::f32) r.input = *data;
      break;
  }
  if (r.input != P::unknown) why.add(std::string(precision_name(r.input)) + " data");
  return r;
}

// The project's own kernels note their mechanism first: "CUDA map kernel", "CUDA kernel,
// one thread per output", "CUB block reduce per row", "cub::DeviceRadixSort ...".
bool own_mechanism(std::string_view clause) {
  return clause.substr(0, 5) == "CUDA " || clause.substr(0, 4) == "CUB " || clause.substr(0, 5) == "cub::";
}

KernelClass classify_own_note(std::string_view what, const std::vector<std::string_view>& clauses, Why& why) {
  KernelClass r;
  const std::string_view mechanism = clauses.front();
  why.add(quoted(mechanism) + ": the project's own kernel, no MMA instruction");
  r.tensor_cores = TC::no;
  bool one_per_output = false;
  for (const auto clause : clauses) {
    const auto w = space_words(clause);
    if (w.size() == 2 && w[1] == "compute") {
      if (const auto p = type_token(w[0])) {
        r.accumulate = *p;
        why.add(std::string("compute ") + precision_name(r.accumulate));
      }
    }
    if (clause.substr(0, 15) == "one thread per ") one_per_output = true;
  }
  if (mechanism.find("map kernel") != std::string_view::npos) {
    r.kind = K::elementwise;
    why.add("map kernel: elementwise");
  } else if (mechanism.find("block reduce") != std::string_view::npos || one_per_output) {
    r.kind = K::reduction;
    why.add(one_per_output ? "one thread per output line: reduction" : "block reduce: reduction");
  } else {
    // The op's name and pass, without the parenthesis that says how ("avg_pool2d backward
    // (gather, no atomics)" is pooling, not a gather).
    r.kind = vocabulary_kind(words(what.substr(0, what.find('('))), why);
    if (r.kind == K::unknown) r.kind = vocabulary_kind(words(mechanism), why);
    if (r.kind == K::unknown) r.kind = K::other;
  }
  return r;
}

}  // namespace

KernelClass classify_kernel_name(std::string_view name) {
  Why why;
  std::string_view s = without_ellipsis(name);
  if (s.empty()) return KernelClass{P::unknown, P::unknown, TC::unknown, K::unknown, "empty name"};
  const std::string unmangled = demangled(s);
  if (!unmangled.empty()) {
    why.add("demangled");
    s = unmangled;
  }
  KernelClass r;
  if (s.find_first_of(" :<>(),") == std::string_view::npos && read_procedural(s, r, why)) {
    r.why = why.text;
    return r;
  }
  r = classify_cxx_or_plain(parse_cxx(s), why);
  if (!decided(r)) why.add("no grammar fits");
  r.why = why.text;
  return r;
}

KernelClass classify_kernel_note(std::string_view note) {
  Why why;
  note = trim(note);
  const std::size_t colon = note.find(": ");
  if (note.empty() || colon == std::string_view::npos)
    return KernelClass{P::unknown, P::unknown, TC::unknown, K::unknown, "not a kernel note ('what: how')"};
  const std::string_view what = trim(note.substr(0, colon));
  const auto clauses = split(note.substr(colon + 2), ", ");
  KernelClass r;
  if (what == "cublasLt" || what == "cublas") {
    r = classify_cublaslt_note(clauses, why);
  } else if (what.substr(0, 6) == "cuDNN ") {
    r = classify_cudnn_note(what.substr(6), clauses, why);
  } else if (own_mechanism(clauses.front())) {
    r = classify_own_note(what, clauses, why);
  } else {
    why.add("no note grammar fits " + quoted(what));
  }
  r.why = why.text;
  return r;
}

std::vector<KernelClass> classify_kernel_notes(std::string_view joined) {
  std::vector<KernelClass> out;
  if (trim(joined).empty()) return out;
  for (const auto note : split(joined, "; ")) out.push_back(classify_kernel_note(note));
  return out;
}

std::string kernel_label(std::string_view name) {
  std::string s(name);
  int depth = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>' && depth > 0) --depth;
    if (s[i] == '(' && depth == 0 && s.compare(i, 21, "(anonymous namespace)") != 0) {
      s.resize(i);
      break;
    }
  }
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  constexpr std::size_t kMax = 140;
  if (s.size() > kMax) s = s.substr(0, kMax - 3) + "...";
  return s;
}


const char* precision_name(KernelPrecision p) {
  switch (p) {
    case P::unknown: return "unknown";
    case P::f16: return "f16";
    case P::bf16: return "bf16";
    case P::tf32: return "tf32";
    case P::f32: return "f32";
    case P::f64: return "f64";
    case P::int8: return "int8";
    case P::int32: return "int32";
    case P::fp8: return "fp8";
    case P::fp4: return "fp4";
  }
  return "unknown";
}

const char* tensor_cores_name(TensorCores t) {
  switch (t) {
    case TC::unknown: return "unknown";
    case TC::yes: return "yes";
    case TC::no: return "no";
  }
  return "unknown";
}

const char* kind_name(KernelKind k) {
  switch (k) {
    case K::unknown: return "unknown";
    case K::gemm: return "gemm";
    case K::gemv: return "gemv";
    case K::conv_fprop: return "conv fprop";
    case K::conv_dgrad: return "conv dgrad";
    case K::conv_wgrad: return "conv wgrad";
    case K::conv: return "conv";
    case K::attention: return "attention";
    case K::elementwise: return "elementwise";
    case K::reduction: return "reduction";
    case K::layout: return "layout";
    case K::other: return "other";
  }
  return "unknown";
}

bool multiplies_matrices(KernelKind k) {
  return k == K::gemm || k == K::conv_fprop || k == K::conv_dgrad || k == K::conv_wgrad || k == K::conv ||
         k == K::attention;
}

bool multiplies(KernelKind k) { return multiplies_matrices(k) || k == K::gemv; }

}  // namespace ampcheck::inspector
