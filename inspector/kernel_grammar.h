// The kernel classifier's insides; inspector/kernel_class.h is its interface, and nothing
// outside inspector/kernel_*.cpp includes this file.
//
//   kernel_text.cpp      a name's pieces: tokens, words, type spellings, MMA cores, the parts
//                        of a C++ signature (template arguments, parameter list, wrappers)
//   kernel_readers.cpp   one reader per naming grammar (xmma, cuBLAS, TensorRT, CUTLASS,
//                        nvjet, trtllm-gen, fused attention, Triton, C++ templates), each
//                        reading what its grammar says and declining a name it does not fit
//   kernel_families.cpp  THE TABLE: one entry per kernel family (how it is matched, the reader
//                        it calls or the reading it yields, the source the rule rests on), and
//                        the note on how to add a family
//   kernel_class.cpp     classify_kernel_name (the table, first fit wins), the kernel notes,
//                        the names of the values
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "inspector/kernel_class.h"

namespace ampcheck::inspector::grammar {

using P = KernelPrecision;
using TC = TensorCores;
using K = KernelKind;

// ---------------------------------------------------------------------------------
// Text (kernel_text.cpp)

bool is_digit(char c);
std::string lower(std::string_view s);
std::string_view trim(std::string_view s);
bool all_digits(std::string_view s);
// A short decimal number (an architecture: "80"); 0 when not one.
int small_number(std::string_view s);
// A procedural name's tokens: lower case, split at '_', empty ones (from "__") dropped.
std::vector<std::string> underscore_tokens(std::string_view s);
// An identifier's words: split at anything not a letter or digit, at camelCase humps and at
// letter/digit boundaries; lower case. "nchwToNhwcKernel" -> nchw to nhwc kernel.
std::vector<std::string> words(std::string_view s);
bool has_word(const std::vector<std::string>& ws, std::string_view w);
std::string quoted(std::string_view s);
// Whether text fits a family's pattern, case-insensitively: '*' any run of characters, '?'
// one character, '|' between alternatives ("flash_fwd_*|flash_bwd_*").
bool glob(std::string_view pattern, std::string_view text);

// The "why" text: short clauses joined with "; ".
struct Why {
  std::string text;
  void add(std::string_view s);
};

// ---------------------------------------------------------------------------------
// Element types, accumulator letters, architectures, instructions (kernel_text.cpp)

// A type as procedural names spell it: CUTLASS's DataTypeNames (f16 bf16 tf32 f32 f64 s8 u8 s32
// e4m3 e5m2 e2m1 f8 f4), the xmma tuples' (i8 i32), cuBLAS's and TensorRT's (fp16 fp16x2 bf16
// int8 int32 tf32 fp32).
std::optional<P> type_token(std::string_view t);
// Six-bit formats (e2m3, e3m2, f6): real operand formats of Blackwell's MMA with no
// KernelPrecision value; a reader names them in why and leaves the precision unknown.
bool fp6_token(std::string_view t);
// Two type names written together ("f16f32", "e4m3bf16").
std::optional<std::pair<P, P>> type_pair(std::string_view t);
// [CUTLASS] ShortDataTypeNames / [cuBLAS] gemmType_t: the letter that leads a core.
std::optional<P> accumulator_letter(char c);
// The compute capability a word names: "sm80", "sm100a", "ampere", ...; 0 when none.
int arch_of(std::string_view t);
// [PTX] no MMA instruction exists before sm_70.
constexpr int kFirstTensorCoreArch = 70;
// Bits of an operand format (fp4 4, fp8 8, ..., f64 64); 0 for unknown.
int width_of(P p);
bool narrow_format(P p);  // fp8 or fp4: Blackwell's f8f6f4 MMA kinds take them mixed
// "tensor16x8x16", "hgmma64x128x16", "sptensor16x8x32": an MMA instruction with its shape.
bool mma_instruction(std::string_view t);
// "ffma", "hfma2", "simt": CUDA-core arithmetic.
bool fma_instruction(std::string_view t);

// ---------------------------------------------------------------------------------
// The core of CUTLASS and cuBLAS names: <accumulator>[<shape>][<op>][<intermediate>]<kind>
// "s16816gemm", "h884gemm", "i8816gemm", "s1688tf32gemm", "s16816fprop", "scudnn", "sgemm",
// "gcgemm", "s64x128x16gemm" (CUTLASS 3.x writes the shape with x).

struct Core {
  P accumulate = P::unknown;
  bool complex = false;
  std::string shape;              // the MMA instruction's shape; empty: CUDA cores
  std::optional<P> intermediate;  // [CUTLASS] the MMA's operand type where it is not A's
  K kind = K::unknown;            // gemm, conv_fprop/dgrad/wgrad, conv (a cudnn core)
};
std::optional<Core> parse_core(std::string_view t);
std::string core_text(const Core& c);
// A conv direction named anywhere among tokens (fprop, dgrad, wgrad); fallback otherwise.
K direction_of(const std::vector<std::string>& t, K fallback);

// After a core, the operand type: the first type token before the tile shape.
struct Operand {
  std::optional<P> type;
  bool omitted = false;  // the tile came first: the operands are the accumulator's
  std::string token;
};
Operand operand_after(const std::vector<std::string>& t, std::size_t core_at);
void finish_core_input(const Core& core, const Operand& a, KernelClass& r, Why& why);

// ---------------------------------------------------------------------------------
// C++ names: "void ns::(anonymous namespace)::kernel<__half, int=3>(args)" (kernel_text.cpp)

struct CxxName {
  std::vector<std::string> namespaces;  // outermost first, without template arguments
  std::string identifier;
  std::string template_args;  // inside the identifier's <...>; to the end where cut short
  std::string params;         // inside the parameter list's (...); empty when none
  std::vector<std::string> wrappers;  // wrappers taken off: device_kernel, enable_sm90_or_later
  bool cxx = false;                   // any C++ syntax at all
};
CxxName parse_cxx(std::string_view s);
// Top-level template (or parameter) arguments, split at commas outside <...>, (...), {...}.
std::vector<std::string_view> template_arguments(std::string_view args);
// The element types a template argument list names (C++ spellings of CUDA, PyTorch and
// CUTLASS types), each with the spelling that named it, in order.
std::vector<std::pair<P, std::string>> element_types(std::string_view args);
// The element type a parameter points to: "float const*" -> f32, "c10::Half*" -> f16;
// nothing for a non-pointer or a type that is no element type.
std::optional<std::pair<P, std::string>> pointee_type(std::string_view param);

// ---------------------------------------------------------------------------------
// A name as the families read it (kernel_text.cpp)

struct Name {
  std::string text;                 // demangled, the profiler's "..." cut off
  bool procedural = false;          // no C++ punctuation: a library's procedural name
  std::vector<std::string> tokens;  // the identifier's '_' tokens, lower case
  CxxName cxx;                      // the C++ parts (for a procedural name: the identifier alone)
};
Name read_name(std::string_view text);

// ---------------------------------------------------------------------------------
// The readers (kernel_readers.cpp). Each reads one grammar into r and returns true, or
// declines (false, r and why untouched) so that the next family of the table is tried.

using Reader = bool (*)(const Name& n, KernelClass& r, Why& why);

bool read_xmma(const Name& n, KernelClass& r, Why& why);
bool read_trt_xmma(const Name& n, KernelClass& r, Why& why);
bool read_trt(const Name& n, KernelClass& r, Why& why);
bool read_cublas(const Name& n, KernelClass& r, Why& why);
bool read_cutlass(const Name& n, KernelClass& r, Why& why);
bool read_nvjet(const Name& n, KernelClass& r, Why& why);
bool read_trtllm(const Name& n, KernelClass& r, Why& why);
bool read_fmha(const Name& n, KernelClass& r, Why& why);
bool read_cudnn_sdpa(const Name& n, KernelClass& r, Why& why);
bool read_triton(const Name& n, KernelClass& r, Why& why);
bool read_wrapped(const Name& n, KernelClass& r, Why& why);
bool read_named_library_kernel(const Name& n, KernelClass& r, Why& why);
bool read_flash2(const Name& n, KernelClass& r, Why& why);
bool read_flash3(const Name& n, KernelClass& r, Why& why);
// The kind a list of identifier words names through the vocabulary of kernels that do not
// multiply ("nchw to nhwc": layout, "max pool": other); K::unknown when none.
K vocabulary_kind(const std::vector<std::string>& ws, Why& why);
// Any other kernel: the identifier's words (conv, gemm, gemv, the vocabulary of kernels
// that do not multiply), the element types of its template arguments or parameter list,
// instruction words. Never declines.
bool read_cxx_or_plain(const Name& n, KernelClass& r, Why& why);

// ---------------------------------------------------------------------------------
// The table (kernel_families.cpp)

// Which names a family is tried on: procedural names only (a library's name, or one found
// inside a wrapper's template arguments), C++ signatures only, or both (its pattern is
// then matched against the C++ identifier, which for a procedural name is the whole name).
enum class Form { procedural, cxx, any };

// A family whose every member reads the same, but for the element types its template
// arguments may name.
struct Fixed {
  K kind = K::unknown;
  TC tensor_cores = TC::unknown;
  P operands = P::unknown;       // what every member multiplies; unknown: see from_template
  bool from_template = false;    // the element types among the template arguments: one type,
                                 // or f16/bf16 beside float (the narrow operands, a float compute type)
  P accumulate = P::unknown;     // every member's accumulator; unknown: see float_computes
  bool float_computes = false;   // f32 where the template arguments name float (the compute type)
  std::string_view why;          // what the family is, for the why
};

struct Family {
  std::string_view name;      // how the why names the family
  Form form = Form::any;
  std::string_view pattern;   // glob on the procedural name or the C++ identifier
  std::string_view mentions;  // text the whole name must hold as well ("cudnn"); empty: none
  Reader read = nullptr;      // the grammar's reader; nullptr: the fixed reading
  Fixed fixed;
  std::string_view source;    // the source the rule rests on (kernel_families.cpp's list)
};

const std::vector<Family>& families();
// A family's fixed reading of a name (kernel_readers.cpp).
void read_fixed(const Family& f, const Name& n, KernelClass& r, Why& why);
// The reading of the first family that fits the name and accepts it, and that family; nullptr
// where none did (the last family, read_cxx_or_plain, accepts every name it is tried on).
// procedural_only: only the Form::procedural families (a name found inside a wrapper).
const Family* read_by_families(const Name& n, KernelClass& r, Why& why, bool procedural_only = false);
// The family that reads a kernel's name as classify_kernel_name reads it (kernel_class.cpp):
// the tests' guard that every family has test rows.
const Family* family_of(std::string_view kernel_name);

}  // namespace ampcheck::inspector::grammar
