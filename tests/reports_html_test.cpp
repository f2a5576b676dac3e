// The HTML report (reports/html.h): self-contained, escaped, deterministic, and its plots
// drawn from the report's data. The expected counts are computed here from the report,
// not read back from the page.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "reports/html.h"
#include "tests/report_fixture.h"

namespace ampcheck::reports {
namespace {

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

// The <svg> element with this id, "" when absent.
std::string svg(const std::string& page, const std::string& id) {
  const std::size_t begin = page.find("<svg id=\"" + id + "\"");
  if (begin == std::string::npos) return "";
  const std::size_t end = page.find("</svg>", begin);
  return end == std::string::npos ? "" : page.substr(begin, end - begin);
}

// The points="..." lists of the series polylines in an SVG, one entry per polyline,
// each the number of "x,y" pairs.
std::vector<std::size_t> polyline_point_counts(const std::string& svg_text) {
  std::vector<std::size_t> counts;
  const std::string tag = "<polyline class=\"series\"";
  for (std::size_t at = svg_text.find(tag); at != std::string::npos; at = svg_text.find(tag, at + 1)) {
    const std::size_t p = svg_text.find("points=\"", at) + 8;
    const std::string points = svg_text.substr(p, svg_text.find('"', p) - p);
    counts.push_back(count(points, ","));
  }
  return counts;
}

TEST(ReportHtml, IsSelfContained) {
  const std::string page = to_html(testing::sample_report(true, true));
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
  EXPECT_EQ(page.find("@import"), std::string::npos);
  EXPECT_EQ(page.find("url("), std::string::npos);
  EXPECT_NE(page.find("window.onerror"), std::string::npos);
}

TEST(ReportHtml, HasThePlotsWithContent) {
  const std::string page = to_html(testing::sample_report(true, true));
  for (const char* id : {"loss-curve", "loss-scale", "exponent-heatmap"}) {
    const std::string s = svg(page, id);
    ASSERT_FALSE(s.empty()) << id;
    EXPECT_TRUE(s.find("<polyline") != std::string::npos || s.find("class=\"cell\"") != std::string::npos) << id;
  }
}

TEST(ReportHtml, IsByteIdenticalForEqualReports) {
  EXPECT_EQ(to_html(testing::sample_report(true, true)), to_html(testing::sample_report(true, true)));
  EXPECT_EQ(to_html(testing::sample_report(false, false)), to_html(testing::sample_report(false, false)));
}

TEST(ReportHtml, EscapesReportText) {
  Report r = testing::sample_report(true, true);
  r.ops[0].module = "<script>alert(1)</script>";
  r.ops[0].name = "<script>alert(1)</script>/linear#0";
  r.nonfinite.producer->module = "<script>alert(1)</script>";
  r.nonfinite.producers[0].module = "<script>alert(1)</script>";
  r.nonfinite.producers[1].lost[0].module = "<script>alert(1)</script>";
  r.nonfinite.intended[0].module = "<script>alert(1)</script>";
  r.compare->ops[0].module = "<script>alert(1)</script>";
  r.run.model = "a&b \"quoted\"";
  r.summary.verdict_text = "<b>bold</b>";
  const std::string page = to_html(r);
  EXPECT_EQ(page.find("<script>alert"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_EQ(page.find("<b>bold</b>"), std::string::npos);
  EXPECT_NE(page.find("&lt;b&gt;bold&lt;/b&gt;"), std::string::npos);
  EXPECT_NE(page.find("a&amp;b &quot;quoted&quot;"), std::string::npos);
}

TEST(ReportHtml, LossCurveHasOnePointPerStep) {
  const Report r = testing::sample_report(false, false);
  const std::vector<std::size_t> counts = polyline_point_counts(svg(to_html(r), "loss-curve"));
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0], r.steps.size());
}

TEST(ReportHtml, NonFiniteLossIsATickNotAPoint) {
  Report r = testing::sample_report(false, false);
  r.steps[2].loss = std::numeric_limits<double>::quiet_NaN();
  r.steps[3].loss = std::numeric_limits<double>::infinity();
  const std::string s = svg(to_html(r), "loss-curve");
  const std::vector<std::size_t> counts = polyline_point_counts(s);
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0], r.steps.size() - 2);
  EXPECT_EQ(count(s, "class=\"nonfinite\""), 2u);
}

