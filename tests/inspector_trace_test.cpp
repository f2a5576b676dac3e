// The op trace, the GLOG-style log and the operator stats table on a model whose AMP
// decisions are known by construction: a Linear (white list: every fp32 input cast to
// fp16) feeding a softmax (black list: its fp16 input cast back to fp32), then a sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/amp/decorate.h"
#include "engine/amp/policy.h"
#include "engine/hooks.h"
#include "engine/nn/layers.h"
#include "inspector/trace.h"

namespace ampcheck::inspector {
namespace {

// block.fc (Linear 4 -> 3), then softmax in block's own forward.
class Block : public nn::Module {
 public:
  explicit Block(Generator& gen) : Module("Block") {
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 3, gen));
  }
  Tensor forward(const Tensor& x) override { return softmax((*fc)(x), -1); }
  std::shared_ptr<nn::Linear> fc;
};

class Model : public nn::Module {
 public:
  explicit Model(Generator& gen) : Module("Model") {
    block = register_module("block", std::make_shared<Block>(gen));
  }
  Tensor forward(const Tensor& x) override { return (*block)(x); }
  std::shared_ptr<Block> block;
};

amp::AmpOptions options(amp::Level level) {
  amp::AmpOptions o;
  o.level = level;
  o.dtype = DType::f16;
  return o;
}

// One training step's forward and backward at `level` (O2: parameters decorated to f16).
void run_step(amp::Level level, bool backward = true) {
  Generator gen(3);
  Model model(gen);
  const amp::AmpOptions o = options(level);
  amp::decorate(model, nullptr, o);
  const amp::Policy policy(o);
  const Tensor x = Tensor::randn({2, 4}, gen);
  begin_step();
  Tensor loss;
  {
    amp::Autocast on(&policy);
    loss = sum(model(x));
  }
  if (backward) loss.backward();
  end_step();
}

// The raw events, counted here without the inspector's code.
class Counter : public Observer {
 public:
  void on_op_end(const OpEvent& e) override {
    if (e.phase != Phase::forward || e.inserted_cast) return;
    if (e.out_dtype == DType::f16) ++fp16;
    else if (e.out_dtype == DType::bf16) ++bf16;
    else if (e.out_dtype == DType::f32) ++fp32;
    else ++other;
  }
  std::uint64_t fp16 = 0, bf16 = 0, fp32 = 0, other = 0;
};

