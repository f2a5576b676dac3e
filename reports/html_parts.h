// The HTML pages' parts, shared by the files that write them: html.cpp assembles the pages
// (to_html) from the sections of html_summary.cpp (header, loss, loss scale),
// html_numerics.cpp (exponent heatmap, op dtypes, worst tensors and local errors),
// html_nonfinite.cpp (non-finite values, bisect-nan), html_compare.cpp (compare levels, the
// fp32 twin, the seeds' spread), html_kernels.cpp (GPU kernels, profiles) and html_fp8.cpp
// (fp8 casts), all drawn with html_plot.h. Internal to reports/: the API is html.h.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "reports/html_plot.h"
#include "reports/kernels_report.h"
#include "reports/report.h"

namespace ampcheck::reports::html_impl {

// A section opens with the id the table of contents links to, and its title (html.cpp).
std::string section_open(std::string_view id, std::string_view title);
inline constexpr std::string_view kSectionClose = "</section>\n";
// One line saying why a section or table has nothing to show (html.cpp).
std::string note(std::string_view text);

// ---- html_summary.cpp ----
std::string header(const Report& r);  // verdict, summary cards, the run's settings
std::string loss_section(const Report& r);
std::string loss_scale_section(const Report& r);

// ---- html_numerics.cpp ----
std::string heatmap_section(const Report& r);
std::string dtype_section(const Report& r);
std::string worst_section(const Report& r);

// ---- html_nonfinite.cpp ----
std::string nonfinite_section(const Report& r);
std::string bisect_section(const Bisect& b, bool interrupted);

// ---- html_compare.cpp ----
std::string compare_section(const Compare& c);
std::string spread_section(const Spread& sp);

// ---- html_kernels.cpp ----
std::string kernels_section(const Report& r);
// `ampcheck kernels`: one profile (rank); `several`: the page has more than one.
std::string rank_section(const ProfileRank& r, std::size_t index, bool several);
// The verdict-* style of a kernels verdict.
std::string kernels_verdict_class(const std::string& verdict);

// ---- html_fp8.cpp ----
std::string fp8_section(const Fp8Training& f);

}  // namespace ampcheck::reports::html_impl
