// The readers of the kernel-name grammars (inspector/kernel_grammar.h). Each reads what its
// grammar says of a name and nothing more; the table in kernel_families.cpp says which
// reader a family's names go to, and cites the source of each grammar (the [tags] below).
#include <algorithm>
#include <set>

#include "inspector/kernel_grammar.h"

namespace ampcheck::inspector::grammar {
namespace {

std::string sm_text(int arch) { return arch ? ", sm" + std::to_string(arch) : std::string(); }

// The last architecture word among tokens ("sm100f", "sm80"), or 0.
int last_arch(const std::vector<std::string>& t) {
  int arch = 0;
  for (const auto& w : t)
    if (arch_of(w) != 0) arch = arch_of(w);
  return arch;
}

// Tensor cores where the operand formats say it: tf32, fp8 and fp4 exist only as operands of
// the tensor cores' MMA instructions [PTX].
bool only_on_tensor_cores(P p) { return p == P::tf32 || p == P::fp8 || p == P::fp4; }

// The element types named among a library template's arguments, read with the library
// convention [cuBLAS/cuDNN templates]: one type is the operands'; f16 or bf16 beside float is
// the narrow operands with float as the compute type. Returns the distinct types.
std::set<P> template_operands(const CxxName& n, KernelClass& r, Why& why) {
  const auto types = element_types(n.template_args);
  std::set<P> distinct;
  for (const auto& [p, spelling] : types) distinct.insert(p);
  if (distinct.size() == 1) {
    r.input = *distinct.begin();
    why.add("template argument " + quoted(types.front().second) + ": " + precision_name(r.input));
  } else if (distinct.size() > 1) {
    const bool narrow_and_float = distinct.size() == 2 && distinct.count(P::f32) == 1 &&
                                  (distinct.count(P::f16) == 1 || distinct.count(P::bf16) == 1);
    std::string listed;
    for (const P p : distinct) listed += (listed.empty() ? "" : " and ") + std::string(precision_name(p));
    if (narrow_and_float) {
      r.input = distinct.count(P::f16) ? P::f16 : P::bf16;
      why.add("template arguments name " + listed + ": the library's multiply kernels take the " +
              precision_name(r.input) + " operands and compute in float");
    } else {
      why.add("template arguments name " + listed + ": input ambiguous");
    }
  }
  return distinct;
}

// The parameter list's pointers to element types ("matmul_k(float*, float*, float*, int)"):
// the operand type where every floating-point pointer agrees. Says nothing of the arithmetic.
void parameter_operands(const CxxName& n, KernelClass& r, Why& why) {
  std::set<P> distinct;
  std::string first;
  for (const auto param : template_arguments(n.params)) {
    if (const auto t = pointee_type(param)) {
      if (first.empty()) first = t->second;
      distinct.insert(t->first);
    }
  }
  if (distinct.size() == 1) {
    r.input = *distinct.begin();
    why.add("every floating-point pointer in the parameter list is " + quoted(first) + ": " +
            precision_name(r.input) + " operands (its signature says nothing of its arithmetic)");
  } else if (distinct.size() > 1) {
    why.add("the parameter list's floating-point pointers differ: input ambiguous");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------
// [xmma] sm<NN>_xmma_<op>..._<pair>_<pair>_<type>_..._<instruction>

bool read_xmma(const Name& n, KernelClass& r, Why& why) {
  const auto& t = n.tokens;
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
  if (arch < kFirstTensorCoreArch) {
    r.tensor_cores = TC::no;
    why.add(t[0] + " predates MMA instructions");
    return true;
  }
  // The instruction token first; then what an sm90 name or the operand format implies.
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
  if (math && only_on_tensor_cores(*math)) {
    r.tensor_cores = TC::yes;
    why.add(std::string(precision_name(*math)) + " operands exist only on tensor cores");
    return true;
  }
  why.add("no instruction token: tensor cores not read");
  return true;
}

// ---------------------------------------------------------------------------------
// [TensorRT] trt_<arch>_xmma_<op>_<A><B><C>_<layouts>_<pass>_..._<warp MMA shape>_<stages>

bool read_trt_xmma(const Name& n, KernelClass& r, Why& why) {
  const auto& t = n.tokens;
  if (t.size() < 4 || t[0] != "trt" || arch_of(t[1]) == 0 || t[2] != "xmma") return false;
  const int arch = arch_of(t[1]);
  why.add("TensorRT xmma name, " + t[1]);
  r.kind = direction_of(t, has_word(t, "implicit") ? K::conv : K::gemm);
  why.add(std::string("operation ") + kind_name(r.kind));
  for (const auto& w : t) {
    // Three types written together: A, B and C ("f16f16f16"); one type throughout is the operands'.
    for (std::size_t a = 2; a + 4 <= w.size(); ++a) {
      const auto first = type_token(std::string_view(w).substr(0, a));
      if (!first) continue;
      const auto rest = type_pair(std::string_view(w).substr(a));
      if (rest && rest->first == *first && rest->second == *first) {
        r.input = *first;
        why.add(quoted(w) + ": A, B and C " + precision_name(r.input));
      }
    }
  }
  if (arch < kFirstTensorCoreArch) {
    r.tensor_cores = TC::no;
    why.add(t[1] + " predates MMA instructions");
    return true;
  }
  // The warp-level MMA shape among the tiles: 8x8x4 is Volta's HMMA.884, 16x8x8 and 16x8x16
  // the HMMA shapes of Turing and Ampere [PTX]; no CUDA-core kernel is tiled by them.
  for (const auto& w : t) {
    if (w == "8x8x4" || w == "16x8x8" || w == "16x8x16") {
      r.tensor_cores = TC::yes;
      why.add(quoted(w) + ": an MMA instruction's shape");
      return true;
    }
  }
  why.add("no MMA shape among the tiles: tensor cores not read");
  return true;
}

// ---------------------------------------------------------------------------------
// [cuBLAS] <arch>_[<C type>_]<core>[_<A type>]_<tile>...

namespace {

bool read_cublas_tokens(const std::vector<std::string>& t_in, KernelClass& r, Why& why) {
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
  if (!core->shape.empty() && !core->intermediate && r.input == P::f32 && arch >= kFirstTensorCoreArch) {
    // [PTX] no MMA takes f32 operands: on sm80 and later they are TF32's (cuBLAS emulates f32
    // only where asked, CUBLAS_COMPUTE_32F_EMULATED_*); before sm80 no tensor core takes them.
    if (arch >= 80) {
      r.input = P::tf32;
      why.add("f32 operands on tensor cores: TF32, the only MMA that takes f32 data");
    } else {
      r.input = P::unknown;
      why.add(t[0] + "'s tensor cores take no f32 operands: the operand type is not the accumulator's, not read");
    }
  }
  if (t[at - 1] == "fp16x2" || (at + 1 < t.size() && t[at + 1] == "fp16x2"))
    why.add("'fp16x2': f16 pairs (half2), the CUDA cores' paired f16 FMA");
  if (arch < kFirstTensorCoreArch) {
    r.tensor_cores = TC::no;
    why.add(t[0] + " predates MMA instructions");
  } else {
    r.tensor_cores = core->shape.empty() ? TC::no : TC::yes;
  }
  return true;
}

}  // namespace

bool read_cublas(const Name& n, KernelClass& r, Why& why) { return read_cublas_tokens(n.tokens, r, why); }

// [TensorRT] trt_<cuBLAS or cuDNN name>: TensorRT's own build of those kernels, same grammar.
bool read_trt(const Name& n, KernelClass& r, Why& why) {
  const auto& t = n.tokens;
  if (t.size() < 3 || t[0] != "trt" || arch_of(t[1]) == 0) return false;
  Why inner;
  if (!read_cublas_tokens(std::vector<std::string>(t.begin() + 1, t.end()), r, inner)) return false;
  why.add("TensorRT's build of a cuBLAS/cuDNN-grammar kernel ('trt_' + the library name)");
  why.add(inner.text);
  return true;
}

// ---------------------------------------------------------------------------------
// [CUTLASS] cutlass[_<NN>]_<class>_[<C type>_]<core>[_<A type>]_<tile>..., and
// cutlass3x_sm<NN>_<class>_<core>_<A>_<B>_<accumulator>_<C>_<D>_...

namespace {

// One CUTLASS 3 type word: a type ("f16"), a six-bit format, "void" (no C), or a
// block-scaled one: "<scale>x<element>" ("ue8m0xe4m3"), with the scale block's extent in
// front for blockwise scaling ("1x128f32xe4m3").
struct Cutlass3Type {
  std::optional<P> element;
  bool fp6 = false;
  bool is_void = false;
  std::string element_name, scale, block;
};

std::optional<Cutlass3Type> cutlass3_type(std::string_view w) {
  Cutlass3Type out;
  if (w == "void") {
    out.is_void = true;
    return out;
  }
  auto element = [&](std::string_view e) {
    out.element_name = std::string(e);
    if (const auto p = type_token(e)) {
      out.element = p;
      return true;
    }
    out.fp6 = fp6_token(e);
    return out.fp6;
  };
  if (element(w)) return out;
  for (std::size_t x = w.find('x'); x != std::string_view::npos; x = w.find('x', x + 1)) {
    std::string_view scale = w.substr(0, x);
    // A blockwise scale's extent: "1x128" before the scale type.
    std::size_t d = 0;
    auto extent = [&](std::size_t k) {
      return is_digit(scale[k]) || (scale[k] == 'x' && k > 0 && k + 1 < scale.size() && is_digit(scale[k + 1]));
    };
    while (d < scale.size() && extent(d)) ++d;
    const std::string_view block = scale.substr(0, d);
    scale = scale.substr(d);
    if ((scale == "ue8m0" || scale == "ue4m3" || type_token(scale)) && element(w.substr(x + 1))) {
      out.scale = std::string(scale);
      out.block = std::string(block);
      return out;
    }
  }
  return std::nullopt;
}

// OCP MX (one ue8m0 scale per 32 elements) and NVIDIA's NVFP4 (one ue4m3 scale per 16).
// An fp8, fp4 or six-bit operand: Blackwell's f8f6f4 MMA kinds take two of them mixed.
bool narrow_operand(const Cutlass3Type& t) { return t.fp6 || (t.element && narrow_format(*t.element)); }

std::string scaled_format(const Cutlass3Type& t) {
  if (t.scale == "ue8m0" && (t.element_name == "e4m3" || t.element_name == "e5m2")) return "MXFP8";
  if (t.scale == "ue8m0" && t.fp6) return "MXFP6";
  if (t.scale == "ue8m0" && t.element_name == "e2m1") return "MXFP4";
  if (t.scale == "ue4m3" && t.element_name == "e2m1") return "NVFP4";
  return {};
}

std::string scaled_text(const Cutlass3Type& t) {
  std::string s = t.element_name;
  if (!t.scale.empty()) {
    s += " scaled by " + t.scale + (t.block.empty() ? std::string() : " per " + t.block + " block");
    if (const std::string f = scaled_format(t); !f.empty()) s += " (" + f + ")";
  }
  return s;
}

void read_cutlass3_types(const std::vector<std::string>& t, std::size_t from, KernelClass& r, Why& why) {
  std::vector<Cutlass3Type> types;
  for (std::size_t j = from; j < t.size() && types.size() < 5; ++j) {
    const auto c = cutlass3_type(t[j]);
    if (!c) break;
    types.push_back(*c);
  }
  if (types.size() < 3) {
    why.add("fewer than three types after the core: precision not read");
    return;
  }
  const Cutlass3Type &a = types[0], &b = types[1];
  if (types[2].element) r.accumulate = *types[2].element;
  const bool scaled = !a.scale.empty() || !b.scale.empty();
  const std::string ab = scaled ? "A " + scaled_text(a) + ", B " + scaled_text(b) : std::string();
  if (a.element && b.element && *a.element == *b.element) {
    r.input = *a.element;
    why.add((scaled ? ab + ": elements " : "A and B ") + std::string(precision_name(r.input)) + ", accumulator " +
            precision_name(r.accumulate));
  } else if (narrow_operand(a) && narrow_operand(b)) {
    // Blackwell's f8f6f4 MMA kinds take two different narrow formats; the wider is said, as
    // for the trtllm-gen names, the other named here.
    const int wa = a.fp6 ? 6 : width_of(*a.element), wb = b.fp6 ? 6 : width_of(*b.element);
    const Cutlass3Type& wide = wa >= wb ? a : b;
    if (wide.element) r.input = *wide.element;
    why.add((scaled ? ab : "A " + a.element_name + ", B " + b.element_name) +
            ": two narrow formats in one f8f6f4 MMA, read as the wider " +
            (wide.element ? std::string(precision_name(r.input)) : std::string("(six-bit: no precision value)")) +
            ", accumulator " + precision_name(r.accumulate));
  } else if (a.fp6 && b.fp6) {
    why.add("A and B " + a.element_name + ": six-bit operands, which have no precision value here");
  } else {
    why.add("A " + scaled_text(a) + " and B " + scaled_text(b) + " differ: input not one precision");
  }
}

// [CUTLASS tf32] names that ask for the 3xTF32 emulation of f32 in so many words.
bool names_3xtf32(const std::vector<std::string>& t) {
  for (std::size_t i = 0; i < t.size(); ++i)
    if (t[i] == "3xtf32" || t[i] == "fastf32" || (t[i] == "fast" && i + 1 < t.size() && t[i + 1] == "accurate"))
      return true;
  return false;
}

}  // namespace

bool read_cutlass(const Name& n, KernelClass& r, Why& why) {
  const auto& t = n.tokens;
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
  if (t[i] == "tensorop" || t[i] == "sptensorop" || t[i] == "bstensorop" || t[i] == "bssptensorop") {
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
  why.add(std::string(v3 ? "CUTLASS 3" : "CUTLASS") + " name, class " + opclass + sm_text(arch));
  if (arch != 0 && arch < kFirstTensorCoreArch) {
    r.tensor_cores = TC::no;
    why.add("sm" + std::to_string(arch) + " predates MMA instructions");
  } else {
    r.tensor_cores = tensor_op ? TC::yes : TC::no;
    // [PTX] tcgen05.mma is sm100's family (sm100, sm103, sm110); sm120 keeps warp-level mma.
    why.add(tensor_op ? (arch >= 100 && arch < 120 ? "tensor cores (tcgen05 MMA)" : "tensor cores") : "CUDA cores");
  }
  // CUTLASS 3's core: "gemm" (3.6 and later write no shape), a core with its shape
  // ("s64x128x16gemm"), a grouped or MoE GEMM.
  auto v3_core_word = [&](std::string_view w) {
    return w == "gemm" || w == "spgemm" || w == "grouped" || w == "moe" || w == "fastaccumgemm";
  };
  if (i >= t.size() || (!parse_core(t[i]) && !(v3 && v3_core_word(t[i])) &&
                        !(i + 1 < t.size() && type_token(t[i]) && parse_core(t[i + 1])))) {
    why.add("no core after the class (cut short?): precision and kind not read");
    return true;
  }

  if (v3) {
    const std::optional<Core> core = parse_core(t[i]);
    r.kind = core ? core->kind : K::gemm;
    if (core) r.accumulate = core->accumulate;
    std::size_t j = i + 1;
    while (j < t.size() && v3_core_word(t[j])) ++j;
    read_cutlass3_types(t, j, r, why);
  } else {
    std::size_t at = i;
    std::optional<Core> core = parse_core(t[at]);
    if (!core) core = parse_core(t[++at]);  // after the output type
    r.kind = core->kind == K::conv ? direction_of(t, K::conv) : core->kind;
    r.accumulate = core->accumulate;
    if (at > i) why.add("output " + t[i]);
    why.add(quoted(t[at]) + ": " + core_text(*core));
    finish_core_input(*core, operand_after(t, at), r, why);
    if (tensor_op && r.input == P::f32 && !core->intermediate) {
      if (names_3xtf32(t)) {
        why.add("f32 operands on tensor cores, the name asks for 3xTF32: f32 emulated by three TF32 products");
      } else {
        r.input = P::tf32;
        why.add("f32 operands on tensor cores: CUTLASS's tensor-op path rounds them to TF32 before the MMA "
                "(NVIDIA/cutlass issue 466), TF32 unless 3xTF32 was asked for: the name cannot tell the 3xTF32 "
                "emulation of f32 apart (CUTLASS's generator names it alike)");
      }
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------
// [nvjet] nvjet_[sm<NN>_]<operand><accumulator><output>_... or <A><B><C><accumulator><D>_...

namespace {

std::optional<P> nvjet_letter(char c) {
  switch (c) {
    case 'h': return P::f16;
    case 't': return P::bf16;
    case 's': return P::f32;
    case 'd': return P::f64;
    case 'q': return P::fp8;
    default: return std::nullopt;
  }
}

// An accumulator is f16, f32 or f64: no MMA accumulates in bf16 or fp8.
std::optional<P> nvjet_accumulator(char c) {
  return c == 'h' || c == 's' || c == 'd' ? nvjet_letter(c) : std::nullopt;
}

// "avec32ue8m0": one ue8m0 scale per 32 elements of A (block scaling).
std::string nvjet_block_scale(std::string_view w) {
  if (w.size() < 6 || (w[0] != 'a' && w[0] != 'b') || w.substr(1, 3) != "vec") return {};
  std::size_t d = 4;
  while (d < w.size() && is_digit(w[d])) ++d;
  if (d == 4 || d == w.size()) return {};
  return std::string(1, static_cast<char>(w[0] - 'a' + 'A')) + ": one " + std::string(w.substr(d)) + " scale per " +
         std::string(w.substr(4, d - 4)) + " elements";
}

}  // namespace

bool read_nvjet(const Name& n, KernelClass& r, Why& why) {
  const auto& t = n.tokens;
  if (t.empty() || t[0] != "nvjet") return false;
  std::size_t i = 1;
  int arch = 0;
  if (i < t.size() && arch_of(t[i]) != 0) arch = arch_of(t[i++]);
  r.kind = K::gemm;
  why.add("nvjet name (cuBLAS's sm90+ GEMMs)" + sm_text(arch));
  if (i >= t.size() || (t[i].size() != 3 && t[i].size() != 5)) {
    why.add("no three- or five-letter type word: precision not read");
    return true;
  }
  const std::string& w = t[i];
  const bool five = w.size() == 5;
  const auto a = nvjet_letter(w[0]), b = nvjet_letter(five ? w[1] : w[0]);
  const auto acc = nvjet_accumulator(w[five ? 3 : 1]);
  if (!a || !b || !acc) {
    why.add(quoted(w) + ": a type letter not read (h f16, t bf16, s f32, d f64, q fp8; accumulator h, s or d)");
    return true;
  }
  r.accumulate = *acc;
  if (*a == *b) {
    r.input = *a;
    why.add(quoted(w) + ": operands " + precision_name(r.input) + ", accumulator " + precision_name(r.accumulate));
  } else {
    why.add(quoted(w) + ": A " + precision_name(*a) + " and B " + precision_name(*b) +
            " differ: input not one precision");
  }
  for (std::size_t j = i + 1; j < t.size(); ++j)
    if (const std::string s = nvjet_block_scale(t[j]); !s.empty()) why.add(s + " (block-scaled)");
  // f16/bf16 operands with an f32 accumulator: the tensor cores' instruction on sm90 (the
  // only way cuBLAS multiplies narrow types into f32 there); fp8 exists only on tensor cores;
  // f32/f64 operands say nothing of FFMA, DMMA or TF32 emulation.
  if (narrow_format(*a) || narrow_format(*b)) {
    r.tensor_cores = TC::yes;
    why.add("fp8 operands exist only on tensor cores");
  } else if ((r.input == P::f16 || r.input == P::bf16) && r.accumulate == P::f32) {
    r.tensor_cores = TC::yes;
    why.add("f16/bf16 operands into f32 on sm90+: the tensor cores' MMA (wgmma, tcgen05)");
  } else {
    why.add("operand type alone does not say tensor cores");
  }
  return true;
}

// ---------------------------------------------------------------------------------
// [trtllm-gen] bmm_<D>_<A><B>[_cast<T>]_<accumulator>_..._sm<NN>[af]

namespace {

std::optional<P> trtllm_type(std::string_view t) {
  if (t.substr(0, 2) == "mx") t.remove_prefix(2);  // block-scaled: the element type is what multiplies
  static constexpr std::pair<std::string_view, P> kTypes[] = {
      {"bfloat16", P::bf16}, {"fp16", P::f16}, {"fp32", P::f32}, {"e4m3", P::fp8},
      {"e5m2", P::fp8},      {"e2m1", P::fp4}, {"int8", P::int8}};
  for (const auto& [name, p] : kTypes)
    if (t == name) return p;
  return std::nullopt;
}

}  // namespace

bool read_trtllm(const Name& n, KernelClass& r, Why& why) {
  const auto& t = n.tokens;
  if (t.size() < 4 || (t[0] != "bmm" && t[0] != "gemm")) return false;
  const auto out = trtllm_type(t[1]);
  if (!out) return false;
  std::optional<std::pair<P, P>> ab;
  std::string a_name, b_name;
  for (std::size_t cut = 2; cut + 2 <= t[2].size() && !ab; ++cut) {
    const std::string_view ab_word = t[2];
    const auto a = trtllm_type(ab_word.substr(0, cut)), b = trtllm_type(ab_word.substr(cut));
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
  const int arch = last_arch(t);
  if (arch >= 100 || narrow_format(a) || narrow_format(b)) {
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

namespace {

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

}  // namespace

bool read_fmha(const Name& n, KernelClass& r, Why& why) {
  const auto& t = n.tokens;
  const std::string_view name = n.cxx.identifier;
  if (t.empty() || t[0].substr(0, 4) != "fmha") return false;
  int arch = last_arch(t);
  if (t[0].size() > 4) {  // fmhaSm100aKernel_QkvE4m3OBfloat16H64...
    const std::string& first = t[0];
    const std::size_t sm = first.find("sm");
    if (sm != std::string::npos) {
      std::size_t e = sm + 2;
      while (e < first.size() && is_digit(first[e])) ++e;
      arch = small_number(std::string_view(first).substr(sm + 2, e - sm - 2));
    }
    std::string q_name, o_name;
    auto q = camel_type_after(name, "Qkv", &q_name);
    if (!q) q = camel_type_after(name, "Q", &q_name);
    if (!q) return false;
    r.kind = K::attention;
    r.input = *q;
    why.add("TensorRT-LLM fmha name" + sm_text(arch) + "; " + quoted(q_name) + ": Q (and K, V) " +
            precision_name(r.input));
    if (camel_type_after(name, "O", &o_name)) why.add(quoted(o_name) + ": output");
  } else {
    // fmha_cutlassF_bf16_aligned_64x64_rf_sm80, fmha_v2_flash_attention_fp16_..._sm80_kernel
    std::optional<P> type;
    std::string spelled;
    for (std::size_t i = 1; i < t.size() && !type; ++i)
      if ((type = type_token(t[i]))) spelled = t[i];
    r.kind = K::attention;
    why.add("fused attention name (" + t[0] + "_" + (t.size() > 1 ? t[1] : std::string()) + ")" + sm_text(arch));
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
      why.add(std::string(precision_name(r.input)) + " attention GEMMs on sm" + std::to_string(arch) +
              ": MMA instructions");
    } else {
      why.add("no sm target in the name: tensor cores not read");
    }
  } else {
    why.add(std::string(precision_name(r.input)) + " operands: the name does not say which instruction");
  }
  return true;
}

// ---------------------------------------------------------------------------------
// [cuDNN SDPA] cudnn_generated_fort_native_sdpa_sm<NN>[_flash]_<fprop|bprop>[_<wgmma|wmma>][_f16]_knob_...

bool read_cudnn_sdpa(const Name& n, KernelClass& r, Why& why) {
  const auto& t = n.tokens;
  const bool generated = t.size() > 5 && t[0] == "cudnn" && t[1] == "generated" && t[4] == "sdpa";
  const bool flash = t.size() > 2 && arch_of(t[0]) != 0 && t[1] == "flash" && (t[2] == "fprop" || t[2] == "bprop");
  if (!generated && !flash) return false;
  const int arch = last_arch(t);
  r.kind = K::attention;
  why.add(std::string("cuDNN's fused scaled-dot-product attention") + (has_word(t, "bprop") ? " (backward)" : "") +
          sm_text(arch));
  if (has_word(t, "f16"))
    why.add("'f16' names 16-bit operands, f16 or bf16 (a bf16 run launches ..._wgmma_f16 too): precision not read");
  else
    why.add("no element type in the name: precision not read");
  for (const auto& w : t) {
    if (w == "wgmma" || w == "wmma") {
      r.tensor_cores = TC::yes;
      why.add(quoted(w) + ": MMA instruction");
      return true;
    }
  }
  if (arch >= 80) {
    r.tensor_cores = TC::yes;
    why.add("cuDNN's SDPA takes fp16, bf16 or fp8 data only, on sm80 and later: tensor-core formats");
  } else {
    why.add("no sm target in the name: tensor cores not read");
  }
  return true;
}

// ---------------------------------------------------------------------------------
// [Inductor] triton_<poi|red|per|tem>_fused_...

bool read_triton(const Name& n, KernelClass& r, Why& why) {
  const auto& t = n.tokens;
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
      if (w == "attention") r.kind = K::attention;
    }
    why.add("'triton_tem': a torch.compile template kernel" +
            (r.kind == K::unknown ? std::string() : std::string(", ") + kind_name(r.kind)) +
            "; the name carries no element type (Inductor names a kernel by the ops it fuses), and Triton's tl.dot "
            "picks its instruction from the operand types: the launching op's recorded input types say them");
  } else {
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------
// Library names inside C++ signatures

// A wrapper around a library kernel: cutlass::Kernel2<cutlass_80_tensorop_...>.
bool read_wrapped(const Name& n, KernelClass& r, Why& why) {
  for (const auto arg : template_arguments(n.cxx.template_args)) {
    const std::size_t colon = arg.rfind("::");
    const std::string_view inner = colon == std::string_view::npos ? arg : arg.substr(colon + 2);
    if (inner.empty() || inner.find_first_of("<>(), ") != std::string_view::npos) continue;
    Why inner_why;
    KernelClass c;
    if (read_by_families(read_name(inner), c, inner_why, true) != nullptr) {
      r = c;
      why.add(n.cxx.identifier + "<" + std::string(inner) + ">: the wrapped kernel's name");
      why.add(inner_why.text);
      return true;
    }
  }
  return false;
}

// The identifier itself is a library name: "void sm80_xmma_gemm_...(...)",
// "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::...)".
bool read_named_library_kernel(const Name& n, KernelClass& r, Why& why) {
  if (n.cxx.identifier.empty() || n.cxx.identifier.find_first_of(" :<>(),") != std::string::npos) return false;
  return read_by_families(read_name(n.cxx.identifier), r, why, true) != nullptr;
}

// ---------------------------------------------------------------------------------
// [flash] FlashAttention 2: flash_fwd_kernel<Flash_fwd_kernel_traits<..., cutlass::bfloat16_t, ...>>

bool read_flash2(const Name& n, KernelClass& r, Why& why) {
  const auto& tokens = n.tokens;
  const std::string& id = n.cxx.identifier;
  if (tokens.size() < 2 || tokens[0] != "flash" || (tokens[1] != "fwd" && tokens[1] != "bwd")) return false;
  std::set<P> distinct;
  for (const auto& [p, spelling] : element_types(n.cxx.template_args))
    if (p != P::f32) distinct.insert(p);
  if (has_word(tokens, "combine") || has_word(tokens, "dot")) {
    r.kind = K::reduction;
    r.tensor_cores = TC::no;
    why.add(quoted(id) + ": FlashAttention's reduction of partial results, no MMA");
  } else if (has_word(tokens, "convert")) {
    r.kind = K::elementwise;
    r.tensor_cores = TC::no;
    why.add(quoted(id) + ": FlashAttention's conversion helper, no MMA");
  } else {
    if (distinct.size() == 1) {
      r.input = *distinct.begin();
      why.add("FlashAttention traits name " + std::string(precision_name(r.input)));
    }
    r.kind = K::attention;
    r.accumulate = P::f32;
    why.add(quoted(id) + ": FlashAttention 2, f32 accumulators (ElementAccum)");
    if (r.input == P::f16 || r.input == P::bf16) {
      r.tensor_cores = TC::yes;
      why.add("its GEMMs are mma.sync instructions (FlashAttention 2 needs sm80)");
    }
  }
  return true;
}

// [flash3] FlashAttention 3: flash::FlashAttnFwdSm90<CollectiveMainloopFwdSm90<..., Element,
// ElementAccum, ...>, CollectiveEpilogueFwd<..., ElementOut, ...>, Scheduler>, often inside
// cutlass::device_kernel<flash::enable_sm90_or_later<...>>.
bool read_flash3(const Name& n, KernelClass& r, Why& why) {
  const std::string& id = n.cxx.identifier;
  const std::size_t sm = lower(id).rfind("sm");
  if (sm == std::string::npos) return false;
  const int arch = small_number(std::string_view(id).substr(sm + 2));
  if (arch == 0) return false;
  r.kind = K::attention;
  why.add(quoted(id) + ": FlashAttention 3" + sm_text(arch));
  // The mainloop comes first among the template arguments, its Element first of its types.
  std::optional<std::pair<P, std::string>> element;
  bool accum_f32 = false;
  for (const auto& e : element_types(n.cxx.template_args)) {
    if (e.first == P::f32) accum_f32 = true;
    else if (!element) element = e;
  }
  if (element) {
    r.input = element->first;
    why.add("the mainloop's Element " + quoted(element->second) + ": " + precision_name(r.input));
  } else {
    why.add("no element type among the template arguments (cut short?): precision not read");
  }
  if (accum_f32) {
    r.accumulate = P::f32;
    why.add("ElementAccum float: f32 accumulators");
  }
  if (r.input == P::f16 || r.input == P::bf16 || r.input == P::fp8) {
    r.tensor_cores = TC::yes;
    why.add(arch >= 90 ? "its GEMMs are warpgroup MMA (wgmma) instructions" : "its GEMMs are mma.sync instructions");
  }
  return true;
}

// ---------------------------------------------------------------------------------
// A fixed reading: every member of the family the same, but for its element types.

void read_fixed(const Family& f, const Name& n, KernelClass& r, Why& why) {
  const Fixed& x = f.fixed;
  r.kind = x.kind;
  r.tensor_cores = x.tensor_cores;
  r.input = x.operands;
  r.accumulate = x.accumulate;
  why.add(std::string(f.name) + ": " + std::string(x.why));
  std::set<P> distinct;
  if (x.from_template) {
    distinct = template_operands(n.cxx, r, why);
    if (distinct.empty() && !n.cxx.params.empty()) parameter_operands(n.cxx, r, why);
  }
  if (x.float_computes && r.accumulate == P::unknown && distinct.count(P::f32) == 1 && r.input != P::unknown) {
    r.accumulate = P::f32;
    why.add("float among its template arguments: the compute type, f32 accumulation");
  }
}

// ---------------------------------------------------------------------------------
// Kernels of no library grammar: the identifier's words

namespace {

struct WordClass {
  K kind;
  const char* what;
  std::vector<std::string_view> words;
};

// The vocabulary of kernels that do not multiply matrices, by identifier word. Checked in
// this order (a max_pool kernel is pooling before it is a max; a softmax kernel is a
// normalization before it is a max).
const std::vector<WordClass>& vocabulary() {
  static const std::vector<WordClass> kClasses = {
      {K::layout,
       "data movement",
       {"transpose", "permute", "copy", "scatter", "gather", "embedding", "reformat", "reorder", "pack"}},
      {K::other, "pooling", {"pool", "pooling"}},
      {K::other, "normalization or loss", {"norm", "bn", "softmax", "entropy", "mse", "loss"}},
      // "<x>_blocks": per-block partial results (this project's naming).
      {K::reduction,
       "reduction",
       {"reduce", "reduction", "sum", "sums", "mean", "partial", "partials", "max", "min", "argmax", "argmin", "stats",
        "scan", "any", "squares", "final", "blocks"}},
      // An FFT outside cuDNN's convolutions (cuFFT): no matrix multiply.
      {K::other, "helper around a conv or sort, or an FFT", {"offsets", "sort", "fft"}},
      {K::elementwise,
       "elementwise",
       {"map", "elementwise", "fill", "convert", "cast", "scale", "unscale", "sgd", "adam", "update", "dropout",
        "broadcast", "iota", "finish", "cell"}}};
  return kClasses;
}

bool layout_name(std::string_view w) {
  return w == "nchw" || w == "nhwc" || w == "nc" || w == "chw" || w == "hwc" || w == "ncdhw" || w == "ndhwc";
}

// Words naming the MMA instructions ("Ampere_hmma_fp32_traits", "MmaTensorOp", CUTLASS 3's
// "MainloopSm100TmaUmmaWarpSpecialized", "tcgen05") or CUDA-core arithmetic ("MmaSimt", "ffma").
TC instruction_words(const std::vector<std::string>& ws, std::string_view text, Why& why) {
  bool mma = false, fma = false;
  std::string mma_word, fma_word;
  for (std::size_t i = 0; i < ws.size(); ++i) {
    const std::string& w = ws[i];
    const std::string pair = i + 1 < ws.size() ? w + ws[i + 1] : std::string();
    for (std::string_view m :
         {"hmma", "imma", "dmma", "bmma", "hgmma", "igmma", "qgmma", "wgmma", "wmma", "gmma", "umma"}) {
      if (w == m) {
        mma = true;
        mma_word = w;
      }
    }
    if (pair == "tensorop" || pair == "tcgen05") {
      mma = true;
      mma_word = pair;
    }
    if (fma_instruction(w)) {
      fma = true;
      fma_word = w;
    }
  }
  // [PTX] tcgen05.mma's block-scaled kinds, as CUTLASS's schedules and atoms spell them.
  const std::string l = lower(text);
  for (std::string_view kind : {"mxf8f6f4", "mxf4nvf4", "mxf4", "nvf4"}) {
    if (!mma && l.find(kind) != std::string::npos) {
      mma = true;
      mma_word = std::string(kind) + " (a block-scaled MMA kind)";
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

}  // namespace

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

bool read_cxx_or_plain(const Name& nm, KernelClass& r, Why& why) {
  const CxxName& n = nm.cxx;
  const auto& tokens = nm.tokens;
  const bool own = !n.namespaces.empty() && n.namespaces.front() == "ampcheck";
  const auto ws = words(n.identifier);

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
  // The kind from the identifier's words: a convolution (an implicit-GEMM one too, and
  // Winograd's transforms, which belong to their convolution), a GEMM or GEMV, then the
  // vocabulary. A reduction that finishes a convolution's pass (cudnn's
  // reduce_wgrad_nchw_helper) is a reduction: it adds partial results.
  bool conv = false, gemm = false, gemv = false, direct = false, reduces = false;
  K direction = K::conv;
  // A helper that computes a convolution's offsets (cask_cudnn::computeWgradOffsetsKernel)
  // names the pass it serves, not what it does.
  const bool helper = has_word(ws, "offsets");
  for (const auto& ns : n.namespaces)
    for (const auto& w : words(ns))
      if (w == "gemv" || w == "gemvx") gemv = true;
  if (n.template_args.find("cublasGemv") != std::string::npos && has_word(ws, "kernel") && ws.size() <= 2)
    gemv = true;  // cuBLAS's GEMV, its namespace cut off (Nsight Compute's short names)
  for (const auto& w : ws) {
    if (helper) break;
    if (w == "conv" || w == "convolve" || w == "convolution" || w == "fprop" || w == "dgrad" || w == "wgrad" ||
        w == "winograd")
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
    why.add(has_word(ws, "gemmk") ? "'gemmk1': cuBLAS's K = 1 product (an outer product), memory-bound like a GEMV"
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

  // A kernel whose template arguments named no element type: its parameter list's pointers
  // ("matmul_k(float*, float*, float*, int, int, int)"), where it may multiply (kind unknown,
  // or a multiply named); an elementwise kernel's pointers are no multiply's operands.
  if (!own && distinct.empty() && r.input == P::unknown && (r.kind == K::unknown || multiplies(r.kind)))
    parameter_operands(n, r, why);

  // Tensor cores.
  if (own) {
    r.tensor_cores = TC::no;
    why.add("the project's own kernel (namespace ampcheck): no MMA instruction");
    return true;
  }
  if (r.kind == K::gemv) {
    r.tensor_cores = TC::no;
    why.add("a matrix-vector product: no MMA instruction");
    return true;
  }
  if (direct && !core) {
    r.tensor_cores = TC::no;
    why.add("'direct': a direct convolution, no implicit GEMM and no MMA instruction");
    return true;
  }
  std::vector<std::string> all_words = ws;
  const auto arg_words = words(n.template_args);
  all_words.insert(all_words.end(), arg_words.begin(), arg_words.end());
  const TC named = instruction_words(all_words, n.identifier + "<" + n.template_args + ">", why);
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
  return true;
}

}  // namespace ampcheck::inspector::grammar
