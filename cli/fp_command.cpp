#include "cli/fp_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>  // std::strtod
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/dtype_option.h"
#include "cli/output.h"
#include "cli/usage_error.h"
#include "engine/device.h"
#include "engine/dtype/convert.h"
#include "engine/dtype/dtype.h"
#include "engine/dtype/fp8.h"
#include "engine/dtype/fp_value.h"
#include "reports/text_table.h"

namespace ampcheck::cli {
namespace {

using nlohmann::ordered_json;

double parse_value(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  const bool consumed = end != begin && *end == '\0';
  if (!consumed)
    throw UsageError(fmt::format(
        "cannot read \"{}\" as a number (examples: 70000, -1e-8, 0.1, 0x1p-24, inf, nan)", text));
  if (errno == ERANGE && std::isinf(v))
    throw UsageError(fmt::format(
        "\"{}\" is beyond the range of f64, which ampcheck reads values into (max ~1.8e308)",
        text));
  if (errno == ERANGE && v == 0.0)
    throw UsageError(fmt::format(
        "\"{}\" is below the smallest f64 subnormal (~4.9e-324), which ampcheck reads values "
        "into; write 0 if you mean zero",
        text));
  return v;
}

std::string fmt_g(double v, int precision = 6) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return fmt::format("{:.{}g}", v, precision);
}

// JSON has no Inf or NaN: those become the strings "inf", "-inf", "nan".
ordered_json json_number(double v) {
  if (std::isfinite(v)) return v;
  return fmt_g(v);
}

// A power of two as "2^-24".
std::string pow2(double v) {
  if (!std::isfinite(v)) return "-";
  return fmt::format("2^{}", std::ilogb(v));
}

std::string limits_text() {
  reports::TextTable t({"dtype", "aka", "bits", "exp", "mant", "digits", "max", "min normal",
                        "min subnormal", "epsilon", "emax", "emin", "digits10"});
  t.align(0, reports::TextTable::Align::left).align(1, reports::TextTable::Align::left);
  for (DType d : kFloatDTypes) {
    const DTypeInfo& i = info(d);
    t.add_row({std::string(i.name), std::string(i.long_name), std::to_string(i.bits),
               std::to_string(i.exponent_bits), std::to_string(i.mantissa_bits),
               std::to_string(i.digits()), fmt_g(i.max(), 8), fmt_g(i.min_normal(), 8),
               fmt_g(i.min_subnormal(), 8), fmt_g(i.epsilon(), 8),
               std::to_string(i.max_exponent()), std::to_string(i.min_exponent()),
               std::to_string(i.digits10())});
  }
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const Fp8Info& i = info(f);
    const int emin = 1 - i.bias, emax = std::ilogb(i.max());
    t.add_row({std::string(i.name), std::string(i.long_name), "8", std::to_string(i.exponent_bits),
               std::to_string(i.mantissa_bits), std::to_string(i.mantissa_bits + 1), fmt_g(i.max(), 8),
               fmt_g(i.min_normal(), 8), fmt_g(i.min_subnormal(), 8), fmt_g(std::ldexp(1.0, -i.mantissa_bits), 8),
               std::to_string(emax), std::to_string(emin), "0"});
  }
  return t.render() +
         "\nmax = (2 - 2^-mant) * 2^emax; min normal = 2^emin; min subnormal = 2^(emin - mant);\n"
         "e4m3 (float8_e4m3fn) has no Inf: its max is 1.75 * 2^emax, and too large is NaN (or max, saturating);\n"
         "epsilon = 2^-mant (1 to the next value); digits = mant + 1 (precision in bits);\n"
         "digits10 = decimal digits that always survive a round trip.\n";
}

