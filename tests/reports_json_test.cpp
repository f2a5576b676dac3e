// The JSON form of the report (reports/json.h): writer, reader, and the JSON Schema
// (reports/schema/report.schema.json) checked by an independent validator (python3's
// jsonschema) against what the writer produces.
#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <algorithm>
#include <cmath>
#include <cstdio>  // popen
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "reports/atomic_file.h"
#include "reports/json.h"
#include "tests/report_fixture.h"

namespace ampcheck::reports {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

// The message from_json throws for `text`, or "(no error)".
std::string read_error(const std::string& text) {
  try {
    from_json(text, "run.json");
  } catch (const ReportError& e) {
    return e.what();
  }
  return "(no error)";
}

ordered_json sample_doc() { return ordered_json::parse(to_json(testing::sample_report())); }

TEST(ReportJson, RoundTripGivesTheSameText) {
  for (bool bisect : {false, true}) {
    for (bool compare : {false, true}) {
      const std::string first = to_json(testing::sample_report(bisect, compare));
      const std::string second = to_json(from_json(first, "run.json"));
      EXPECT_EQ(second, first) << "bisect " << bisect << " compare " << compare;
    }
  }
}

TEST(ReportJson, ReadBackValuesMatchTheReport) {
  const Report original = testing::sample_report();
  const Report r = from_json(to_json(original), "run.json");
  EXPECT_EQ(r.schema_version, "1.12");
  EXPECT_EQ(r.run.model_description, original.run.model_description);
  EXPECT_EQ(r.run.seed, 7u);
  EXPECT_EQ(r.run.amp.custom_black_list, std::vector<std::string>{"softmax"});
  EXPECT_EQ(r.run.amp.init_loss_scaling, 32768.0);
  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_EQ(r.steps[0].loss, 1.0986);
  EXPECT_TRUE(r.steps[0].skipped);
  EXPECT_EQ(r.op_types, original.op_types);
  EXPECT_EQ(r.inserted_casts, original.inserted_casts);
  ASSERT_EQ(r.ops.size(), 3u);
  EXPECT_EQ(r.ops[0].casts, original.ops[0].casts);
  EXPECT_EQ(r.ops[0].numerics[0].numerics.histogram, original.ops[0].numerics[0].numerics.histogram);
  EXPECT_EQ(r.ops[0].numerics[0].numerics.min_nonzero_abs, 0x1p-30);
  EXPECT_EQ(r.ops[0].numerics[0].numerics.dynamic_range_log2, 46.1);
  ASSERT_TRUE(r.ops[0].local_error.has_value());
  EXPECT_EQ(r.ops[0].local_error->worst, 4.9e-4);
  EXPECT_FALSE(r.ops[1].local_error.has_value());
  EXPECT_EQ(r.nonfinite.propagators, original.nonfinite.propagators);
  EXPECT_EQ(r.summary.verdict_text, original.summary.verdict_text);
  ASSERT_TRUE(r.bisect.has_value());
  EXPECT_EQ(r.bisect->suggestion.pytorch, original.bisect->suggestion.pytorch);
  ASSERT_TRUE(r.compare.has_value());
  EXPECT_EQ(r.compare->runs[1].losses, original.compare->runs[1].losses);
}

// 1.7: full mode's sampling goes out and comes back; a run that measured every step has
// no such field, so its report is 1.6's but for the version.
TEST(ReportJson, FullModeSamplingComesBackAndIsAbsentWhenEveryStepWasMeasured) {
  Report original = testing::sample_report();
  EXPECT_EQ(ordered_json::parse(to_json(original))["run"].count("inspect_every"), 0u);
  original.run.inspect_every = 10;
  const ordered_json doc = ordered_json::parse(to_json(original));
  EXPECT_EQ(doc["run"]["inspect_every"], 10);
  const Report r = from_json(to_json(original), "run.json");
  EXPECT_EQ(r.run.inspect_every, std::optional<std::int64_t>{10});
  // A damaged or hostile N (the text multiplies it) is refused, naming the field.
  for (const std::int64_t bad : {std::int64_t{1}, std::int64_t{-3}, std::numeric_limits<std::int64_t>::max()}) {
    ordered_json hostile = ordered_json::parse(to_json(original));
    hostile["run"]["inspect_every"] = bad;
    EXPECT_NE(read_error(hostile.dump()).find("run.inspect_every: expected the N of run --inspect-every N"),
              std::string::npos)
        << bad << ": " << read_error(hostile.dump());
  }
}

// 1.8: the fp8 calls of a row, written where there are some and read back; a count that
// is not among the row's `other` calls is refused naming the field.
TEST(ReportJson, Fp8CallsComeBackAndAreAbsentWhereNoneRan) {
  Report original = testing::sample_report();
  EXPECT_EQ(ordered_json::parse(to_json(original))["op_types"][0]["calls"].count("fp8"), 0u);
  original.op_types.push_back({"fp8_linear", {0, 0, 0, 6, 6}});
  const ordered_json doc = ordered_json::parse(to_json(original));
  EXPECT_EQ(doc["op_types"].back()["calls"]["fp8"], 6);
  const Report r = from_json(to_json(original), "run.json");
  EXPECT_EQ(r.op_types.back().calls.fp8, std::optional<std::int64_t>{6});
  EXPECT_EQ(r.op_types.front().calls.fp8, std::nullopt);
  ordered_json hostile = doc;
  hostile["op_types"].back()["calls"]["fp8"] = 7;
  EXPECT_NE(read_error(hostile.dump()).find(".calls.fp8: expected the fp8 calls among the 6 other calls, got 7"),
            std::string::npos)
      << read_error(hostile.dump());
}

// 1.9: an fp8 run's casts and findings read back as written (an infinite scale as "inf"),
// validate against the schema, and a report without fp8 has no such key.
Report fp8_report() {
  Report r = testing::sample_report();
  Fp8Training& f = r.fp8.emplace();
  f.recipe = "DelayedScaling(margin=0, fp8_format=Format.HYBRID, amax_history_len=16, amax_compute_algo=\"max\", reduce_amax=True)";
  f.layers = {"lora.a", "lora.b"};
  f.kept = {"head ([4, 32]: not multiples of 16)"};
  Fp8TensorRecord t;
  t.layer = "lora.b";
  t.tensor = "weight";
  t.format = "E4M3";
  t.min_exponent = -9;
  t.binades.assign(18, 0);
  t.binades[9] = 512;
  t.steps = {1, 2};
  t.amax = {0.0, 0.0125};
  t.scale = {1.0, std::numeric_limits<double>::infinity()};
  t.count = {512, 512};
  t.saturated = {0, 512};
  t.flushed = {0, 0};
  t.zero = {512, 0};
  t.nan = {0, 0};
  f.tensors.push_back(t);
  f.findings.push_back({"zero_amax_infinite_scale", true, "lora.b", "weight", 2, 29, 1.0, 1.0, 0.0125,
                        std::numeric_limits<double>::infinity(), "'lora.b' weight was cast to E4M3 at step 2 with scale inf"});
  return r;
}

TEST(ReportJson, Fp8CastsAndFindingsRoundTrip) {
  EXPECT_FALSE(ordered_json::parse(to_json(testing::sample_report())).contains("fp8"));
  const Report original = fp8_report();
  const std::string text = to_json(original);
  const ordered_json doc = ordered_json::parse(text);
  EXPECT_EQ(doc["fp8"]["tensors"][0]["scale"][1], "inf");
  EXPECT_EQ(doc["fp8"]["findings"][0]["kind"], "zero_amax_infinite_scale");
  const Report back = from_json(text, "run.json");
  ASSERT_TRUE(back.fp8.has_value());
  EXPECT_EQ(back.fp8->tensors[0].saturated[1], 512);
  EXPECT_TRUE(std::isinf(back.fp8->tensors[0].scale[1]));
  EXPECT_EQ(back.fp8->kept, original.fp8->kept);
  EXPECT_EQ(to_json(back), text);
  // A per-step array of another length is a damaged file, named, not read past its end.
  ordered_json bad = doc;
  bad["fp8"]["tensors"][0]["flushed"].erase(1);
  EXPECT_NE(read_error(bad.dump()).find("fp8.tensors[0]: expected one amax, scale, count, saturated, flushed, zero and "
                                        "nan per step (2 steps), got an array of 1"),
            std::string::npos)
      << read_error(bad.dump());
  // A count beyond the values cast (or below 0) is refused: the text and HTML subtract them.
  bad = doc;
  bad["fp8"]["tensors"][0]["zero"][0] = 513;
  EXPECT_NE(read_error(bad.dump()).find("fp8.tensors[0].zero[0]: expected a count from 0 to the 512 values cast, got 513"),
            std::string::npos)
      << read_error(bad.dump());
  bad = doc;
  bad["fp8"]["tensors"][0]["count"][1] = -(std::int64_t{1} << 62);
  EXPECT_NE(read_error(bad.dump()).find("fp8.tensors[0].saturated[1]"), std::string::npos) << read_error(bad.dump());
}

TEST(ReportJson, ATwinsGradientsRoundTripAndAreAbsentWhereNoneWereSetBesideIt) {
  Report r = testing::sample_report();
  Twin& t = r.compare.emplace().twin.emplace();
  t.script = "python train.py";
  t.amp_losses = {1.0, 0.5};
  t.fp32 = {{0, {1.0, 0.4}}};
  t.gap = {0.0, 0.1};
  t.verdict = "no_yardstick";
  const std::string without = to_json(r);
  EXPECT_FALSE(ordered_json::parse(without)["compare"]["twin"].contains("gradients"));
  t.gradients = std::vector<TwinGradient>{{"2.weight", 0.03}, {"0.bias", 0.0}};
  const std::string text = to_json(r);
  const ordered_json doc = ordered_json::parse(text);
  EXPECT_EQ(doc["compare"]["twin"]["gradients"][0]["parameter"], "2.weight");
  const Report back = from_json(text, "run.json");
  ASSERT_TRUE(back.compare && back.compare->twin && back.compare->twin->gradients);
  EXPECT_EQ(back.compare->twin->gradients->size(), 2u);
  EXPECT_EQ((*back.compare->twin->gradients)[0].difference, 0.03);
  EXPECT_EQ(to_json(back), text);
  // A 1.11 report (no gradients) still reads.
  EXPECT_FALSE(from_json(without, "run.json").compare->twin->gradients.has_value());
}

TEST(ReportJson, NonFiniteDoublesAreStringsAndComeBackInClass) {
  Report original = testing::sample_report();
  original.steps[2].loss = -std::numeric_limits<double>::infinity();
  const std::string text = to_json(original);
  const ordered_json doc = ordered_json::parse(text);
  EXPECT_EQ(doc["steps"][2]["loss"], "-inf");
  EXPECT_EQ(doc["nonfinite"]["producer"]["inputs"][1]["min"], "nan");
  EXPECT_EQ(doc["bisect"]["trials"][0]["final_loss"], "inf");
  EXPECT_EQ(doc["bisect"]["trials"][2]["final_loss"], "nan");
  // Finite values stay numbers, integers integers.
  EXPECT_TRUE(doc["steps"][2]["loss_scale"].is_number_float());
  EXPECT_TRUE(doc["steps"][2]["step"].is_number_integer());
  EXPECT_NE(text.find("\"loss_scale\": 16384.0"), std::string::npos);

  const Report r = from_json(text, "run.json");
  EXPECT_TRUE(std::isinf(r.steps[2].loss) && r.steps[2].loss < 0);
  const TensorRange& in1 = r.nonfinite.producer->inputs[1];
  EXPECT_TRUE(std::isnan(in1.min) && std::isnan(in1.max) && std::isnan(in1.absmax));
  EXPECT_EQ(r.nonfinite.producer->inputs[0].max, 60000.0);
  EXPECT_TRUE(std::isinf(r.bisect->trials[0].final_loss) && r.bisect->trials[0].final_loss > 0);
  EXPECT_TRUE(std::isnan(r.bisect->trials[2].final_loss));
}

TEST(ReportJson, EqualReportsGiveIdenticalBytes) {
  const std::string a = to_json(testing::sample_report());
  const std::string b = to_json(testing::sample_report());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.substr(0, 2), "{\n");
  EXPECT_EQ(a.substr(a.size() - 2), "}\n");
  EXPECT_NE(a.find("\n  \"schema_version\": \"1.12\",\n"), std::string::npos);
}

