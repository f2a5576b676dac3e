// A kernel name's pieces (inspector/kernel_grammar.h): tokens and words, the spellings of
// element types and architectures, the MMA cores of CUTLASS and cuBLAS names, and the parts
// of a C++ signature. The readers (kernel_readers.cpp) and the table of families
// (kernel_families.cpp) say what the pieces mean.
#include <algorithm>
#include <cctype>

#include "inspector/kernel_grammar.h"

namespace ampcheck::inspector::grammar {
namespace {

bool is_alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }
bool is_upper(char c) { return std::isupper(static_cast<unsigned char>(c)) != 0; }
bool is_lower(char c) { return std::islower(static_cast<unsigned char>(c)) != 0; }
char to_lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

bool glob_one(std::string_view p, std::string_view t) {
  // Iterative '*' matching with one backtrack point.
  std::size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || to_lower(p[pi]) == to_lower(t[ti]))) {
      ++pi;
      ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

}  // namespace

// ---------------------------------------------------------------------------------
// Text

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

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

int small_number(std::string_view s) {
  if (!all_digits(s) || s.size() > 4) return 0;
  int n = 0;
  for (char c : s) n = n * 10 + (c - '0');
  return n;
}

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

bool has_word(const std::vector<std::string>& ws, std::string_view w) {
  return std::find(ws.begin(), ws.end(), w) != ws.end();
}

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

bool glob(std::string_view pattern, std::string_view text) {
  for (std::size_t start = 0;;) {
    const std::size_t bar = pattern.find('|', start);
    if (glob_one(pattern.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start), text))
      return true;
    if (bar == std::string_view::npos) return false;
    start = bar + 1;
  }
}

void Why::add(std::string_view s) {
  if (s.empty()) return;
  if (!text.empty()) text += "; ";
  text += s;
}

// ---------------------------------------------------------------------------------
// Element types, accumulator letters, architectures, instructions

std::optional<P> type_token(std::string_view t) {
  static constexpr std::pair<std::string_view, P> kTypes[] = {
      {"f16", P::f16},   {"fp16", P::f16},  {"fp16x2", P::f16}, {"bf16", P::bf16},  {"tf32", P::tf32},
      {"f32", P::f32},   {"fp32", P::f32},  {"f64", P::f64},    {"fp64", P::f64},   {"s8", P::int8},
      {"u8", P::int8},   {"i8", P::int8},   {"int8", P::int8},  {"s32", P::int32},  {"i32", P::int32},
      {"int32", P::int32}, {"e4m3", P::fp8}, {"e5m2", P::fp8},  {"f8", P::fp8},     {"e2m1", P::fp4},
      {"f4", P::fp4}};
  for (const auto& [name, p] : kTypes)
    if (t == name) return p;
  return std::nullopt;
}

bool fp6_token(std::string_view t) { return t == "e2m3" || t == "e3m2" || t == "f6"; }

std::optional<std::pair<P, P>> type_pair(std::string_view t) {
  for (std::size_t cut = 2; cut + 2 <= t.size(); ++cut) {
    const auto a = type_token(t.substr(0, cut)), b = type_token(t.substr(cut));
    if (a && b) return std::pair{*a, *b};
  }
  return std::nullopt;
}

std::optional<P> accumulator_letter(char c) {
  switch (c) {
    case 's': return P::f32;
    case 'd': return P::f64;
    case 'h': return P::f16;
    case 'i': return P::int32;
    case 'c': return P::f32;  // complex f32
    case 'z': return P::f64;  // complex f64
    default: return std::nullopt;
  }
}

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

int width_of(P p) {
  switch (p) {
    case P::fp4: return 4;
    case P::fp8:
    case P::int8: return 8;
    case P::f16:
    case P::bf16: return 16;
    case P::tf32: return 19;
    case P::f32:
    case P::int32: return 32;
    case P::f64: return 64;
    case P::unknown: return 0;
  }
  return 0;
}

bool narrow_format(P p) { return p == P::fp8 || p == P::fp4; }

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