ordered_json limits_json() {
  ordered_json arr = ordered_json::array();
  for (DType d : kFloatDTypes) {
    const DTypeInfo& i = info(d);
    arr.push_back({{"dtype", i.name},
                   {"long_name", i.long_name},
                   {"bits", i.bits},
                   {"exponent_bits", i.exponent_bits},
                   {"mantissa_bits", i.mantissa_bits},
                   {"digits", i.digits()},
                   {"digits10", i.digits10()},
                   {"max_digits10", i.max_digits10()},
                   {"max_exponent", i.max_exponent()},
                   {"min_exponent", i.min_exponent()},
                   {"max", i.max()},
                   {"min_normal", i.min_normal()},
                   {"min_subnormal", i.min_subnormal()},
                   {"epsilon", i.epsilon()}});
  }
  ordered_json fp8 = ordered_json::array();
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    const Fp8Info& i = info(f);
    fp8.push_back({{"format", i.name},
                   {"long_name", i.long_name},
                   {"bits", 8},
                   {"exponent_bits", i.exponent_bits},
                   {"mantissa_bits", i.mantissa_bits},
                   {"has_inf", i.has_inf},
                   {"max", i.max()},
                   {"min_normal", i.min_normal()},
                   {"min_subnormal", i.min_subnormal()}});
  }
  return {{"ampcheck_fp_limits", 1}, {"dtypes", arr}, {"fp8", fp8}};
}

struct Row {
  std::string text;  // as typed
  std::vector<FpValue> per_dtype;
};

// A value in an MXFP8 block whose largest |value| is `amax`, as TransformerEngine casts it
// (kernels/fp_bits.h): the block's E8M0 scale, the value times the scale's reciprocal
// (binary32), cast saturating, and read back times the scale.
struct MxValue {
  std::string text;  // as typed
  double input = 0;
  Fp8Format format = Fp8Format::e4m3;
  std::uint8_t scale_code = 0;  // E8M0
  double scale = 0;             // 2^(code - 127)
  std::uint8_t code = 0;        // the fp8 code
  double back = 0;              // its value times the scale: what the GEMM multiplies
};

MxValue mx_value(const std::string& text, double x, double amax, Fp8Format f) {
  MxValue v;
  v.text = text;
  v.input = x;
  v.format = f;
  v.scale_code = kernels::e8m0_scale_bits(kernels::f64_to_f32(amax), static_cast<float>(info(f).max()));
  v.scale = kernels::e8m0_to_f32(v.scale_code);
  const float y = kernels::f64_to_f32(x) * kernels::e8m0_multiplier(v.scale_code);
  v.code = encode_fp8(y, f, kernels::Fp8Overflow::saturate);
  v.back = decode_fp8(v.code, f) * v.scale;
  return v;
}

std::string mx_text(const std::vector<MxValue>& mx, double amax) {
  reports::TextTable t({"input", "format", "block scale", "E8M0", "code", "stored (exact)", "error", "rel error", "class"});
  for (std::size_t c : {1, 2, 5, 8}) t.align(c, reports::TextTable::Align::left);
  for (const MxValue& v : mx) {
    const double err = v.back - v.input;
    // Nothing in a block saturates (its scale holds its largest value); below the format's
    // normals a value keeps fewer bits, below half its smallest subnormal none.
    const int mantissa_bits = info(v.format).mantissa_bits;
    const bool subnormal = (v.code & 0x7f) != 0 && ((v.code & 0x7f) >> mantissa_bits) == 0;
    const std::string cls = std::isnan(v.back)              ? "nan"
                            : v.back == 0 && v.input != 0 ? "flushed to 0"
                            : subnormal                   ? "subnormal"
                                                          : "normal";
    t.add_row({v.text, std::string(info(v.format).name), fmt::format("{} ({})", fmt_g(v.scale), pow2(v.scale)),
               fmt::format("0x{:02x}", v.scale_code), fmt::format("0x{:02x}", v.code), exact_decimal(v.back),
               fmt_g(err), v.input != 0 ? fmt_g(std::fabs(err / v.input), 3) : "0", cls});
  }
  return fmt::format("\nIn an MXFP8 block whose largest |value| is {} (TransformerEngine's MXFP8BlockScaling):\n", fmt_g(amax)) +
         t.render() +
         "block scale: the power of two at or above amax / max (E8M0); each value is cast times its\n"
         "reciprocal, saturating, and read back times it; values too far below the block's largest flush.\n";
}

ordered_json mx_json(const std::vector<MxValue>& mx, double amax) {
  ordered_json arr = ordered_json::array();
  for (const MxValue& v : mx)
    arr.push_back({{"input", v.text},
                   {"format", info(v.format).name},
                   {"block_scale", json_number(v.scale)},
                   {"e8m0", v.scale_code},
                   {"code", v.code},
                   {"stored", json_number(v.back)}});
  return {{"block_amax", json_number(amax)}, {"values", arr}};
}