TEST(ReportHtml, LossSpanningDecadesIsLogScale) {
  Report r = testing::sample_report(false, false);
  EXPECT_EQ(svg(to_html(r), "loss-curve").find("log scale"), std::string::npos);
  r.steps[3].loss = r.steps[0].loss / 1000;
  EXPECT_NE(svg(to_html(r), "loss-curve").find("log scale"), std::string::npos);
}

TEST(ReportHtml, CompareDrawsOneCurvePerLevelWithALegend) {
  const Report r = testing::sample_report(false, true);
  const std::string s = svg(to_html(r), "loss-curve");
  const std::vector<std::size_t> counts = polyline_point_counts(s);
  ASSERT_EQ(counts.size(), r.compare->runs.size());
  for (std::size_t i = 0; i < counts.size(); ++i) {
    EXPECT_EQ(counts[i], r.compare->runs[i].losses.size());
    EXPECT_NE(s.find("data-series=\"" + r.compare->runs[i].level + "\""), std::string::npos);
  }
  EXPECT_EQ(count(s, "<g class=\"legend\">"), r.compare->runs.size());
}

TEST(ReportHtml, LossScaleIsAStepPlotWithSkippedStepsMarked) {
  const Report r = testing::sample_report(false, false);
  std::size_t skipped = 0, inf_only = 0;
  for (const StepRecord& s : r.steps) {
    skipped += s.skipped;
    inf_only += s.found_inf && !s.skipped;
  }
  ASSERT_GT(skipped, 0u);
  const std::string s = svg(to_html(r), "loss-scale");
  const std::vector<std::size_t> counts = polyline_point_counts(s);
  ASSERT_EQ(counts.size(), 1u);
  EXPECT_EQ(counts[0], 2 * r.steps.size() - 1);  // a step plot: a corner between each two steps
  EXPECT_EQ(count(s, "<circle class=\"skipped\""), skipped);
  EXPECT_EQ(count(s, "<circle class=\"found-inf\""), inf_only);
}

TEST(ReportHtml, HeatmapHasARowPerTensorAndTheFloatRanges) {
  const Report r = testing::sample_report(true, true);
  std::size_t rows = 0, nonzero_bins = 0;
  for (const OpInstance& op : r.ops)
    for (const NamedNumerics& n : op.numerics) {
      ++rows;
      for (std::int64_t c : n.numerics.histogram.counts) nonzero_bins += c > 0;
      nonzero_bins += n.numerics.histogram.zero > 0;
    }
  const std::string s = svg(to_html(r), "exponent-heatmap");
  EXPECT_EQ(count(s, "class=\"row-label\""), rows);
  EXPECT_EQ(count(s, "class=\"cell\""), nonzero_bins);
  // fp16: subnormal min 2^-24, normal min 2^-14, max 65504 < 2^16 — from the format's definition.
  const int fp16_bias = 15, fp16_mantissa = 10;
  for (int e : {1 - fp16_bias - fp16_mantissa, 1 - fp16_bias, fp16_bias + 1})
    EXPECT_NE(s.find("<line class=\"range fp16\" data-x=\"" + std::to_string(e) + "\""), std::string::npos) << e;
  // bf16 (2^-133 .. 2^128) lies beyond this data's exponents: pointed at from the edges.
  for (int e : {-133, -126, 128})
    EXPECT_NE(s.find("class=\"range bf16 offscale\" data-x=\"" + std::to_string(e) + "\""), std::string::npos) << e;
}

TEST(ReportHtml, HeatmapDrawsBf16LinesWhenTheDataReachesThem) {
  Report r = testing::sample_report(false, false);
  r.ops[0].numerics[0].numerics.histogram.min_exponent = -140;
  const std::string s = svg(to_html(r), "exponent-heatmap");
  EXPECT_NE(s.find("<line class=\"range bf16\" data-x=\"-133\""), std::string::npos);
  EXPECT_NE(s.find("<line class=\"range bf16\" data-x=\"-126\""), std::string::npos);
}

