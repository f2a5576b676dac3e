// The pages themselves: the run's report and `ampcheck kernels`' report, each assembled
// from its sections (html_parts.h) under one style sheet and one table-sorting script.
#include "reports/html.h"

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reports/html_parts.h"

namespace ampcheck::reports {

namespace html_impl {

std::string section_open(std::string_view id, std::string_view title) {
  return fmt::format("<section id=\"{}\">\n<h2>{}</h2>\n", id, esc(title));
}

std::string note(std::string_view text) { return fmt::format("<p class=\"note\">{}</p>\n", esc(text)); }

}  // namespace html_impl

using namespace html_impl;

namespace {

constexpr std::string_view kStyle = R"(<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:960px;padding:16px 20px;color:#222;background:#fafafa}
h1{font-size:1.5em;margin:.2em 0}h2{border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:1.6em}h3{font-size:1.05em;margin:1.2em 0 .4em}
.sub{color:#555;margin:0 0 .8em}
.verdict{font-size:1.2em;font-weight:600;padding:10px 14px;border-radius:6px;border-left:8px solid;margin:10px 0}
.verdict-tag{text-transform:uppercase;font-size:.8em;letter-spacing:.05em;margin-right:.6em}
.verdict-healthy{background:#e7f6e9;border-color:#2e7d32;color:#1b5e20}
.verdict-failed,.verdict-gradient_underflow{background:#fdecea;border-color:#c62828;color:#8e0000}
.finding-warning{color:#8e0000}.finding-note{color:#555}.finding-failure{color:#d62728;font-weight:bold}
.verdict-amp_off{background:#fff4e0;border-color:#ef6c00;color:#8a3c00}
.verdict-reference{background:#e8f0fb;border-color:#1565c0;color:#0d3c78}
.verdict-unchecked,.verdict-unknown{background:#eeeeee;border-color:#757575;color:#333}
.verdict-interrupted{background:#f3e8fb;border-color:#6a1b9a;color:#4a148c}
.interrupted{padding:8px 14px;border:2px dashed #6a1b9a;border-radius:6px;margin:10px 0;color:#4a148c;font-weight:600}
.cards{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px 10px;min-width:120px}
.card .k{font-size:.8em;color:#666}.card .v{font-size:1.1em;font-weight:600}
dl.info{display:grid;grid-template-columns:max-content auto;gap:2px 14px;font-size:.9em}
dl.info dt{color:#666}dl.info dd{margin:0}
nav{font-size:.9em;margin:8px 0}nav a{margin-right:12px}
table{border-collapse:collapse;font-size:.85em;margin:6px 0;background:#fff}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f0f0;cursor:pointer;user-select:none}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#666;font-style:italic}.lost{margin:2px 0 8px 1em;color:#8e0000}.caption{color:#555;font-size:.85em;margin:2px 0 10px}
pre.snippet{background:#f4f4f4;border:1px solid #ddd;padding:8px;overflow-x:auto}
svg.plot{display:block;max-width:100%;height:auto;background:#fff;border:1px solid #e0e0e0;margin:6px 0}
</style>
)";

// Records script errors where the browser test reads them; the page needs no script to
// show its plots.
constexpr std::string_view kErrorHook = R"(<script>
window.onerror = function (message) {
  var el = document.body || document.documentElement;
  var seen = el.dataset.errors ? el.dataset.errors + "\n" : "";
  el.dataset.errors = seen + String(message);
  return false;
};
</script>
)";

// Click a column header to sort its table (numbers as numbers).
constexpr std::string_view kSortScript = R"(<script>
(function () {
  function key(cell) {
    var text = cell.textContent.trim();
    var value = parseFloat(text.replace(/^[×]/, ""));
    return isNaN(value) ? text.toLowerCase() : value;
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th) {
      th.addEventListener("click", function () {
        var body = table.tBodies[0];
        var column = th.cellIndex;
        var ascending = th.dataset.order !== "asc";
        th.dataset.order = ascending ? "asc" : "desc";
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[column]), y = key(b.cells[column]);
          if (typeof x !== typeof y) { x = String(x); y = String(y); }
          var order = x < y ? -1 : x > y ? 1 : 0;
          return ascending ? order : -order;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  });
})();
</script>
)";

}  // namespace

std::string to_html(const Report& report) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += fmt::format("<title>ampcheck {} — {} {} {}</title>\n", esc(report.run.command), esc(report.run.model),
                     esc(report.run.level), esc(report.summary.verdict));
  out += kStyle;
  out += kErrorHook;
  out += "</head>\n<body>\n";
  out += header(report);

  std::vector<std::pair<std::string_view, std::string_view>> toc = {
      {"loss", "loss"},     {"loss-scale-history", "loss scale"}, {"exponents", "exponents"},
      {"dtypes", "dtypes"}, {"worst", "worst"},                   {"nonfinite", "non-finite"}};
  if (report.kernels) toc.emplace_back("kernels", "kernels");
  if (report.fp8) toc.emplace_back("fp8", "fp8");
  if (report.bisect) toc.emplace_back("bisect", "bisect");
  if (report.compare) toc.emplace_back("compare", "compare");
  out += "<nav>";
  for (const auto& [id, label] : toc) out += fmt::format("<a href=\"#{}\">{}</a>", id, label);
  out += "</nav>\n";

  out += loss_section(report);
  out += loss_scale_section(report);
  out += heatmap_section(report);
  out += dtype_section(report);
  if (report.kernels) out += kernels_section(report);
  if (report.fp8) out += fp8_section(*report.fp8);
  out += worst_section(report);
  out += nonfinite_section(report);
  if (report.bisect) out += bisect_section(*report.bisect, report.interrupted.has_value());
  if (report.compare) out += compare_section(*report.compare);
  if (report.spread) out += spread_section(*report.spread);
  out += fmt::format("<footer class=\"caption\">ampcheck {}, report schema {}</footer>\n",
                     esc(report.run.versions.ampcheck), esc(report.schema_version));
  out += kSortScript;
  out += "</body>\n</html>\n";
  return out;
}

std::string to_html(const KernelsReport& report) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += fmt::format("<title>ampcheck kernels — {} {}</title>\n", esc(report.profile), esc(report.verdict));
  out += kStyle;
  out += kErrorHook;
  out += "</head>\n<body>\n";
  out += fmt::format("<header>\n<h1>ampcheck kernels — {}</h1>\n", esc(report.profile));
  out += fmt::format("<div class=\"verdict verdict-{}\" id=\"verdict\"><span class=\"verdict-tag\">{}</span> {}</div>\n",
                     kernels_verdict_class(report.verdict), esc(report.verdict), esc(report.verdict_text));
  out += "</header>\n";
  const bool several = report.ranks.size() > 1;
  if (several) {
    out += "<nav>";
    for (std::size_t i = 0; i < report.ranks.size(); ++i)
      out += fmt::format("<a href=\"#profile-{}\">{}</a>", i + 1,
                         report.ranks[i].rank >= 0 ? fmt::format("rank {}", report.ranks[i].rank)
                                                   : fmt::format("profile {}", i + 1));
    if (!report.differences.empty()) out += "<a href=\"#differences\">differences</a>";
    out += "</nav>\n";
  }
  for (std::size_t i = 0; i < report.ranks.size(); ++i) out += rank_section(report.ranks[i], i, several);
  if (!report.differences.empty()) {
    out += section_open("differences", "What differs between the ranks");
    std::vector<std::string> headers = {"what"};
    for (const ProfileRank& r : report.ranks) headers.push_back(r.rank >= 0 ? fmt::format("rank {}", r.rank) : r.source);
    Table t(headers);
    for (const RankDifference& d : report.differences) {
      std::vector<std::string> cells = {d.what};
      cells.insert(cells.end(), d.per_rank.begin(), d.per_rank.end());
      t.row(cells);
    }
    out += t.render("rank-differences") + std::string(kSectionClose);
  }
  out += fmt::format("<footer class=\"caption\">ampcheck {}, kernels report schema {}</footer>\n", esc(report.ampcheck),
                     esc(report.schema_version));
  out += kSortScript;
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace ampcheck::reports