// 1.2: the spread of `run --seeds N` goes out and comes back whole; a report of 1.1 that
// names its CPU conversion path reads as it was written.
TEST(ReportJson, SpreadRoundTripsAndAnOldVersionsKeyIsIgnored) {
  Report original = testing::sample_report();
  Spread& sp = original.spread.emplace();
  sp.seeds = {{7, 0.8125, 0.75, 1, "healthy"}, {8, 0.5, 1.0 / 3.0, 0, "failed"}};
  LowPrecisionSeen seen;
  seen.key = "fc1/linear#0 out";
  seen.f16.overflow = 2;
  seen.bf16.underflow = 9;
  sp.low_precision = {seen};
  sp.local_error = {{"fc1/linear#0", 1.5e-4}};
  const std::string text = to_json(original);
  const Report back = from_json(text, "run.json");
  ASSERT_TRUE(back.spread.has_value());
  ASSERT_EQ(back.spread->seeds.size(), 2u);
  EXPECT_EQ(back.spread->seeds[1].seed, 8u);
  EXPECT_EQ(back.spread->seeds[1].accuracy, 1.0 / 3.0);
  EXPECT_EQ(back.spread->seeds[1].verdict, "failed");
  ASSERT_EQ(back.spread->low_precision.size(), 1u);
  EXPECT_EQ(back.spread->low_precision[0].f16, seen.f16);
  EXPECT_EQ(back.spread->low_precision[0].bf16, seen.bf16);
  ASSERT_EQ(back.spread->local_error.size(), 1u);
  EXPECT_EQ(back.spread->local_error[0].mean, 1.5e-4);
  EXPECT_EQ(to_json(back), text);

  nlohmann::json old = nlohmann::json::parse(to_json(testing::sample_report()));
  old["schema_version"] = "1.1";
  old["run"]["versions"]["cpu_conversions"] = "avx512_bf16";
  EXPECT_EQ(from_json(old.dump(), "old.json").run.versions.cpu_conversions, "avx512_bf16");
  EXPECT_EQ(back.run.versions.cpu_conversions, kCpuPathsAlike);
}