TEST(ReportHtml, NonFiniteValuesGetTheirOwnColumn) {
  Report r = testing::sample_report(false, false);
  r.ops[1].numerics[0].numerics.histogram.nan = 3;
  r.ops[1].numerics[0].numerics.histogram.pos_inf = 2;
  const std::string s = svg(to_html(r), "exponent-heatmap");
  EXPECT_NE(s.find("NaN 3, +Inf 2, -Inf 0"), std::string::npos);
}

TEST(ReportHtml, OmitsBisectAndCompareWhenAbsent) {
  const std::string without = to_html(testing::sample_report(false, false));
  EXPECT_EQ(without.find("<section id=\"bisect\""), std::string::npos);
  EXPECT_EQ(without.find("<section id=\"compare\""), std::string::npos);
  EXPECT_EQ(without.find("href=\"#bisect\""), std::string::npos);
  const Report full = testing::sample_report(true, true);
  const std::string with = to_html(full);
  EXPECT_NE(with.find("<section id=\"bisect\""), std::string::npos);
  EXPECT_NE(with.find("<section id=\"compare\""), std::string::npos);
  // Every trial is a row of the trials table; the suggestions are shown as written.
  const std::size_t trials = with.find("<table class=\"sortable\" id=\"trials\">");
  ASSERT_NE(trials, std::string::npos);
  const std::string table = with.substr(trials, with.find("</table>", trials) - trials);
  EXPECT_EQ(count(table, "<tr>"), full.bisect->trials.size() + 1);
  EXPECT_NE(with.find("<pre class=\"snippet\">with paddle.amp.auto_cast(custom_black_list=[&#39;linear&#39;]):\n</pre>"),
            std::string::npos);
}

TEST(ReportHtml, EmptySectionsSayWhy) {
  Report r = testing::sample_report(false, false);
  for (OpInstance& op : r.ops) {
    op.numerics.clear();
    op.local_error.reset();
  }
  r.tensors.clear();
  r.steps.clear();
  const std::string page = to_html(r);
  EXPECT_EQ(page.find("<svg id=\"exponent-heatmap\""), std::string::npos);
  EXPECT_EQ(page.find("<svg id=\"loss-curve\""), std::string::npos);
  EXPECT_EQ(page.find("<svg id=\"loss-scale\""), std::string::npos);
  EXPECT_NE(page.find("numerics were not recorded: run with --inspect full"), std::string::npos);
  EXPECT_NE(page.find("no optimizer steps were recorded"), std::string::npos);
  EXPECT_NE(page.find("local errors were not measured"), std::string::npos);
}

TEST(ReportHtml, VerdictIsColouredByKind) {
  Report r = testing::sample_report(false, false);
  for (const char* verdict : {"healthy", "failed", "gradient_underflow", "amp_off", "reference", "unchecked", "interrupted"}) {
    r.summary.verdict = verdict;
    EXPECT_NE(to_html(r).find(std::string("class=\"verdict verdict-") + verdict + "\""), std::string::npos) << verdict;
  }
  r.summary.verdict = "x\" onmouseover=\"";
  EXPECT_NE(to_html(r).find("class=\"verdict verdict-unknown\""), std::string::npos);
}

// An interrupted run's page says how far the numbers go, where the eye lands first.
TEST(ReportHtml, InterruptedSaysHowFarItGot) {
  Report r = testing::sample_report(false, false);
  EXPECT_EQ(to_html(r).find("id=\"interrupted\""), std::string::npos);
  // The fixture's 4 steps, as if asked for 10: the page covers the 4 run.
  r.run.steps = 10;
  r.interrupted = Interruption{"SIGINT", 4, 10, 0};
  std::string page = to_html(r);
  EXPECT_NE(page.find("<div class=\"interrupted\" id=\"interrupted\">Interrupted after 4 of 10 steps, by SIGINT: "
                      "this page covers those steps only.</div>"),
            std::string::npos);
  EXPECT_NE(page.find("<dt>steps</dt><dd>4 of 10 (interrupted)</dd>"), std::string::npos);
  EXPECT_NE(page.find("<div class=\"v\">1 of 4</div>"), std::string::npos);  // skipped steps of those run
  EXPECT_EQ(count(page, "<div class=\"interrupted\""), 1u);

  // A later bisect-nan run stopped: the page's own run is complete, the search is not.
  r = testing::sample_report(true, false);
  r.bisect->found = false;
  r.interrupted = Interruption{"SIGTERM", 2, 4, 3};
  page = to_html(r);
  EXPECT_NE(page.find("bisect-nan run 3 was interrupted after 2 of 4 steps, by SIGTERM: the search did not finish"),
            std::string::npos);
  EXPECT_NE(page.find("<dt>steps</dt><dd>4</dd>"), std::string::npos);
  EXPECT_NE(page.find("<dt>found</dt><dd>no: the search was interrupted</dd>"), std::string::npos);
}

