// The Chrome trace writer: the Trace Event Format as Perfetto and chrome://tracing read
// it (docs: "Trace Event Format", Google), checked field by field after parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/chrome_trace.h"

namespace ampcheck::reports {
namespace {

using Json = nlohmann::json;

std::vector<TraceSpan> sample_spans() {
  // Recorded out of order, as a trace joined from two sources is; the step contains
  // the linear, which contains its cast (nested spans on one track).
  return {
      {"matmul_kernel", "kernel", 12.5, 30.0, 1, {{"dtype", "float16"}, {"grid", "64x1x1"}}},
      {"linear", "forward", 10.0, 40.0, 0, {{"dtype", "float16"}, {"module", "fc1"}}},
      {"step", "optimizer", 0.0, 100.0, 0, {}},
      {"cast", "cast", 10.0, 2.25, 0, {{"from", "float32"}, {"to", "float16"}}},
      {"relu", "forward", 55.0, 3.0, 0, {{"dtype", "float16"}}},
  };
}

TEST(ChromeTrace, CompleteEventsWithNumbersAndArgs) {
  const Json doc = Json::parse(chrome_trace_json(sample_spans(), "ampcheck mlp O2"));
  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");
  std::vector<Json> spans;
  for (const Json& e : doc.at("traceEvents"))
    if (e.at("ph") == "X") spans.push_back(e);
  ASSERT_EQ(spans.size(), 5u);
  for (const Json& e : spans) {
    EXPECT_TRUE(e.at("ts").is_number()) << e;
    EXPECT_TRUE(e.at("dur").is_number()) << e;
    EXPECT_TRUE(e.at("pid").is_number_integer()) << e;
    EXPECT_TRUE(e.at("tid").is_number_integer()) << e;
    EXPECT_TRUE(e.at("name").is_string() && e.at("cat").is_string()) << e;
    EXPECT_TRUE(e.at("args").is_object()) << e;
  }
  const Json& linear = *std::find_if(spans.begin(), spans.end(), [](const Json& e) { return e["name"] == "linear"; });
  EXPECT_EQ(linear["cat"], "forward");
  EXPECT_EQ(linear["ts"].get<double>(), 10.0);
  EXPECT_EQ(linear["dur"].get<double>(), 40.0);
  EXPECT_EQ(linear["tid"], 0);
  EXPECT_EQ(linear["args"]["dtype"], "float16");
  EXPECT_EQ(linear["args"]["module"], "fc1");
  const Json& kernel = *std::find_if(spans.begin(), spans.end(), [](const Json& e) { return e["cat"] == "kernel"; });
  EXPECT_EQ(kernel["tid"], 1);
  EXPECT_EQ(kernel["ts"].get<double>(), 12.5);
}

TEST(ChromeTrace, SortedByStartWithParentsBeforeTheirChildren) {
  const Json doc = Json::parse(chrome_trace_json(sample_spans(), "ampcheck mlp O2"));
  std::vector<std::string> names;
  double last = -1;
  for (const Json& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    EXPECT_GE(e.at("ts").get<double>(), last) << e;
    last = e.at("ts").get<double>();
    names.push_back(e.at("name"));
  }
  // linear and cast both start at 10: the enclosing (longer) one comes first.
  EXPECT_EQ(names, (std::vector<std::string>{"step", "linear", "cast", "matmul_kernel", "relu"}));
}

TEST(ChromeTrace, MetadataNamesTheProcessAndBothTracks) {
  const Json doc = Json::parse(chrome_trace_json(sample_spans(), "ampcheck mlp O2"));
  std::string process;
  std::map<int, std::string> threads;
  bool metadata_first = true, seen_span = false;
  for (const Json& e : doc.at("traceEvents")) {
    if (e.at("ph") == "X") seen_span = true;
    if (e.at("ph") != "M") continue;
    metadata_first = metadata_first && !seen_span;
    if (e.at("name") == "process_name") process = e.at("args").at("name");
    if (e.at("name") == "thread_name") threads[e.at("tid").get<int>()] = e.at("args").at("name");
  }
  EXPECT_TRUE(metadata_first);
  EXPECT_EQ(process, "ampcheck mlp O2");
  EXPECT_EQ(threads[0], "ops");
  EXPECT_EQ(threads[1], "GPU kernels");
}

TEST(ChromeTrace, EmptyTraceAndOddTextStayValidJson) {
  const Json empty = Json::parse(chrome_trace_json({}, "ampcheck"));
  for (const Json& e : empty.at("traceEvents")) EXPECT_EQ(e.at("ph"), "M");
  const Json odd = Json::parse(chrome_trace_json(
      {{"a \"quoted\"\nname", "forward", 0, 1, 0, {{"note", "tab\there, \\ and \xc3\xa9"}}}}, "p \"q\""));
  bool found = false;
  for (const Json& e : odd.at("traceEvents"))
    if (e.at("ph") == "X") {
      found = true;
      EXPECT_EQ(e.at("name"), "a \"quoted\"\nname");
      EXPECT_EQ(e.at("args").at("note"), "tab\there, \\ and \xc3\xa9");
    }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace ampcheck::reports