// 1.3: every producer with what low precision lost, the intended -Inf masks, the scaler's
// probing, gradient underflow and each op instance's range loss go out and come back.
TEST(ReportJson, NonFiniteFindingsOfOneThreeRoundTrip) {
  Report original = testing::sample_report(false, false);
  ZeroGradients& z = original.nonfinite.zero_gradients.emplace();
  z.first_step = 1;
  z.steps = 200;
  z.stepped = 200;
  z.dtype = "float16";
  z.scale_needed = 8192;
  z.evidence = LostValue{"grad_output", "cast", "", "backward", 1, true, "underflow", "float16", 1.1e-8, 180, 0x1p-24};
  z.loss = 1.1e-6;
  z.initial_loss = std::numeric_limits<double>::quiet_NaN();
  const std::string text = to_json(original);
  const Report back = from_json(text, "run.json");
  ASSERT_EQ(back.nonfinite.producers.size(), 2u);
  EXPECT_EQ(back.nonfinite.producers[1].op, "log");
  ASSERT_EQ(back.nonfinite.producers[1].lost.size(), 1u);
  const LostValue& l = back.nonfinite.producers[1].lost[0];
  EXPECT_EQ(l.input, "input 0");
  EXPECT_EQ(l.op, "sigmoid");
  EXPECT_EQ(l.kind, "underflow");
  EXPECT_EQ(l.value, 3e-9);
  EXPECT_EQ(l.limit, 0x1p-24);
  ASSERT_EQ(back.nonfinite.producer->lost.size(), 1u);
  EXPECT_EQ(back.nonfinite.producer->lost[0].kind, "overflow");
  ASSERT_EQ(back.nonfinite.intended.size(), 1u);
  EXPECT_EQ(back.nonfinite.intended[0].values, 96);
  EXPECT_EQ(back.nonfinite.intended[0].readers, std::vector<std::string>{"softmax"});
  ASSERT_TRUE(back.nonfinite.probing.has_value());
  EXPECT_EQ(back.nonfinite.probing->scale_to, 16384.0);
  ASSERT_TRUE(back.nonfinite.zero_gradients.has_value());
  EXPECT_EQ(back.nonfinite.zero_gradients->scale_needed, 8192.0);
  ASSERT_TRUE(back.nonfinite.zero_gradients->evidence.has_value());
  EXPECT_TRUE(back.nonfinite.zero_gradients->evidence->inserted_cast);
  EXPECT_EQ(back.nonfinite.zero_gradients->loss, 1.1e-6);
  EXPECT_TRUE(std::isnan(back.nonfinite.zero_gradients->initial_loss));
  ASSERT_TRUE(back.ops[0].range_loss.has_value());
  EXPECT_EQ(back.ops[0].range_loss->overflow, 2);
  EXPECT_EQ(back.ops[0].range_loss->first_value, 70000.0);
  EXPECT_FALSE(back.ops[1].range_loss.has_value());
  EXPECT_EQ(to_json(back), text);
}

