// The report as one self-contained HTML page: inline CSS, inline SVG plots (loss curve,
// loss-scale history, per-op exponent heatmap with the fp16 and bf16 ranges drawn on it)
// and tables; no network, no external fonts, and no script needed to see any of it (a
// little script sorts tables and records script errors for the browser test).
// The same report gives the same bytes.
#pragma once

#include <string>

#include "reports/kernels_report.h"
#include "reports/report.h"

namespace ampcheck::reports {

// Sections in order: header and verdict, loss curve(s), loss-scale history, exponent
// heatmap, op dtype tables, worst tensors and local errors, non-finite values, bisect,
// compare. A section whose data is empty says why in one line; bisect and compare
// appear only when the report has them.
std::string to_html(const Report& report);

// `ampcheck kernels`: a section per profile (rank): what was read and attributed, the GPU
// kernels section `run`'s page has (one code path), the op types against the policy, what
// the fallbacks cost, Nsight Compute's counters against the names; then what differs
// between the ranks.
std::string to_html(const KernelsReport& report);

}  // namespace ampcheck::reports