// ---------------------------------------------------------------------------------
// Cores

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
  // [CUTLASS] core_name()'s math operation after the shape: binary MMA's xor/and,
  // FP8's fast accumulation.
  for (std::string_view op : {"xor", "and", "fastaccum"})
    if (rest.substr(0, op.size()) == op) rest.remove_prefix(op.size());
  static constexpr std::pair<std::string_view, K> kKinds[] = {
      {"gemm", K::gemm},        {"spgemm", K::gemm},      {"cudnn", K::conv},         {"fprop", K::conv_fprop},
      {"dgrad", K::conv_dgrad}, {"wgrad", K::conv_wgrad}, {"fprop3d", K::conv_fprop}, {"dgrad3d", K::conv_dgrad},
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

K direction_of(const std::vector<std::string>& t, K fallback) {
  for (const auto& w : t) {
    if (w == "fprop") return K::conv_fprop;
    if (w == "dgrad") return K::conv_dgrad;
    if (w == "wgrad") return K::conv_wgrad;
  }
  return fallback;
}

// Words between the core and the tile (an epilogue such as "relu", cuDNN's "winograd",
// CUTLASS's iterator "optimized") are skipped. Absent with the tile in sight, the operand type
// is the accumulator's ([CUTLASS] extended_name writes it only where it differs); absent with
// the name cut short, it is not known.
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
// C++ names

namespace {

// A template kernel that only launches the template it is given: the name to read is its
// first template argument (CUTLASS's device_kernel and Kernel, FlashAttention 3's
// enable_sm90_or_later<...> guards).
bool wrapper_identifier(std::string_view id) {
  return id == "device_kernel" || id == "Kernel" || id == "Kernel2" || glob("enable_sm*", id);
}

void split_qualified(std::string_view q, CxxName& n) {
  static constexpr std::string_view kAnon = "(anonymous namespace)";
  std::vector<std::string_view> parts;
  int depth = 0, paren = 0;
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
  n.namespaces.clear();
  if (lt == std::string_view::npos) {
    n.identifier = std::string(trim(last));
    n.template_args.clear();
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
}

}  // namespace

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
  if (end < s.size()) {
    const std::string_view rest = s.substr(end + 1);
    const std::size_t close = rest.rfind(')');
    n.params = std::string(trim(close == std::string_view::npos ? rest : rest.substr(0, close)));
  }
  split_qualified(trim(s.substr(0, end)), n);
  // Take wrappers off while their first argument is itself a template.
  for (int guard = 0; guard < 8 && wrapper_identifier(n.identifier); ++guard) {
    const auto args = template_arguments(n.template_args);
    if (args.empty() || args.front().find('<') == std::string_view::npos) break;
    n.wrappers.push_back(n.identifier);
    const std::string inner(args.front());
    split_qualified(trim(inner), n);
  }
  return n;
}

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

namespace {

std::optional<P> element_spelling(std::string_view name) {
  static constexpr std::pair<std::string_view, P> kTypes[] = {
      {"__half", P::f16},         {"half", P::f16},          {"Half", P::f16},          {"half_t", P::f16},
      {"__nv_bfloat16", P::bf16}, {"BFloat16", P::bf16},     {"bfloat16_t", P::bf16},   {"tfloat32_t", P::tf32},
      {"float", P::f32},          {"double", P::f64},        {"__nv_fp8_e4m3", P::fp8}, {"__nv_fp8_e5m2", P::fp8},
      {"Float8_e4m3fn", P::fp8},  {"Float8_e5m2", P::fp8},   {"float_e4m3_t", P::fp8},  {"float_e5m2_t", P::fp8},
      {"int8_t", P::int8},        {"float_e2m1_t", P::fp4},  {"__nv_fp4_e2m1", P::fp4}, {"Float4_e2m1fn_x2", P::fp4}};
  for (const auto& [spelling, p] : kTypes)
    if (name == spelling) return p;
  return std::nullopt;
}

}  // namespace

std::vector<std::pair<P, std::string>> element_types(std::string_view args) {
  std::vector<std::pair<P, std::string>> out;
  std::string cur;
  auto flush = [&] {
    const std::size_t colon = cur.rfind(':');
    const std::string_view name = std::string_view(cur).substr(colon == std::string::npos ? 0 : colon + 1);
    if (const auto p = element_spelling(name)) out.emplace_back(*p, cur);
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

std::optional<std::pair<P, std::string>> pointee_type(std::string_view param) {
  if (param.find('*') == std::string_view::npos) return std::nullopt;
  // The words before the first '*': "float const", "const __half", "c10::Half".
  std::string_view head = trim(param.substr(0, param.find('*')));
  std::string name;
  std::size_t i = 0;
  while (i < head.size()) {
    while (i < head.size() && std::isspace(static_cast<unsigned char>(head[i])) != 0) ++i;
    std::size_t e = i;
    while (e < head.size() && std::isspace(static_cast<unsigned char>(head[e])) == 0) ++e;
    const std::string_view word = head.substr(i, e - i);
    if (!word.empty() && word != "const" && word != "volatile" && word != "__restrict__") {
      if (!name.empty()) return std::nullopt;  // two type words: "unsigned char", "long long"
      name = std::string(word);
    }
    i = e;
  }
  const std::size_t colon = name.rfind(':');
  const std::string_view last = std::string_view(name).substr(colon == std::string::npos ? 0 : colon + 1);
  if (const auto p = element_spelling(last)) return std::pair{*p, name + "*"};
  return std::nullopt;
}

// ---------------------------------------------------------------------------------
// A name as the families read it

Name read_name(std::string_view text) {
  Name n;
  n.text = std::string(text);
  n.procedural = text.find_first_of(" :<>(),") == std::string_view::npos;
  n.cxx = parse_cxx(text);
  n.tokens = underscore_tokens(n.cxx.identifier);
  return n;
}

}  // namespace ampcheck::inspector::grammar