const OpRecord& find(const OpTrace& t, Op op, Phase phase) {
  const auto& r = t.records();
  const auto it = std::find_if(r.begin(), r.end(), [&](const OpRecord& x) {
    return x.op == op && x.phase == phase && !x.inserted_cast;
  });
  if (it == r.end()) throw std::runtime_error("no record of " + std::string(op_name(op)));
  return *it;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Index of the first line at or after `from` that contains `what`, or -1.
long find_line(const std::vector<std::string>& lines, const std::string& what, long from = 0) {
  for (auto i = static_cast<std::size_t>(from); i < lines.size(); ++i)
    if (lines[i].find(what) != std::string::npos) return static_cast<long>(i);
  return -1;
}

std::string glog_of(amp::Level level, int verbosity) {
  std::ostringstream out;
  GlogWriter writer(out, GlogOptions{verbosity, false});
  add_observer(&writer);
  run_step(level);
  remove_observer(&writer);
  return out.str();
}

TEST(OpTrace, O1RecordsThePolicysDecisionsCastsAndKernels) {
  OpTrace trace;
  add_observer(&trace);
  run_step(amp::Level::O1);
  remove_observer(&trace);

  const OpRecord& lin = find(trace, Op::linear, Phase::forward);
  EXPECT_TRUE(lin.amp);
  EXPECT_EQ(lin.level, amp::Level::O1);
  EXPECT_EQ(lin.reason, amp::Reason::white);
  EXPECT_EQ(lin.module, "block.fc");
  EXPECT_EQ(lin.dtypes_before, (std::vector<DType>{DType::f32, DType::f32, DType::f32}));
  EXPECT_EQ(lin.dtypes_after, (std::vector<DType>{DType::f16, DType::f16, DType::f16}));
  ASSERT_EQ(lin.casts.size(), 3u);
  const std::vector<std::string> slots{"Input", "W", "Bias"};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lin.casts[i].input, i);
    EXPECT_EQ(lin.casts[i].slot, slots[i]);
    EXPECT_EQ(lin.casts[i].from, DType::f32);
    EXPECT_EQ(lin.casts[i].to, DType::f16);
  }
  EXPECT_EQ(lin.kernel_dtype, DType::f16);
  EXPECT_EQ(lin.out_dtype, DType::f16);
  EXPECT_EQ(lin.compute_dtype, DType::f32);  // fp16 GEMM accumulates in fp32
  EXPECT_FALSE(lin.kernel.empty());
  EXPECT_EQ(lin.shapes, (std::vector<Shape>{{2, 4}, {3, 4}, {3}}));
  EXPECT_EQ(lin.out_shape, (Shape{2, 3}));
  EXPECT_GE(lin.seconds, 0.0);
  EXPECT_GE(lin.step, 1);

  const OpRecord& sm = find(trace, Op::softmax, Phase::forward);
  EXPECT_EQ(sm.reason, amp::Reason::black);
  EXPECT_EQ(sm.module, "block");
  ASSERT_EQ(sm.casts.size(), 1u);
  EXPECT_EQ(sm.casts[0].slot, "X");
  EXPECT_EQ(sm.casts[0].from, DType::f16);
  EXPECT_EQ(sm.casts[0].to, DType::f32);
  EXPECT_EQ(sm.kernel_dtype, DType::f32);
  EXPECT_EQ(sm.out_dtype, DType::f32);
  EXPECT_GT(sm.sequence, lin.sequence);

  // Backward: one record per node, gradients flowing in the forward's dtypes.
  const OpRecord& sm_back = find(trace, Op::softmax, Phase::backward);
  const OpRecord& lin_back = find(trace, Op::linear, Phase::backward);
  EXPECT_EQ(sm_back.module, "block");
  EXPECT_EQ(lin_back.module, "block.fc");
  EXPECT_EQ(sm_back.kernel_dtype, DType::f32);
  EXPECT_EQ(lin_back.kernel_dtype, DType::f16);
  EXPECT_GT(lin_back.sequence, sm_back.sequence);  // reverse order

  // Inserted casts: three down for the linear, one up for the softmax; not in the rows.
  EXPECT_EQ(trace.inserted_cast_calls(), 4u);
  EXPECT_EQ(trace.inserted_casts().at({DType::f32, DType::f16}), 3u);
  EXPECT_EQ(trace.inserted_casts().at({DType::f16, DType::f32}), 1u);
  EXPECT_EQ(trace.op_stats().count("cast"), 0u);
  EXPECT_EQ(trace.op_stats().at("linear"), (DtypeCalls{1, 0, 0, 0}));
  EXPECT_EQ(trace.op_stats().at("softmax"), (DtypeCalls{0, 0, 1, 0}));
  EXPECT_EQ(trace.op_stats().at("sum"), (DtypeCalls{0, 0, 1, 0}));
  EXPECT_EQ(trace.op_stats().at("linear_grad"), (DtypeCalls{1, 0, 0, 0}));
  EXPECT_EQ(trace.dropped(), 0u);
}

TEST(OpTrace, StatsTableTotalsMatchAnIndependentCount) {
  OpTrace trace;
  Counter counter;
  add_observer(&trace);
  add_observer(&counter);
  run_step(amp::Level::O1);
  run_step(amp::Level::O2);
  remove_observer(&counter);
  remove_observer(&trace);

  const std::vector<std::string> lines = lines_of(operator_stats_table(trace));
  // The frame as PaddlePaddle's collect_operator_stats docstring prints it.
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[0],
            "<------------------------------------------------------- op list "
            "-------------------------------------------------------->");
  EXPECT_EQ(lines[1],
            "<--------------- Op Name ---------------- | -- FP16 Calls --- | -- BF16 Calls --- | "
            "--- FP32 Calls--- | -- Other Calls -->");
  std::uint64_t fp16 = 0, bf16 = 0, fp32 = 0, other = 0;
  std::size_t rows = 0;
  for (std::size_t i = 2; i < lines.size(); ++i) {
    if (lines[i].rfind("  ", 0) != 0 || lines[i].find('|') == std::string::npos) continue;
    ++rows;
    std::istringstream row(lines[i]);
    std::string name, bar;
    std::uint64_t c16 = 0, cb16 = 0, c32 = 0, co = 0;
    row >> name >> bar >> c16 >> bar >> cb16 >> bar >> c32 >> bar >> co;
    ASSERT_FALSE(row.fail()) << lines[i];
    if (name.ends_with("_grad")) continue;
    fp16 += c16;
    bf16 += cb16;
    fp32 += c32;
    other += co;
  }
  EXPECT_EQ(rows, trace.op_stats().size());
  EXPECT_EQ(fp16, counter.fp16);
  EXPECT_EQ(bf16, counter.bf16);
  EXPECT_EQ(fp32, counter.fp32);
  EXPECT_EQ(other, counter.other);
  EXPECT_EQ(fp16, 2u);  // the two linears
  EXPECT_NE(find_line(lines, " op count: " + std::to_string(rows) + " "), -1);
  // O1: 3 casts down and 1 up; O2: the input down (parameters already fp16) and 1 up.
  EXPECT_NE(find_line(lines, "inserted casts (AMP policy, not in the rows above): 6 "
                             "(float -> float16: 4, float16 -> float: 2)"),
            -1);
}