std::string values_text(const std::vector<Row>& rows) {
  reports::TextTable t({"input", "dtype", "stored (exact)", "sign exponent mantissa", "hex",
                        "error", "rel error", "ulp", "class"});
  for (std::size_t c : {1, 2, 3, 8}) t.align(c, reports::TextTable::Align::left);
  for (const Row& r : rows) {
    for (const FpValue& v : r.per_dtype) {
      std::string cls(class_name(v.cls));
      if (v.fp8 && !(v.saturated == v.stored || (std::isnan(v.saturated) && std::isnan(v.stored))))
        cls += " (saturating: " + fmt_g(v.saturated) + ")";
      t.add_row({&v == &r.per_dtype.front() ? r.text : "", std::string(v.format), exact_decimal(v.stored),
                 v.bit_string(), v.hex(), fmt_g(v.abs_error), fmt_g(v.rel_error, 3),
                 fmt::format("{} ({})", fmt_g(v.ulp, 3), pow2(v.ulp)), cls});
    }
    if (r.per_dtype.size() > 1) t.add_separator();
  }
  return t.render() +
         "\nstored: the value kept (round to nearest, ties to even); error: stored - input;\n"
         "ulp: spacing of the dtype's values at |input|.\n" +
         std::string(std::any_of(rows.begin(), rows.end(),
                                 [](const Row& r) {
                                   return std::any_of(r.per_dtype.begin(), r.per_dtype.end(),
                                                      [](const FpValue& v) { return v.fp8; });
                                 })
                         ? "fp8: the cast that does not saturate (ml_dtypes' astype, PyTorch's .to(float8_e5m2)); a\n"
                           "saturating cast (TransformerEngine's, CUDA's SATFINITE, PyTorch's .to(float8_e4m3fn))\n"
                           "keeps +-max instead of NaN/Inf.\n"
                         : "");
}

ordered_json values_json(const std::vector<Row>& rows, Device device) {
  ordered_json arr = ordered_json::array();
  for (const Row& r : rows) {
    ordered_json results = ordered_json::array();
    for (const FpValue& v : r.per_dtype) {
      results.push_back({{"dtype", v.format},
                         {"stored", json_number(v.stored)},
                         {"stored_exact", exact_decimal(v.stored)},
                         {"shortest", shortest_decimal(v)},
                         {"bits", v.bit_string()},
                         {"hex", v.hex()},
                         {"sign", v.sign ? 1 : 0},
                         {"exponent_field", v.exponent_field},
                         {"mantissa_field", v.mantissa_field},
                         {"exponent", v.exponent},
                         {"abs_error", json_number(v.abs_error)},
                         {"rel_error", json_number(v.rel_error)},
                         {"ulp", json_number(v.ulp)},
                         {"class", class_name(v.cls)},
                         {"exact", v.exact}});
      if (v.fp8) results.back()["saturating"] = json_number(v.saturated);
    }
    arr.push_back({{"input", r.text},
                   {"value", json_number(r.per_dtype.front().input)},
                   {"results", results}});
  }
  return {{"ampcheck_fp", 1}, {"device", device_name(device)}, {"values", arr}};
}

CLI::App* add_options(CLI::App& app, FpOptions& o) {
  CLI::App* fp = app.add_subcommand(
      "fp", "What a number becomes in fp16/bf16/f32/f64 and fp8 (e4m3, e5m2): stored value, bits, error, ulp, class");
  fp->add_option("values", o.values,
                 "numbers to look at: 70000 1e-8 0.1 -2.5 0x1p-24 inf nan "
                 "(put -- before a list that starts with a negative number)");
  fp->add_option("--dtype,-d", o.dtypes,
                 "dtypes to store into, comma separated (f16, fp16, float16, half, bf16, "
                 "bfloat16, f32, float, f64, double, ...; fp8: e4m3, float8_e4m3fn, e5m2, float8_e5m2)")
      ->delimiter(',')
      ->capture_default_str();
  fp->add_flag("--limits", o.limits, "print the limits of every dtype (max, min normal, ...)");
  fp->add_flag("--json", o.json, "print JSON instead of a table");
  fp->add_option("--device", o.device,
                 "where the conversion runs: cpu, cuda, or auto (the GPU if usable, else the CPU); the bits are the "
                 "same on both (the GPU as a cross-check)")
      ->capture_default_str();
  fp->add_option("--output,-o", o.output, "write to this file (atomically) instead of stdout");
  fp->add_option("--mx-amax", o.mx_amax,
                 "MXFP8: also show what each value becomes in a block of 32 whose largest |value| is this (its "
                 "E8M0 scale, as TransformerEngine's MXFP8BlockScaling casts it), in the fp8 formats of --dtype "
                 "(e4m3 where it names none)");
  return fp;
}

