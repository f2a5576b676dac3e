#include "engine/dtype/dtype.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <vector>

namespace ampcheck {
namespace {

constexpr std::array<DTypeInfo, kAllDTypes.size()> kInfos{{
#define AMPCHECK_INFO(e, n, ln, b, eb, mb, a0, a1, a2, a3) \
  DTypeInfo{DType::e, n, ln, b, eb, mb, {a0, a1, a2, a3}},
    AMPCHECK_FLOAT_DTYPES(AMPCHECK_INFO)
#undef AMPCHECK_INFO
}};

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

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

template <typename F>
void for_each_spelling(F&& f) {
  for (const DTypeInfo& d : kInfos) {
    f(d.dtype, d.name);
    for (std::string_view a : d.aliases)
      if (!a.empty() && a != d.name) f(d.dtype, a);
  }
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

const DTypeInfo& info(DType dtype) { return kInfos[static_cast<std::size_t>(dtype)]; }
std::string_view name(DType dtype) { return info(dtype).name; }

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
  const std::string key = lower(strip_module(text));
  std::string_view best;
  std::size_t best_distance = key.size() + 8;
  for_each_spelling([&](DType, std::string_view s) {
    const std::size_t dist = edit_distance(key, s);
    if (dist < best_distance) best_distance = dist, best = s;
  });
  std::string msg = "unknown dtype \"" + std::string(text) + "\"";
  if (best_distance <= 2) msg += " (did you mean \"" + std::string(best) + "\"?)";
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
  return out;
}

}  // namespace ampcheck
