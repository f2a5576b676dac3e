#include "profiles/nsight_csv.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "profiles/csv.h"
#include "profiles/profile_error.h"

namespace ampcheck::profiles {
namespace {

constexpr int kHeaderSearchRows = 50;

int column(const std::vector<std::string>& header, std::initializer_list<std::string_view> names) {
  for (const std::string_view n : names)
    for (std::size_t i = 0; i < header.size(); ++i)
      if (header[i] == n) return static_cast<int>(i);
  return -1;
}

const std::string& cell(const std::vector<std::string>& row, int i) {
  static const std::string none;
  return i >= 0 && static_cast<std::size_t>(i) < row.size() ? row[static_cast<std::size_t>(i)] : none;
}

// "1,275,068,416", "23.42", "n/a": Nsight Compute groups thousands with commas.
bool number(std::string_view text, double& out) {
  std::string digits;
  for (const char c : text)
    if (c != ',' && c != ' ') digits += c;
  if (digits.empty()) return false;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  return r.ec == std::errc() && r.ptr == digits.data() + digits.size() && std::isfinite(out);
}

double to_ns(double v, std::string_view unit) {
  if (unit == "second" || unit == "s") return v * 1e9;
  if (unit == "msecond" || unit == "ms") return v * 1e6;
  if (unit == "usecond" || unit == "us") return v * 1e3;
  return v;  // nsecond, ns
}

// "(128, 1, 1)"
Dim3 dim3(std::string_view text) {
  Dim3 d;
  std::uint32_t* slot[] = {&d.x, &d.y, &d.z};
  std::size_t i = 0;
  std::uint32_t v = 0;
  bool in = false;
  for (const char c : text) {
    if (c >= '0' && c <= '9') {
      v = v * 10 + static_cast<std::uint32_t>(c - '0');
      in = true;
    } else if (in) {
      if (i < 3) *slot[i++] = v;
      v = 0;
      in = false;
    }
  }
  if (in && i < 3) *slot[i] = v;
  return d;
}

bool tensor_metric(std::string_view m) {
  return (m.starts_with("sm__") || m.starts_with("smsp__")) && m.find("tensor") != std::string_view::npos;
}

std::int32_t to_i32(std::string_view s) {
  std::int32_t v = -1;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
}

struct NcuKernel {
  std::string name;
  Dim3 grid, block;
  std::int32_t device = -1, stream = -1;
  Counters counters;
};

void add_metric(NcuKernel& k, std::string_view metric, std::string_view unit, std::string_view value) {
  double v = 0;
  const bool numeric = number(value, v);
  if (metric == "gpu__time_duration.sum" && numeric) k.counters.duration_ns = to_ns(v, unit);
  if (tensor_metric(metric) && numeric) {
    k.counters.tensor.emplace_back(std::string(metric), v);
    k.counters.tensor_measured = true;
  }
}

Profile finish_ncu(Profile p, std::vector<NcuKernel>& kernels, const std::string& label) {
  if (kernels.empty()) throw ProfileError(label + ": an Nsight Compute CSV without any kernel row");
  p.format = Format::ncu_csv;
  p.links = false;
  p.no_links_why =
      "Nsight Compute profiles kernels one at a time and records no op: its counters say how each kernel ran, "
      "not which op launched it (give a timeline profile of the same run with --ncu to join them by name)";
  std::int64_t at = 0;
  for (NcuKernel& n : kernels) {
    Kernel k;
    k.name = p.intern(n.name);
    k.grid = n.grid;
    k.block = n.block;
    k.device = n.device;
    k.stream = n.stream;
    k.duration_ns = static_cast<std::int64_t>(std::llround(n.counters.duration_ns));
    k.start_ns = at;  // the order profiled: ncu serializes kernels, their start times are not kept
    at += std::max<std::int64_t>(k.duration_ns, 1);
    k.counters = static_cast<std::int32_t>(p.counters.size());
    p.counters.push_back(std::move(n.counters));
    p.kernels.push_back(k);
  }
  return p;
}

// A kernel's identity from its row, in either CSV form: the columns are found from the header.
struct NcuColumns {
  int name, block, grid, stream, device;
  explicit NcuColumns(const std::vector<std::string>& header)
      : name(column(header, {"Kernel Name"})), block(column(header, {"Block Size"})), grid(column(header, {"Grid Size"})),
        stream(column(header, {"Stream"})), device(column(header, {"Device"})) {}
  NcuKernel& add(std::vector<NcuKernel>& kernels, const std::vector<std::string>& row) const {
    NcuKernel& k = kernels.emplace_back();
    k.name = cell(row, name);
    k.block = dim3(cell(row, block));
    k.grid = dim3(cell(row, grid));
    k.stream = to_i32(cell(row, stream));
    k.device = to_i32(cell(row, device));
    return k;
  }
};

Profile read_ncu_details(CsvReader& csv, const std::vector<std::string>& header, Profile p, const std::string& label) {
  const NcuColumns cols(header);
  const int id = column(header, {"ID"}), name = cols.name, metric = column(header, {"Metric Name"}),
            unit = column(header, {"Metric Unit"}), value = column(header, {"Metric Value"});
  if (value < 0) throw ProfileError(label + ": an Nsight Compute CSV with \"Metric Name\" but no \"Metric Value\" column");
  std::vector<NcuKernel> kernels;
  std::map<std::string, std::size_t> by_id;
  std::vector<std::string> row;
  const int last = std::max({id, name, metric, value});
  while (csv.next(row)) {
    // Rule rows carry the trailing columns; metric rows may stop after the value.
    if (row.size() <= static_cast<std::size_t>(last)) continue;  // a blank or cut line
    const std::string key = cell(row, id) + "\x1f" + cell(row, column(header, {"Process ID"}));
    auto [it, fresh] = by_id.try_emplace(key, kernels.size());
    if (fresh) cols.add(kernels, row);
    add_metric(kernels[it->second], cell(row, metric), cell(row, unit), cell(row, value));
  }
  return finish_ncu(std::move(p), kernels, label);
}

Profile read_ncu_raw(CsvReader& csv, const std::vector<std::string>& header, Profile p, const std::string& label) {
  const NcuColumns cols(header);
  const int id = column(header, {"ID"}), name = cols.name;
  std::vector<std::string> units(header.size());
  std::vector<NcuKernel> kernels;
  std::vector<std::string> row;
  bool first = true;
  while (csv.next(row)) {
    if (row.size() < header.size()) row.resize(header.size());
    if (cell(row, name).empty() && !(first && cell(row, id).empty())) continue;
    if (first && cell(row, id).empty()) {  // the units row
      units = row;
      first = false;
      continue;
    }
    first = false;
    NcuKernel& k = cols.add(kernels, row);
    for (std::size_t c = 0; c < header.size(); ++c)
      if (header[c].find("__") != std::string::npos) add_metric(k, header[c], units[c], row[c]);
  }
  return finish_ncu(std::move(p), kernels, label);
}

Profile read_kern_sum(CsvReader& csv, const std::vector<std::string>& header, Profile p, const std::string& label) {
  const int total = column(header, {"Total Time (ns)", "Total Time"}), count = column(header, {"Instances"}),
            name = column(header, {"Name"});
  p.format = Format::nsys_csv;
  p.links = false;
  p.no_links_why =
      "cuda_gpu_kern_sum holds one row of totals per kernel name, nothing of which op launched them: for per-op "
      "attribution export the report as SQLite (nsys export --type sqlite report.nsys-rep) and read that";
  std::vector<std::string> row;
  std::int64_t at = 0;
  while (csv.next(row)) {
    if (cell(row, name).empty()) continue;
    double ns = 0, n = 0;
    if (!number(cell(row, total), ns) || !number(cell(row, count), n)) continue;
    Kernel k;
    k.name = p.intern(cell(row, name));
    k.duration_ns = static_cast<std::int64_t>(std::llround(ns));
    k.instances = static_cast<std::int64_t>(std::llround(n));
    k.start_ns = at++;  // rows are totals: no time of their own; kept in the report's order
    p.kernels.push_back(k);
  }
  if (p.kernels.empty()) throw ProfileError(label + ": an nsys cuda_gpu_kern_sum CSV without any kernel row");
  return p;
}

std::string first_fields(const std::vector<std::string>& row) {
  std::string s;
  for (std::size_t i = 0; i < row.size() && i < 6; ++i) s += (i ? ", " : "") + ("\"" + row[i] + "\"");
  return s;
}

}  // namespace

Profile read_nsight_csv(ByteSource& source) {
  CsvReader csv(source);
  std::vector<std::string> row, first;
  Profile p;
  p.source = source.label();
  for (int i = 0; i < kHeaderSearchRows && csv.next(row); ++i) {
    if (first.empty() && row.size() > 1) first = row;
    const bool kernel_name = column(row, {"Kernel Name"}) >= 0;
    if (kernel_name && column(row, {"Metric Name"}) >= 0) return read_ncu_details(csv, row, std::move(p), source.label());
    if (kernel_name && column(row, {"ID"}) >= 0) return read_ncu_raw(csv, row, std::move(p), source.label());
    if (column(row, {"Instances"}) >= 0 && column(row, {"Name"}) >= 0 &&
        column(row, {"Total Time (ns)", "Total Time"}) >= 0)
      return read_kern_sum(csv, row, std::move(p), source.label());
    if (column(row, {"Num Calls"}) >= 0 && column(row, {"Name"}) >= 0)
      throw ProfileError(source.label() +
                         ": an nsys stats report of CUDA API calls (cuda_api_sum), not of kernels: write "
                         "`nsys stats --report cuda_gpu_kern_sum --format csv` instead, or export the report as "
                         "SQLite (nsys export --type sqlite) for per-op attribution");
  }
  throw ProfileError(source.label() +
                     ": a CSV file, but neither an `nsys stats` cuda_gpu_kern_sum report nor an `ncu --csv` report" +
                     (first.empty() ? std::string() : " (its first row: " + first_fields(first) + ")"));
}

}  // namespace ampcheck::profiles