// A file of an older minor lacks the fields added since: they read as empty. A file that
// says it is 1.3 must have them.
TEST(ReportJson, FieldsAddedInOneThreeAreOptionalOnlyInOlderFiles) {
  ordered_json doc = sample_doc();
  doc["schema_version"] = "1.2";
  doc["nonfinite"].erase("producers");
  doc["nonfinite"].erase("intended");
  doc["nonfinite"].erase("probing");
  doc["nonfinite"]["producer"].erase("lost");
  doc["ops"][0].erase("range_loss");
  const Report old = from_json(doc.dump(), "old.json");
  EXPECT_TRUE(old.nonfinite.producers.empty());
  EXPECT_TRUE(old.nonfinite.intended.empty());
  EXPECT_FALSE(old.nonfinite.probing.has_value());
  ASSERT_TRUE(old.nonfinite.producer.has_value());
  EXPECT_TRUE(old.nonfinite.producer->lost.empty());
  EXPECT_FALSE(old.ops[0].range_loss.has_value());

  doc = sample_doc();
  doc["nonfinite"].erase("producers");
  EXPECT_EQ(read_error(doc.dump()), "run.json: nonfinite: missing field \"producers\"");
  doc = sample_doc();
  doc["nonfinite"]["producers"][1].erase("lost");
  EXPECT_EQ(read_error(doc.dump()), "run.json: nonfinite.producers[1]: missing field \"lost\"");
}

TEST(ReportJson, TopLevelKeysInOrder) {
  // items() must iterate a named document: on a temporary it would dangle.
  const ordered_json doc = sample_doc();
  auto keys_of = [](const ordered_json& object) {
    std::vector<std::string> keys;
    for (const auto& [key, value] : object.items()) keys.push_back(key);
    return keys;
  };
  EXPECT_EQ(keys_of(doc), (std::vector<std::string>{"schema_version", "run", "steps", "op_types",
                                                    "inserted_casts", "ops", "tensors", "swamping",
                                                    "nonfinite", "summary", "bisect", "compare"}));
  EXPECT_EQ(keys_of(doc["ops"][0]["numerics"][0]["numerics"]["histogram"]),
            (std::vector<std::string>{"min_exponent", "counts", "zero", "nan", "pos_inf", "neg_inf",
                                      "below", "above"}));
  EXPECT_EQ(keys_of(doc["steps"][0]),
            (std::vector<std::string>{"step", "loss", "loss_scale", "found_inf", "skipped"}));
  EXPECT_EQ(doc["nonfinite"]["propagators"][0], (ordered_json{{"type", "relu"}, {"events", 2}}));
}

