#include "engine/dtype/dtype.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <vector>

#include "engine/util/strings.h"

namespace ampcheck {
namespace {

constexpr std::array<DTypeInfo, kFloatDTypes.size()> kInfos{{
#define AMPCHECK_INFO(e, n, ln, b, eb, mb, a0, a1, a2, a3) \
  DTypeInfo{DType::e, n, ln, b, eb, mb, {a0, a1, a2, a3}},
    AMPCHECK_FLOAT_DTYPES(AMPCHECK_INFO)
#undef AMPCHECK_INFO
}};
// kInfos is indexed by the enum (kernels/dtype.h): each row must sit at its dtype's value,
// and each row's size must be the kernels' element_size.
constexpr bool rows_in_enum_order() {
  for (std::size_t i = 0; i < kInfos.size(); ++i)
    if (static_cast<std::size_t>(kInfos[i].dtype) != i || element_size(kInfos[i].dtype) * 8 != static_cast<std::size_t>(kInfos[i].bits))
      return false;
  return true;
}
static_assert(rows_in_enum_order(), "AMPCHECK_FLOAT_DTYPES must list the dtypes in the order of kernels/dtype.h");

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Framework spellings: "torch.float16", "paddle.bfloat16", "np.float32", "jnp.bfloat16".
std::string_view strip_module(std::string_view s) {
  const auto dot = s.rfind('.');
  return dot == std::string_view::npos ? s : s.substr(dot + 1);
}

constexpr std::array<std::string_view, 3> kI64Names{"i64", "int64", "long"};

template <typename F>
void for_each_spelling(F&& f) {
  for (const DTypeInfo& d : kInfos) {
    f(d.dtype, d.name);
    for (std::string_view a : d.aliases)
      if (!a.empty() && a != d.name) f(d.dtype, a);
  }
  for (std::string_view a : kI64Names) f(DType::i64, a);
}

}  // namespace

int DTypeInfo::digits10() const {
  return static_cast<int>(std::floor((digits() - 1) * std::log10(2.0)));
}
int DTypeInfo::max_digits10() const {
  return static_cast<int>(std::ceil(digits() * std::log10(2.0) + 1));
}
double DTypeInfo::max() const {
  return std::ldexp(2.0 - std::ldexp(1.0, -mantissa_bits), max_exponent());
}
double DTypeInfo::min_normal() const { return std::ldexp(1.0, min_exponent()); }
double DTypeInfo::min_subnormal() const {
  return std::ldexp(1.0, min_exponent() - mantissa_bits);
}
double DTypeInfo::epsilon() const { return std::ldexp(1.0, -mantissa_bits); }

const DTypeInfo& info(DType dtype) {
  if (!is_floating(dtype))
    throw std::invalid_argument(std::string(name(dtype)) + " is not a floating-point dtype");
  return kInfos[static_cast<std::size_t>(dtype)];
}
std::string_view name(DType dtype) {
  return is_floating(dtype) ? kInfos[static_cast<std::size_t>(dtype)].name : kI64Names[0];
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (!is_floating(a)) return b;
  if (!is_floating(b)) return a;
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;  // f32 with anything narrower, or f16 with bf16
}

std::optional<DType> try_parse_dtype(std::string_view text) {
  const std::string key = lower(strip_module(text));
  std::optional<DType> found;
  for_each_spelling([&](DType d, std::string_view s) {
    if (!found && s == key) found = d;
  });
  return found;
}

DType parse_dtype(std::string_view text) {
  if (auto d = try_parse_dtype(text)) return *d;
  std::vector<std::string_view> spellings;
  for_each_spelling([&](DType, std::string_view s) { spellings.push_back(s); });
  const std::string_view best = closest(lower(strip_module(text)), spellings);
  std::string msg = "unknown dtype \"" + std::string(text) + "\"";
  if (!best.empty()) msg += " (did you mean \"" + std::string(best) + "\"?)";
  msg += "; accepted: " + accepted_dtype_names();
  throw DTypeError(msg);
}

std::string accepted_dtype_names() {
  std::string out;
  for (const DTypeInfo& d : kInfos) {
    if (!out.empty()) out += "; ";
    out += d.name;
    for (std::string_view a : d.aliases)
      if (!a.empty() && a != d.name) out += ", " + std::string(a);
  }
  out += "; i64, int64, long";
  return out;
}

}  // namespace ampcheck