TEST(ReportHtml, WorstLocalErrorsShowTheRatioToTheRoundingFloor) {
  const Report r = testing::sample_report(false, false);
  const std::string page = to_html(r);
  const std::size_t table = page.find("id=\"local-errors\"");
  ASSERT_NE(table, std::string::npos);
  const LocalError& e = *r.ops[0].local_error;
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.3g", e.worst / e.floor_at_worst);
  EXPECT_NE(page.find(std::string("<td class=\"num\">") + ratio + "</td>", table), std::string::npos) << ratio;
}

// 1.3: every producer, each with what low precision lost, the intended masks, values lost
// to the range per op instance, the scaler's probing and gradient underflow.
TEST(ReportHtml, NonFiniteSectionListsEveryProducerAndItsCause) {
  Report r = testing::sample_report(false, false);
  r.run.amp.semantics = "paddle";
  r.run.amp.loss_scaling = "paddle";
  const std::string page = to_html(r);
  EXPECT_NE(page.find("<table class=\"sortable\" id=\"nonfinite-producer\">"), std::string::npos);
  EXPECT_NE(page.find("<h3>Also produced by (1 more)</h3>"), std::string::npos);
  EXPECT_NE(page.find("<table class=\"sortable\" id=\"nonfinite-producer-2\">"), std::string::npos);
  EXPECT_NE(page.find("<p class=\"lost\">log in &#39;head&#39; produced -Inf &lt;- its input 0 came from sigmoid in "
                      "&#39;gate&#39;, which flushed 3e-09 to 0 in float16"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("<table class=\"sortable\" id=\"intended\">"), std::string::npos);
  EXPECT_NE(page.find("<td>-inf mask: softmax maps it to 0</td>"), std::string::npos);
  EXPECT_NE(page.find("<table class=\"sortable\" id=\"range-loss\">"), std::string::npos);
  EXPECT_NE(page.find("<p class=\"note\" id=\"probing\">1 of 4 steps were skipped while the loss scaler came down "
                      "from 2^15 to 2^14: start it lower (Paddle GradScaler(init_loss_scaling=16384)"),
            std::string::npos)
      << page;
  EXPECT_EQ(page.find("id=\"zero-gradients\""), std::string::npos);

  ZeroGradients& z = r.nonfinite.zero_gradients.emplace();
  z.first_step = 1;
  z.steps = z.stepped = 4;
  z.dtype = "float16";
  z.scale_needed = 8192;
  const std::string under = to_html(r);
  EXPECT_NE(under.find("<p class=\"lost\" id=\"zero-gradients\">gradients underflow: every parameter gradient was 0 "
                       "in float16 from step 1 (4 of 4 steps); enable dynamic loss scaling or raise the scale to at "
                       "least 2^13 (Paddle GradScaler(init_loss_scaling=8192, use_dynamic_loss_scaling=True))</p>"),
            std::string::npos)
      << under;
}

// 1.4: the kernels section, with a bar per op type whose matrix work ran, split by where.
TEST(ReportHtml, GpuKernelsSectionHasTheSharesFindingsAndKernels) {
  const std::string page = to_html(testing::gpu_report());
  EXPECT_NE(page.find("<section id=\"kernels\">"), std::string::npos);
  EXPECT_NE(page.find("<a href=\"#kernels\">kernels</a>"), std::string::npos);
  EXPECT_NE(page.find("aria-label=\"tensor-core share per op type\""), std::string::npos);
  // conv2d: all 0.18 ms on CUDA cores; linear: all 0.04 ms on tensor cores; the cast has no bar.
  EXPECT_NE(page.find("0.18 ms, 0.0% on tensor cores"), std::string::npos);
  EXPECT_NE(page.find("0.04 ms, 100.0% on tensor cores"), std::string::npos);
  EXPECT_EQ(page.find(">cast (inserted by AMP)</text>"), std::string::npos);
  EXPECT_NE(page.find("class=\"finding-warning\""), std::string::npos);
  EXPECT_NE(page.find("class=\"finding-note\""), std::string::npos);
  EXPECT_NE(page.find("nvjet_sm90_hss_64x8_64x16_1x4_h_bz_TNT"), std::string::npos);
  EXPECT_NE(page.find("id=\"outside-kernels\""), std::string::npos);
  EXPECT_EQ(to_html(testing::sample_report(true, true)).find("id=\"kernels\""), std::string::npos);
  // The matrix work per op type by precision, from the instances' kernels: fc1's f16 GEMM
  // on tensor cores (the elementwise kernel multiplies nothing).
  const std::size_t precision = page.find("id=\"kernel-precision\"");
  ASSERT_NE(precision, std::string::npos);
  EXPECT_NE(page.find("<td>f16 TC 100%</td>", precision), std::string::npos);
}

// fp8 training: its findings, one table row per scaled tensor, and the headroom plot of the
// tensors the findings name, one point per step whose scale is finite (the infinite scale
// of a zero amax is not drawn); absent without fp8.
TEST(ReportHtml, Fp8SectionHasTheFindingsTheTensorsAndTheHeadroomOfTheNamedOnes) {
  EXPECT_EQ(to_html(testing::sample_report()).find("<section id=\"fp8\">"), std::string::npos);
  Report r = testing::sample_report();
  Fp8Training& f = r.fp8.emplace();
  f.recipe = "DelayedScaling(amax_history_len=16)";
  f.layers = {"l1", "l2"};
  for (const char* layer : {"l1", "l2"}) {
    Fp8TensorRecord t;
    t.layer = layer;
    t.tensor = "input";
    t.format = "E4M3";
    t.steps = {1, 2, 3, 4};
    t.amax = {1.0, 256.0, 1.0, 0.0};
    t.scale = {1.0, 448.0, 1.75, std::numeric_limits<double>::infinity()};
    t.count = {64, 64, 64, 64};
    t.saturated = {0, 63, 0, 0};
    t.flushed = {0, 0, 1, 0};
    t.zero = {0, 0, 0, 64};
    t.nan = {0, 0, 0, 0};
    t.min_exponent = -9;
    t.binades.assign(18, 1);
    f.tensors.push_back(t);
  }
  f.findings.push_back({"saturation", true, "l1", "input", 2, 1, 63.0 / 64, 63.0 / 64, 256, 448, "'l1' input: saturated <sic>"});
  const std::string page = to_html(r);
  const std::size_t begin = page.find("<section id=\"fp8\">");
  ASSERT_NE(begin, std::string::npos);
  const std::string section = page.substr(begin, page.find("</section>", begin) - begin);
  EXPECT_EQ(count(section, "<li class=\"finding-failure\">"), 1u);
  EXPECT_NE(section.find("&lt;sic&gt;"), std::string::npos);  // escaped
  EXPECT_EQ(count(section, "<tr>") - 1, f.tensors.size());     // the header row, then one per tensor
  EXPECT_NE(section.find("98.4%"), std::string::npos);          // 63 of 64 saturated, three digits
  const std::string plot = svg(page, "fp8-headroom");
  ASSERT_FALSE(plot.empty());
  // l1 alone (the finding's), its three finite-scale steps (the zero amax's inf scale is not a point).
  EXPECT_EQ(polyline_point_counts(plot), std::vector<std::size_t>{3});
  EXPECT_NE(plot.find("fp8 max"), std::string::npos);
  EXPECT_NE(page.find("<a href=\"#fp8\">"), std::string::npos);
  EXPECT_NE(section.find("a delayed scale lags a growing amax"), std::string::npos);
  // Under MXFP8 the caption speaks of each block's own scale, not of a lagging one.
  f.recipe = "MXFP8BlockScaling(fp8_format=Format.E4M3)";
  const std::string mx = to_html(r);
  EXPECT_NE(mx.find("under the scale of its own block of 32"), std::string::npos);
  EXPECT_EQ(mx.find("a delayed scale lags"), std::string::npos);
}

}  // namespace
}  // namespace ampcheck::reports