TEST(ReportJson, OptionalSectionsAbsentWhenEmpty) {
  Report r = testing::sample_report(false, false);
  r.nonfinite.producer.reset();
  const ordered_json doc = ordered_json::parse(to_json(r));
  EXPECT_FALSE(doc.contains("bisect"));
  EXPECT_FALSE(doc.contains("compare"));
  EXPECT_FALSE(doc["nonfinite"].contains("producer"));
  EXPECT_TRUE(doc["ops"][0].contains("local_error"));
  EXPECT_FALSE(doc["ops"][1].contains("local_error"));
  const Report back = from_json(doc.dump(), "run.json");
  EXPECT_FALSE(back.bisect || back.compare || back.nonfinite.producer || back.ops[1].local_error);
  EXPECT_TRUE(back.ops[0].local_error.has_value());
}

// Since 1.1: `interrupted`, right after `run`, only when a signal stopped the training.
TEST(ReportJson, InterruptedIsWrittenAfterRunAndReadBack) {
  Report original = testing::sample_report(false, false);
  original.interrupted = Interruption{"SIGINT", 3, 4, 0};
  const std::string text = to_json(original);
  const ordered_json doc = ordered_json::parse(text);
  std::vector<std::string> keys;
  for (const auto& [key, value] : doc.items()) keys.push_back(key);
  ASSERT_GE(keys.size(), 4u);
  EXPECT_EQ(keys[1], "run");
  EXPECT_EQ(keys[2], "interrupted");
  EXPECT_EQ(keys[3], "steps");
  EXPECT_EQ(doc["interrupted"],
            (ordered_json{{"signal", "SIGINT"}, {"steps_run", 3}, {"steps_requested", 4}, {"bisect_run", 0}}));
  const Report back = from_json(text, "run.json");
  ASSERT_TRUE(back.interrupted.has_value());
  EXPECT_EQ(back.interrupted->signal, "SIGINT");
  EXPECT_EQ(back.interrupted->steps_run, 3);
  EXPECT_EQ(back.interrupted->steps_requested, 4);
  EXPECT_EQ(back.interrupted->bisect_run, 0);
  EXPECT_EQ(to_json(back), text);

  ordered_json broken = doc;
  broken["interrupted"].erase("steps_run");
  EXPECT_EQ(read_error(broken.dump()), "run.json: interrupted: missing field \"steps_run\"");
}

TEST(ReportJson, AOneZeroReportReadsAsComplete) {
  ordered_json doc = sample_doc();
  EXPECT_FALSE(doc.contains("interrupted"));  // a complete run has no marker
  doc["schema_version"] = "1.0";
  const Report r = from_json(doc.dump(), "run.json");
  EXPECT_FALSE(r.interrupted.has_value());
  EXPECT_EQ(r.schema_version, "1.0");
}

TEST(ReportJson, NotJsonNamesTheSource) {
  const std::string cut = "{\"schema_version\": \"1.0\",";
  const std::string e = read_error(cut);
  // The text ends after its last byte: the error is at the column past it.
  EXPECT_EQ(e.rfind("run.json: line 1, column " + std::to_string(cut.size() + 1) +
                        ": not valid JSON: the text ends before the JSON is complete",
                    0),
            0u)
      << e;
  EXPECT_EQ(read_error("[1, 2]"), "run.json: expected a JSON object (an ampcheck report), got [1,2]");
  // A number beyond a double (nlohmann's out_of_range.406, which named no position).
  const std::string big = "{\"schema_version\": \"1.0\",\n \"x\": -1e400}";
  const std::string o = read_error(big);
  const std::string column = std::to_string(big.find("-1e400") - big.find('\n'));
  EXPECT_EQ(o.rfind("run.json: line 2, column " + column + ": the number -1e400 is too large for a double", 0), 0u)
      << o;
}

TEST(ReportJson, MissingFieldNamesItsPath) {
  ordered_json doc = sample_doc();
  doc["ops"][0].erase("phase");
  EXPECT_EQ(read_error(doc.dump()), "run.json: ops[0]: missing field \"phase\"");
  doc = sample_doc();
  doc.erase("summary");
  EXPECT_EQ(read_error(doc.dump()), "run.json: missing field \"summary\"");
  doc = sample_doc();
  doc["run"]["amp"].erase("loss_scaling");
  EXPECT_EQ(read_error(doc.dump()), "run.json: run.amp: missing field \"loss_scaling\"");
  doc = sample_doc();
  doc["ops"][2]["numerics"][1]["numerics"]["histogram"].erase("counts");
  EXPECT_EQ(read_error(doc.dump()),
            "run.json: ops[2].numerics[1].numerics.histogram: missing field \"counts\"");
}