int run_fp(const FpOptions& o, std::ostream& out, std::ostream& err) {
  if (!o.limits && o.values.empty())
    throw UsageError("fp: give one or more values (e.g. `ampcheck fp 70000 1e-8`) or --limits");
  if (o.limits && !o.values.empty())
    throw UsageError("fp: --limits takes no values; run it separately");

  std::string text;
  if (o.limits) {
    text = o.json ? limits_json().dump(2) + "\n" : limits_text();
  } else {
    const auto request = parse_device_request(o.device);
    if (!request)
      throw UsageError("--device \"" + o.device + "\" is not a device; use auto, cpu or cuda");
    // fp8 formats (e4m3, e5m2) beside the dtypes, in the order given.
    std::vector<std::string> dtype_names;
    std::vector<Fp8Format> fp8;
    for (const std::string& n : o.dtypes) {
      if (const auto f = try_parse_fp8(n)) {
        if (std::find(fp8.begin(), fp8.end(), *f) == fp8.end()) fp8.push_back(*f);
      } else {
        dtype_names.push_back(n);
      }
    }
    const std::vector<DType> dtypes = parse_float_dtypes(dtype_names);
    std::vector<double> values;
    for (const std::string& s : o.values) values.push_back(parse_value(s));
    Device device;
    try {
      // A conversion is the same bits on the GPU and the CPU (kernels/fp_bits.h): where auto
      // finds no GPU, the CPU's answer is the whole answer, and nothing is worth a notice.
      std::ostringstream fallback;
      device = resolve_device(*request, *request == DeviceRequest::any ? fallback : err, false);
    } catch (const DeviceError& e) {
      throw UsageError(e.what());
    }

    std::vector<Row> rows(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) rows[i].text = o.values[i];
    for (DType d : dtypes) {
      const std::vector<std::uint64_t> bits = encode_all(values, d, device);
      for (std::size_t i = 0; i < values.size(); ++i)
        rows[i].per_dtype.push_back(describe_stored(values[i], bits[i], d));
    }
    // fp8 on the host: its casts are the GEMM operands' of the CPU emulation (issue 33).
    for (Fp8Format f : fp8)
      for (std::size_t i = 0; i < values.size(); ++i) rows[i].per_dtype.push_back(inspect_fp8(values[i], f));
    if (o.mx_amax) {
      const double amax = parse_value(*o.mx_amax);
      if (!(std::fabs(amax) <= 3.4028234663852886e38))
        throw UsageError("--mx-amax " + *o.mx_amax + ": a block's largest |value| is a finite float32 number");
      std::vector<MxValue> mx;
      for (Fp8Format f : fp8.empty() ? std::vector<Fp8Format>{Fp8Format::e4m3} : fp8)
        for (std::size_t i = 0; i < values.size(); ++i) {
          if (std::fabs(values[i]) > std::fabs(amax))
            throw UsageError("--mx-amax " + *o.mx_amax + " is the largest |value| of the block, but " + o.values[i] +
                             " is larger: give at least " + fmt_g(std::fabs(values[i])));
          mx.push_back(mx_value(o.values[i], values[i], std::fabs(amax), f));
        }
      if (o.json) {
        ordered_json j = values_json(rows, device);
        j["mxfp8"] = mx_json(mx, std::fabs(amax));
        text = j.dump(2) + "\n";
      } else {
        text = values_text(rows) + mx_text(mx, std::fabs(amax));
      }
    } else {
      text = o.json ? values_json(rows, device).dump(2) + "\n" : values_text(rows);
    }
  }

  write_output(text, o.output, out);
  return 0;
}

}  // namespace

Command add_fp_command(CLI::App& app) {
  auto options = std::make_shared<FpOptions>();
  return {add_options(app, *options),
          [options](std::ostream& out, std::ostream& err) { return run_fp(*options, out, err); }};
}

}  // namespace ampcheck::cli
