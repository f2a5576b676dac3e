// The kernel classifier (inspector/kernel_class.h): a kernel's name read through the table of
// kernel families (inspector/kernel_families.cpp, which cites the source of each rule), and
// the project's own kernel notes read clause by clause.
//
// Sources of the notes' rules:
//   [cuDNN]    cudnnMathType_t: TENSOR_OP_MATH permits tensor cores, FMA_MATH is
//              "restricted to only kernels that use FMA instructions", DEFAULT_MATH permits
//              TF32 on A100 and later.
//   [cuBLAS API] cublasComputeType_t: 16F, 32F, 64F, 32I, 32F_FAST_16F / _16BF / _TF32.
#include "inspector/kernel_class.h"

#include <cxxabi.h>  // abi::__cxa_demangle: CUPTI hands mangled names

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inspector/kernel_grammar.h"

namespace ampcheck::inspector {
namespace {

using namespace grammar;

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

namespace {

// The text the families read: the profiler's "..." cut off, a mangled name demangled.
std::string prepared(std::string_view name, Why& why) {
  const std::string_view s = without_ellipsis(name);
  std::string unmangled = demangled(s);
  if (unmangled.empty()) return std::string(s);
  why.add("demangled");
  return unmangled;
}

}  // namespace

KernelClass classify_kernel_name(std::string_view name) {
  Why why;
  const std::string s = prepared(name, why);
  if (s.empty()) return KernelClass{P::unknown, P::unknown, TC::unknown, K::unknown, "empty name"};
  KernelClass r;
  read_by_families(read_name(s), r, why);
  if (!decided(r)) why.add("no grammar fits");
  r.why = why.text;
  return r;
}

namespace grammar {

const Family* family_of(std::string_view kernel_name) {
  Why why;
  const std::string s = prepared(kernel_name, why);
  KernelClass r;
  return s.empty() ? nullptr : read_by_families(read_name(s), r, why);
}

}  // namespace grammar

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