TEST(ReportJson, WrongTypeNamesItsPath) {
  ordered_json doc = sample_doc();
  doc["steps"][3]["loss"] = "abc";
  EXPECT_EQ(read_error(doc.dump()), "run.json: steps[3].loss: expected a number, got \"abc\"");
  doc = sample_doc();
  doc["steps"][1]["step"] = 1.5;
  EXPECT_EQ(read_error(doc.dump()), "run.json: steps[1].step: expected an integer, got 1.5");
  doc = sample_doc();
  doc["run"]["seed"] = -1;
  EXPECT_EQ(read_error(doc.dump()),
            "run.json: run.seed: expected an integer in [0, 18446744073709551615], got -1");
  doc = sample_doc();
  doc["ops"][0]["numerics"][0]["numerics"]["histogram"]["min_exponent"] = 1LL << 40;
  EXPECT_EQ(read_error(doc.dump()),
            "run.json: ops[0].numerics[0].numerics.histogram.min_exponent: expected an integer "
            "in [-2147483648, 2147483647], got 1099511627776");
  doc = sample_doc();
  doc["steps"][0]["skipped"] = "yes";
  EXPECT_EQ(read_error(doc.dump()), "run.json: steps[0].skipped: expected true or false, got \"yes\"");
  doc = sample_doc();
  doc["run"]["amp"]["custom_black_list"][0] = 3;
  EXPECT_EQ(read_error(doc.dump()), "run.json: run.amp.custom_black_list[0]: expected a string, got 3");
  doc = sample_doc();
  doc["ops"] = ordered_json::object();
  EXPECT_EQ(read_error(doc.dump()), "run.json: ops: expected an array, got {}");
  doc = sample_doc();
  doc["summary"] = ordered_json::array({1, 2});
  EXPECT_EQ(read_error(doc.dump()), "run.json: summary: expected an object, got [1,2]");
  // Only the three spellings the writer uses stand for non-finite values.
  doc = sample_doc();
  doc["summary"]["final_loss"] = "NaN";
  EXPECT_EQ(read_error(doc.dump()), "run.json: summary.final_loss: expected a number, got \"NaN\"");
  // A long value is cut short in the message.
  doc = sample_doc();
  doc["steps"][0]["loss"] = std::string(200, 'x');
  EXPECT_EQ(read_error(doc.dump()),
            "run.json: steps[0].loss: expected a number, got \"" + std::string(59, 'x') + "...");
}

TEST(ReportJson, SchemaVersionIsCheckedFirst) {
  ordered_json doc = sample_doc();
  doc.erase("schema_version");
  EXPECT_EQ(read_error(doc.dump()),
            "run.json: missing field \"schema_version\" (is this an ampcheck report?)");
  for (const ordered_json& bad : {ordered_json("1"), ordered_json("1.x"), ordered_json("v1.0"),
                                 ordered_json("1.0.1"), ordered_json(1.0)}) {
    doc["schema_version"] = bad;
    EXPECT_EQ(read_error(doc.dump()),
              "run.json: schema_version: expected a string \"MAJOR.MINOR\" such as \"1.0\", got " +
                  bad.dump());
  }
}

TEST(ReportJson, OtherMajorIsRejectedWithWhatToDo) {
  // Everything else about a major-2 document may differ: the version error comes first.
  ordered_json doc = {{"schema_version", "2.0"}, {"runs", ordered_json::array()}};
  EXPECT_EQ(read_error(doc.dump()),
            "run.json has schema_version 2.0, which this ampcheck (reads 1.x) does not know; use "
            "the ampcheck that wrote it or a newer one");
  doc["schema_version"] = "0.9";
  EXPECT_EQ(read_error(doc.dump()),
            "run.json has schema_version 0.9, which this ampcheck (reads 1.x) does not know; use "
            "the ampcheck that wrote it");
}

TEST(ReportJson, NewerMinorWithUnknownFieldsIsRead) {
  ordered_json doc = sample_doc();
  doc["schema_version"] = "1.13";
  doc["energy"] = {{"joules", 12.5}};
  doc["steps"][0]["grad_norm"] = 3.0;
  doc["ops"][0]["local_error"]["median"] = 1e-4;
  const Report r = from_json(doc.dump(), "run.json");
  EXPECT_EQ(r.schema_version, "1.13");
  EXPECT_EQ(r.steps[0].loss, 1.0986);
  // Written back as what this writer implements, without the fields it does not know.
  EXPECT_EQ(to_json(r), to_json(testing::sample_report()));
}

class ReportJsonFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ampcheck_json_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static void write(const fs::path& p, const std::string& text) {
    std::ofstream out(p, std::ios::binary);
    out << text;
  }
  fs::path dir_;
};

TEST_F(ReportJsonFiles, ReadReportOnMissingFileNamesIt) {
  const fs::path missing = dir_ / "run.json";
  try {
    read_report(missing);
    FAIL() << "expected ReportError";
  } catch (const ReportError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read " + missing.string() +
                                         ": No such file or directory (give the JSON a run "
                                         "wrote with --report)");
  }
  try {
    read_report(dir_);
    FAIL() << "expected ReportError";
  } catch (const ReportError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read " + dir_.string() + ": Is a directory");
  }
}

