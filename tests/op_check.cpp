#include "tests/op_check.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace ampcheck::test {

Tensor random(const Shape& shape, Generator& gen, double lo, double hi, DType dtype) {
  return Tensor::uniform(shape, gen, lo, hi, dtype);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::vector<Tensor> as_dtype(const std::vector<Tensor>& inputs, DType dtype) {
  std::vector<Tensor> out;
  for (const Tensor& t : inputs)
    out.push_back(t.defined() && is_floating(t.dtype()) ? t.to(dtype) : t);
  return out;
}

namespace {

// L = sum(f(x) * r), in f64, without recording.
double objective(const OpFn& f, const std::vector<Tensor>& x, const std::vector<double>& r) {
  NoGradGuard no_grad;
  const std::vector<double> y = f(x).to_f64();
  double l = 0;
  for (std::size_t i = 0; i < y.size(); ++i) l += y[i] * r[i];
  return l;
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

}  // namespace

GradCheck gradcheck(const OpFn& f, const std::vector<Tensor>& inputs, std::vector<bool> wrt,
                    double eps) {
  if (wrt.empty())
    for (const Tensor& t : inputs) wrt.push_back(t.defined() && t.dtype() == DType::f64);
  std::vector<Tensor> leaves;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = inputs[i].defined() ? inputs[i].clone() : Tensor();
    if (wrt[i]) t.set_requires_grad(true);
    leaves.push_back(t);
  }
  const Tensor out = f(leaves);
  Generator gen(12345);
  const Tensor r = Tensor::uniform(out.shape(), gen, 0.5, 1.5, DType::f64);
  const std::vector<double> rv = r.to_f64();
  out.backward(r.to(out.dtype()));

  GradCheck result;
  std::ostringstream report;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!wrt[i]) continue;
    const std::vector<double> analytic =
        leaves[i].grad().defined() ? leaves[i].grad().to_f64()
                                   : std::vector<double>(static_cast<std::size_t>(leaves[i].numel()), 0.0);
    std::vector<double> numeric(analytic.size()), diff(analytic.size());
    std::size_t worst = 0;
    for (std::size_t j = 0; j < numeric.size(); ++j) {
      std::vector<Tensor> x = leaves;
      std::vector<double> base = leaves[i].to_f64();
      const double v = base[j];
      base[j] = v + eps;
      x[i] = Tensor::from(base, leaves[i].shape(), DType::f64);
      const double lp = objective(f, x, rv);
      base[j] = v - eps;
      x[i] = Tensor::from(base, leaves[i].shape(), DType::f64);
      const double lm = objective(f, x, rv);
      numeric[j] = (lp - lm) / (2 * eps);
      diff[j] = analytic[j] - numeric[j];
      if (std::fabs(diff[j]) > std::fabs(diff[worst])) worst = j;
    }
    const double scale = std::max(norm(numeric), 1e-12);
    const double rel = norm(diff) / scale;
    result.max_rel_error = std::max(result.max_rel_error, rel);
    report << "input " << i << " " << to_string(inputs[i].shape()) << ": rel error " << rel;
    if (!diff.empty())
      report << " (worst element " << worst << ": analytic " << analytic[worst] << ", numeric "
             << numeric[worst] << ")";
    report << "\n";
  }
  result.report = report.str();
  return result;
}

double nmse_f32_vs_f64(const OpFn& f, const std::vector<Tensor>& inputs) {
  NoGradGuard no_grad;
  const std::vector<Tensor> x32 = as_dtype(inputs, DType::f32);
  const std::vector<Tensor> x64 = as_dtype(x32, DType::f64);  // the same values, exactly
  const std::vector<double> y32 = f(x32).to_f64();
  const std::vector<double> y64 = f(x64).to_f64();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < y64.size(); ++i) {
    num += (y32[i] - y64[i]) * (y32[i] - y64[i]);
    den += y64[i] * y64[i];
  }
  return den > 0 ? num / den : num;
}

std::int64_t low_precision_mismatches(const OpFn& f, const std::vector<Tensor>& inputs, DType dtype) {
  NoGradGuard no_grad;
  const std::vector<Tensor> xl = as_dtype(inputs, dtype);
  const std::vector<Tensor> x32 = as_dtype(xl, DType::f32);  // exact widening
  const Tensor yl = f(xl);
  const Tensor expected = f(x32).to(dtype);
  if (yl.dtype() != dtype || yl.shape() != expected.shape()) return yl.numel() + 1;
  const auto* a = yl.data<std::uint16_t>();
  const auto* b = expected.data<std::uint16_t>();
  const std::vector<double> av = yl.to_f64(), bv = expected.to_f64();
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < yl.numel(); ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (a[i] != b[i] && !(std::isnan(av[k]) && std::isnan(bv[k]))) ++bad;
  }
  return bad;
}

}  // namespace ampcheck::test
