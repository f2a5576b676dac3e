// The report as JSON: the writer (byte-identical for equal reports: fixed field order,
// shortest round-trip numbers, non-finite doubles as "nan"/"inf"/"-inf") and the reader,
// which validates what it reads and names the file and field of anything wrong.
// Field by field: docs/report-format.md; JSON Schema: reports/schema/report.schema.json.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include "reports/kernels_report.h"
#include "reports/report.h"

namespace ampcheck::reports {

class ReportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Indented by 2, ending in a newline.
std::string to_json(const Report& report);
// `source` names the text in errors ("run.json"). Throws ReportError: not JSON, a
// missing or mistyped field (with its path: "steps[3].loss"), an unknown major
// schema_version (with what to do about it).
Report from_json(std::string_view text, std::string_view source);
// Reads and parses a file; a missing or unreadable file is a ReportError naming it.
Report read_report(const std::filesystem::path& path);
// Writes to_json(report) atomically (reports/atomic_file.h); throws WriteError.
void write_report(const std::filesystem::path& path, const Report& report);

// `ampcheck kernels`'s report (reports/kernels_report.h, reports/schema/kernels.schema.json),
// written and read the same way.
std::string to_json(const KernelsReport& report);
KernelsReport kernels_from_json(std::string_view text, std::string_view source);

}  // namespace ampcheck::reports