TEST_F(ReportJsonFiles, ErrorsInAFileNameTheFile) {
  const fs::path p = dir_ / "run.json";
  write(p, "not json");
  try {
    read_report(p);
    FAIL() << "expected ReportError";
  } catch (const ReportError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(p.string() + ": line 1, column 1: not valid JSON: the bare word \"not\"", 0),
              0u)
        << e.what();
  }
}

// The names in `dir`, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A target that is a directory is named as the problem before anything is created: the
// temporary file would go into the directory's parent, outside the target.
TEST_F(ReportJsonFiles, WritingOverADirectoryNamesItAndCreatesNothing) {
  const fs::path sub = dir_ / "out";
  fs::create_directories(sub);
  for (const fs::path& target : {sub, fs::path(sub.string() + "/")}) {
    try {
      write_file_atomically(target, "{}");
      FAIL() << "expected WriteError for " << target;
    } catch (const WriteError& e) {
      EXPECT_EQ(std::string(e.what()), "cannot write " + target.string() +
                                           ": it is a directory; give the path of a file to write (a new name inside " +
                                           target.string() + ", for example)");
    }
    EXPECT_EQ(names_in(dir_), std::vector<std::string>{"out"});
    EXPECT_TRUE(fs::is_empty(sub));
  }
  // A path ending in '/' names a directory even when there is none.
  EXPECT_THROW(write_file_atomically(dir_ / "none/", "{}"), WriteError);
  // A target in a directory that does not exist, or under a file.
  try {
    write_file_atomically(dir_ / "missing" / "r.json", "{}");
    FAIL() << "expected WriteError";
  } catch (const WriteError& e) {
    EXPECT_NE(std::string(e.what()).find("directory " + (dir_ / "missing").string() + " does not exist"),
              std::string::npos)
        << e.what();
  }
  write(dir_ / "file", "x");
  try {
    write_file_atomically(dir_ / "file" / "r.json", "{}");
    FAIL() << "expected WriteError";
  } catch (const WriteError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "file").string() + " is not a directory"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(names_in(dir_), (std::vector<std::string>{"file", "out"}));
}

TEST_F(ReportJsonFiles, WriteReportLeavesNoTemporaryAndReadsBack) {
  const fs::path p = dir_ / "run.json";
  write_report(p, testing::sample_report(false, true));
  write_report(p, testing::sample_report());  // replaces
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"run.json"});
  std::ifstream in(p, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), to_json(testing::sample_report()));
  EXPECT_EQ(to_json(read_report(p)), text.str());
}

// ---------------------------------------------------------------------------------------
// The schema against an independent validator. The documents come from the writer (the
// schema must accept them) and from deliberate breakage (the schema must reject them).

