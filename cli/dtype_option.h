// --dtype lists of the commands that take several float dtypes (fp, selftest): every
// spelling parse_dtype accepts, duplicates dropped, i64 and unknown names a usage error.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "cli/usage_error.h"
#include "engine/dtype/dtype.h"

namespace ampcheck::cli {

inline std::vector<DType> parse_float_dtypes(const std::vector<std::string>& names) {
  std::vector<DType> out;
  for (const std::string& n : names) {
    try {
      const DType d = parse_dtype(n);
      if (!is_floating(d))
        throw UsageError("--dtype " + n + " is not a floating-point dtype; use f16, bf16, f32 or f64");
      if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
    } catch (const DTypeError& e) {
      throw UsageError(std::string("--dtype: ") + e.what());
    }
  }
  return out;
}

}  // namespace ampcheck::cli