TEST(GlogWriter, O2ShowsTheWhiteOpInFloat16ThenTheCastThenTheBlackOpInFloat) {
  const std::vector<std::string> lines = lines_of(glog_of(amp::Level::O2, 5));
  const long trace_lin = find_line(lines, "] Trace Op: linear");
  const long run_lin = find_line(lines, "] Pure fp16 run operator: linear", trace_lin);
  const long cast_in = find_line(lines, "] Op(linear): Cast Input from float to float16", run_lin);
  const long key_lin = find_line(lines, "] expected_kernel_key:data_type[float16]:", cast_in);
  const long trace_sm = find_line(lines, "] Trace Op: softmax", key_lin);
  const long run_sm = find_line(lines, "] Pure fp16 run operator: softmax", trace_sm);
  const long cast_sm = find_line(lines, "] Op(softmax): Cast X from float16 to float", run_sm);
  const long key_sm = find_line(lines, "] expected_kernel_key:data_type[float]:", cast_sm);
  for (long at : {trace_lin, run_lin, cast_in, key_lin, trace_sm, run_sm, cast_sm, key_sm})
    EXPECT_NE(at, -1);
  EXPECT_EQ(run_lin, trace_lin + 1);
  EXPECT_EQ(cast_in, run_lin + 1);
  EXPECT_EQ(key_sm, cast_sm + 1);
  // O2 decorated the parameters: only the input needs a cast.
  EXPECT_EQ(find_line(lines, "Op(linear): Cast W"), -1);
  // The policy's cast ops are said by the Cast lines, not traced as ops of their own.
  EXPECT_EQ(find_line(lines, "Trace Op: cast"), -1);
  EXPECT_NE(find_line(lines, "] Start to execute grad op softmax_grad"), -1);
  for (const std::string& l : lines) EXPECT_EQ(l.rfind("I0000 00:00:00.000000     0 trace.cpp:", 0), 0u) << l;
}

TEST(GlogWriter, O1ShowsAutoMixedPrecisionAndCastsOfEveryLinearInput) {
  const std::vector<std::string> lines = lines_of(glog_of(amp::Level::O1, 5));
  const long run_lin = find_line(lines, "] Auto mixed precision run operator: linear");
  ASSERT_NE(run_lin, -1);
  long at = run_lin;
  for (const char* slot : {"Input", "W", "Bias"}) {
    const long next = find_line(lines, std::string("] Op(linear): Cast ") + slot + " from float to float16", at);
    EXPECT_EQ(next, at + 1) << slot;
    at = next;
  }
  EXPECT_EQ(find_line(lines, "] expected_kernel_key:data_type[float16]:", at), at + 1);
  EXPECT_EQ(find_line(lines, "Pure fp16"), -1);
}

TEST(GlogWriter, BelowVerbosity5WritesNothing) {
  EXPECT_EQ(glog_of(amp::Level::O1, 4), "");
  EXPECT_EQ(glog_of(amp::Level::O1, 0), "");
}