class ReportJsonSchema : public ReportJsonFiles {
 protected:
  void SetUp() override {
    ReportJsonFiles::SetUp();
    if (std::system("python3 -c 'import json, jsonschema' >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "python3 with the jsonschema module is needed to check the schema "
                      "(Debian: apt-get install python3-jsonschema)";
  }
  struct Outcome {
    bool valid;
    std::string output;
  };
  // Validates `doc` against reports/schema/report.schema.json with python3's jsonschema.
  Outcome validate(const std::string& doc, const std::string& name) {
    const fs::path file = dir_ / name;
    write(file, doc);
    const fs::path schema = fs::path(AMPCHECK_SOURCE_DIR) / "reports/schema/report.schema.json";
    const std::string command =
        "python3 -c 'import json,jsonschema,sys; jsonschema.validate(json.load(open(sys.argv[2])), "
        "json.load(open(sys.argv[1])))' '" +
        schema.string() + "' '" + file.string() + "' 2>&1";
    Outcome outcome{false, ""};
    std::FILE* pipe = ::popen(command.c_str(), "r");
    if (pipe == nullptr) return {false, "popen failed"};
    char buffer[4096];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) outcome.output.append(buffer, n);
    outcome.valid = ::pclose(pipe) == 0;
    return outcome;
  }
  void expect_rejected(const ordered_json& doc, const std::string& name, const std::string& why) {
    const Outcome o = validate(doc.dump(2), name);
    EXPECT_FALSE(o.valid) << name << ": the schema accepted it";
    // Rejected by the schema, not by a crash or a missing file.
    EXPECT_NE(o.output.find("ValidationError"), std::string::npos) << name << ":\n" << o.output;
    EXPECT_NE(o.output.find(why), std::string::npos) << name << ":\n" << o.output;
  }
};

TEST_F(ReportJsonSchema, WriterOutputIsValid) {
  for (bool bisect : {false, true}) {
    for (bool compare : {false, true}) {
      Report r = testing::sample_report(bisect, compare);
      if (!bisect) r.nonfinite.producer.reset();
      if (compare) r.interrupted = Interruption{"SIGTERM", 2, 4, bisect ? 3 : 0};
      if (bisect) {
        ZeroGradients& z = r.nonfinite.zero_gradients.emplace();
        z.first_step = 1;
        z.steps = z.stepped = 4;
        z.dtype = "float16";
        z.evidence = LostValue{"grad_output", "cast", "", "backward", 1, true, "underflow", "float16", -1e-8, 180, 0x1p-24};
      }
      const std::string name = "run_" + std::to_string(bisect) + std::to_string(compare) + ".json";
      const Outcome o = validate(to_json(r), name);
      EXPECT_TRUE(o.valid) << name << ":\n" << o.output;
    }
  }
}

TEST_F(ReportJsonSchema, Fp8SectionIsValidAndItsEnumsAreChecked) {
  const ordered_json doc = ordered_json::parse(to_json(fp8_report()));
  const Outcome o = validate(doc.dump(2), "fp8.json");
  EXPECT_TRUE(o.valid) << o.output;
  ordered_json bad = doc;
  bad["fp8"]["tensors"][0]["tensor"] = "bias";
  expect_rejected(bad, "fp8_tensor.json", "'bias' is not one of");
  bad = doc;
  bad["fp8"]["tensors"][0].erase("flushed");
  expect_rejected(bad, "fp8_flushed.json", "'flushed' is a required property");
}

TEST_F(ReportJsonSchema, NewerMinorWithExtraFieldsIsValid) {
  ordered_json doc = sample_doc();
  doc["schema_version"] = "1.13";
  doc["energy"] = {{"joules", 12.5}};
  doc["ops"][0]["kernels"][0]["duration_unit"] = "none";
  const Outcome o = validate(doc.dump(2), "minor.json");
  EXPECT_TRUE(o.valid) << o.output;
}

TEST_F(ReportJsonSchema, BrokenDocumentsAreRejected) {
  ordered_json doc = sample_doc();
  doc["steps"][3]["loss"] = "abc";
  expect_rejected(doc, "loss_abc.json", "'abc'");
  // The reader rejects the same documents.
  EXPECT_EQ(read_error(doc.dump()), "run.json: steps[3].loss: expected a number, got \"abc\"");

  doc = sample_doc();
  doc.erase("summary");
  expect_rejected(doc, "no_summary.json", "'summary' is a required property");
  EXPECT_EQ(read_error(doc.dump()), "run.json: missing field \"summary\"");

  doc = sample_doc();
  doc["ops"][1].erase("phase");
  expect_rejected(doc, "no_phase.json", "'phase' is a required property");

  doc = sample_doc();
  doc["schema_version"] = "2.0";
  expect_rejected(doc, "major2.json", "'2.0' does not match");

  doc = sample_doc();
  doc["run"]["steps"] = 4.5;
  expect_rejected(doc, "steps_float.json", "4.5 is not of type 'integer'");

  doc = sample_doc();
  doc["compare"]["runs"][0]["losses"][1] = "NaN";
  expect_rejected(doc, "nan_spelling.json", "'NaN'");

  doc = sample_doc();
  doc["nonfinite"]["producers"][1]["lost"][0]["kind"] = "sideways";
  expect_rejected(doc, "lost_kind.json", "'sideways' is not one of");
  doc = sample_doc();
  doc["nonfinite"]["intended"][0].erase("readers");
  expect_rejected(doc, "intended_readers.json", "'readers' is a required property");

  // An interrupted run ran at least one step, and says how many.
  doc = sample_doc();
  doc["interrupted"] = {{"signal", "SIGINT"}, {"steps_run", 0}, {"steps_requested", 4}, {"bisect_run", 0}};
  expect_rejected(doc, "zero_steps_run.json", "0 is less than the minimum of 1");
  doc["interrupted"].erase("steps_run");
  expect_rejected(doc, "no_steps_run.json", "'steps_run' is a required property");
}

// 1.4: a GPU run's kernels read back as written; a CPU report has no such keys.
TEST(ReportJson, GpuKernelsRoundTrip) {
  const Report original = testing::gpu_report();
  const std::string text = to_json(original);
  const Report back = from_json(text, "gpu.json");
  ASSERT_TRUE(back.kernels.has_value());
  EXPECT_EQ(back.kernels->findings, original.kernels->findings);
  EXPECT_EQ(back.kernels->by_type, original.kernels->by_type);
  EXPECT_EQ(back.kernels->outside, original.kernels->outside);
  ASSERT_TRUE(back.ops[0].gpu_kernels.has_value());
  EXPECT_EQ(*back.ops[0].gpu_kernels, *original.ops[0].gpu_kernels);
  EXPECT_EQ(to_json(back), text);
  const std::string cpu = to_json(testing::sample_report());
  EXPECT_EQ(cpu.find("\"gpu_kernels\""), std::string::npos);
  EXPECT_EQ(cpu.find("\"kernels\": {"), std::string::npos);
}

TEST_F(ReportJsonSchema, GpuKernelsAreValid) {
  const Outcome o = validate(to_json(testing::gpu_report()), "gpu.json");
  EXPECT_TRUE(o.valid) << o.output;
  ordered_json doc = ordered_json::parse(to_json(testing::gpu_report()));
  doc["kernels"]["findings"][0].erase("reason");
  expect_rejected(doc, "gpu_no_reason.json", "'reason' is a required property");
}

}  // namespace
}  // namespace ampcheck::reports