// "I1122 01:02:03.456789  1234 trace.cpp:87] text": glog's prefix, checked by hand
// (std::regex trips a GCC 12 false warning in the sanitizer build).
bool has_glog_prefix(const std::string& l) {
  auto digits = [&](std::size_t at, std::size_t n) {
    if (at + n > l.size()) return false;
    for (std::size_t i = at; i < at + n; ++i)
      if (l[i] < '0' || l[i] > '9') return false;
    return true;
  };
  if (l.size() < 30 || l[0] != 'I' || !digits(1, 4) || l[5] != ' ' || !digits(6, 2) || l[8] != ':' ||
      !digits(9, 2) || l[11] != ':' || !digits(12, 2) || l[14] != '.' || !digits(15, 6) || l[21] != ' ')
    return false;
  std::size_t i = 21;
  while (i < l.size() && l[i] == ' ') ++i;
  const std::size_t pid = i;
  while (i < l.size() && l[i] >= '0' && l[i] <= '9') ++i;
  if (i == pid || l.compare(i, 11, " trace.cpp:") != 0) return false;
  i += 11;
  const std::size_t line = i;
  while (i < l.size() && l[i] >= '0' && l[i] <= '9') ++i;
  return i > line && l.compare(i, 2, "] ") == 0 && i + 2 < l.size();
}

TEST(GlogWriter, PrefixHasGlogsShapeWithTimestamps) {
  std::ostringstream out;
  GlogWriter writer(out, GlogOptions{5, true});
  add_observer(&writer);
  exp(Tensor::ones({2}));
  remove_observer(&writer);
  const std::vector<std::string> lines = lines_of(out.str());
  ASSERT_FALSE(lines.empty());
  for (const std::string& l : lines) EXPECT_TRUE(has_glog_prefix(l)) << l;
  EXPECT_NE(find_line(lines, "] Trace Op: exp"), -1);
  EXPECT_EQ(find_line(lines, "run operator"), -1);  // no autocast scope: no AMP line
}

TEST(GlogLevel, ParsesGlogV) {
  EXPECT_EQ(parse_glog_level("5"), 5);
  EXPECT_EQ(parse_glog_level(" 3 "), 3);
  EXPECT_EQ(parse_glog_level("+4"), 4);
  EXPECT_EQ(parse_glog_level("-1"), -1);
  EXPECT_EQ(parse_glog_level(""), std::nullopt);
  EXPECT_EQ(parse_glog_level("five"), std::nullopt);
  EXPECT_EQ(parse_glog_level("5x"), std::nullopt);

  ::setenv("GLOG_v", "5", 1);
  EXPECT_EQ(glog_level_from_env(), 5);
  ::setenv("GLOG_v", "loud", 1);
  EXPECT_EQ(glog_level_from_env(), 0);
  ::unsetenv("GLOG_v");
  EXPECT_EQ(glog_level_from_env(), 0);
}

TEST(OpTrace, RecordsOnlyWhileAttached) {
  OpTrace trace;
  run_step(amp::Level::O1, false);
  EXPECT_TRUE(trace.records().empty());
  EXPECT_EQ(trace.calls(), 0u);

  add_observer(&trace);
  run_step(amp::Level::O1, false);
  remove_observer(&trace);
  const std::uint64_t heard = trace.calls();
  EXPECT_GT(heard, 0u);
  EXPECT_EQ(trace.records().size(), heard);

  run_step(amp::Level::O1, false);
  EXPECT_EQ(trace.calls(), heard);
}

TEST(OpTrace, KeepsTheFirstRecordsAndCountsTheRest) {
  OpTrace trace(OpTraceOptions{2});
  add_observer(&trace);
  run_step(amp::Level::O1);
  remove_observer(&trace);
  ASSERT_EQ(trace.records().size(), 2u);
  EXPECT_GT(trace.calls(), 2u);
  EXPECT_EQ(trace.dropped(), trace.calls() - 2);
  // Every call still reaches the stats.
  std::uint64_t counted = trace.inserted_cast_calls();
  for (const auto& [name, c] : trace.op_stats()) counted += c.total();
  EXPECT_EQ(counted, trace.calls());
  // The first two calls are the policy's casts of the linear's input and weight.
  EXPECT_TRUE(trace.records()[0].inserted_cast);
  EXPECT_EQ(trace.records()[0].op, Op::cast);
  EXPECT_LT(trace.records()[0].sequence, trace.records()[1].sequence);
}

}  // namespace
}  // namespace ampcheck::inspector
