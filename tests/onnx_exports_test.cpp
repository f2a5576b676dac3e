// Models as users export them (issue 28): a batch size fixed at export by PyTorch and by
// PaddlePaddle, the additive attention masks Hugging Face models build from
// torch.finfo(float32).min, and skipped steps that each name their cause. The models and
// the frameworks' own outputs are in tests/data/onnx/ (make_exports.py,
// make_paddle_export.py); the forwards are checked against those outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_harness.h"
#include "models/arrays.h"

namespace ampcheck {
namespace {

using nlohmann::json;
using testing::has;
using testing::run_cli;

const std::string kDir = std::string(AMPCHECK_SOURCE_DIR) + "/tests/data/onnx/";

std::string tmp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("ampcheck_exports_" + name)).string();
}

// max |a - b| / max |b| over the first b.size() values.
double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::fabs(a.at(i) - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return err / scale;
}

std::vector<double> npy(const std::string& path) { return models::read_npy(path).f; }

json run_json(const std::vector<std::string>& args, int* code = nullptr) {
  std::vector<std::string> a = {"run"};
  a.insert(a.end(), args.begin(), args.end());
  a.insert(a.end(), {"--json", "-q"});
  const auto r = run_cli(a);
  if (code) *code = r.code;
  EXPECT_TRUE(r.code == 0 || r.code == 1) << r.err;
  return json::parse(r.out);
}

// ---- 1. a fixed batch is a batch size ---------------------------------------------------

TEST(OnnxExports, ATorchExportWithoutDynamicAxesTrainsAtItsFixedBatch) {
  const std::string model = kDir + "fixed_batch_torch.onnx", data = kDir + "fixed_batch_torch.npz";
  const json r = run_json({"--model", model, "--data", data, "--steps", "6"});
  EXPECT_EQ(r["run"]["batch"], 4);
  EXPECT_EQ(r["run"]["fixed_batch"], 4);
  EXPECT_EQ(r["steps"].size(), 6u);
  const auto text = run_cli({"run", "--model", model, "--data", data, "--steps", "2", "-q"});
  EXPECT_TRUE(has(text.out, "batch 4 (fixed by the export)")) << text.out;

  // A --batch that contradicts it is refused in PyTorch's words; the one it fixed is taken.
  const auto bad = run_cli({"run", "--model", model, "--data", data, "--steps", "2", "--batch", "8", "-q"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(has(bad.err, "--batch 8 contradicts the model")) << bad.err;
  EXPECT_TRUE(has(bad.err, "fixed batch size of 4")) << bad.err;
  EXPECT_TRUE(has(bad.err, "torch.onnx.export(")) << bad.err;
  EXPECT_TRUE(has(bad.err, "dynamic_axes={\"input\": {0: \"batch\"}}")) << bad.err;
  EXPECT_EQ(run_cli({"run", "--model", model, "--data", data, "--steps", "2", "--batch", "4", "-q"}).code, 0);

  // infer runs the 16 rows four at a time, as PyTorch did.
  const std::string out = tmp("fixed_torch.npy");
  const auto inf = run_cli({"infer", "--model", model, "--data", data, "--out", out, "-q"});
  ASSERT_EQ(inf.code, 0) << inf.err;
  const std::vector<double> got = npy(out), want = npy(kDir + "fixed_batch_torch.ref.npy");
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LT(rel_error(got, want), 2e-5);
  EXPECT_EQ(run_cli({"infer", "--model", model, "--data", data, "--out", out, "--batch", "5", "-q"}).code, 2);
  std::filesystem::remove(out);
}

TEST(OnnxExports, APaddleExportWithAFixedInputSpecTrainsAndIsToldInPaddlesWords) {
  const std::string model = kDir + "fixed_batch_paddle.onnx", data = kDir + "fixed_batch_paddle.npz";
  const json r = run_json({"--model", model, "--data", data, "--steps", "6"});
  EXPECT_EQ(r["run"]["batch"], 4);
  EXPECT_EQ(r["run"]["fixed_batch"], 4);
  EXPECT_TRUE(has(r["run"]["model_description"].get<std::string>(), "PaddlePaddle")) << r["run"]["model_description"];
  const auto bad = run_cli({"run", "--model", model, "--data", data, "--batch", "6", "-q"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(has(bad.err, "paddle.static.InputSpec(shape=[None, 3, 8, 8], name=\"x\")")) << bad.err;
  EXPECT_FALSE(has(bad.err, "torch")) << bad.err;
  const std::string out = tmp("fixed_paddle.npy");
  ASSERT_EQ(run_cli({"infer", "--model", model, "--data", data, "--out", out, "-q"}).code, 0);
  EXPECT_LT(rel_error(npy(out), npy(kDir + "fixed_batch_paddle.ref.npy")), 2e-5);
  std::filesystem::remove(out);
}

TEST(OnnxExports, AFixedBatchTakesItsLastRowsRoundTheDataAndNeedsThatManyRows) {
  const std::string model = kDir + "fixed_batch_torch.onnx";
  // 16 rows, 4 per step: the fifth step's batch goes round to rows 0-3 again.
  EXPECT_EQ(run_cli({"run", "--model", model, "--data", kDir + "fixed_batch_torch.npz", "--steps", "5", "-q"}).code, 0);
  // 3 rows cannot fill a batch the export fixed at 4.
  const std::string dir = tmp("three_rows");
  std::filesystem::create_directories(dir);
  const std::vector<models::Array> arrays = models::read_npz(kDir + "fixed_batch_torch.npz");
  for (const models::Array& a : arrays) {
    models::Array head = a;
    head.shape[0] = 3;
    const std::size_t keep = head.f.empty() ? 0 : a.f.size() / 16 * 3;
    if (!head.f.empty()) head.f.resize(keep);
    if (!head.i.empty()) head.i.resize(3);
    std::ofstream(dir + "/" + a.name + ".npy", std::ios::binary) << models::npy_bytes(head);
  }
  const auto r = run_cli({"run", "--model", model, "--data", dir, "--steps", "2", "-q"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "fixed batch size of 4, but the data has 3 rows")) << r.err;
  std::filesystem::remove_all(dir);
}

// ---- 2. Hugging Face masks ---------------------------------------------------------------

TEST(OnnxExports, HuggingFaceFinfoMinMasksAreHealthyAtO2InFp16AndBf16) {
  for (const std::string name : {"hf_bert_mul", "hf_gpt2_where"}) {
    for (const std::string dtype : {"float16", "bfloat16"}) {
      int code = -1;
      const json r = run_json({"--model", kDir + name + ".onnx", "--data", kDir + name + ".npz", "--steps", "6",
                               "--level", "O2", "--dtype", dtype},
                              &code);
      EXPECT_EQ(code, 0) << name << " " << dtype << ": " << r["summary"]["verdict_text"];
      EXPECT_EQ(r["summary"]["verdict"], "healthy") << name << " " << dtype;
      EXPECT_FALSE(r["nonfinite"]["intended"].empty()) << name << " " << dtype;
      EXPECT_TRUE(r["nonfinite"]["mask_failures"].empty()) << name;
    }
  }
}

TEST(OnnxExports, AMaskAnotherOpReadsIsStillAFailureAndBisectOffersAllowInf) {
  const std::string model = kDir + "mask_misread.onnx", data = kDir + "mask_misread.npz";
  int code = -1;
  const json r = run_json({"--model", model, "--data", data, "--steps", "4", "--level", "O2"}, &code);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(r["summary"]["verdict"], "failed");
  ASSERT_EQ(r["nonfinite"]["mask_failures"].size(), 1u) << r["nonfinite"].dump();
  EXPECT_EQ(r["nonfinite"]["mask_failures"][0]["op"], "mul_scalar");
  EXPECT_NE(r["nonfinite"]["mask_failures"][0]["reader"], "softmax");

  // bisect-nan does not answer with a black list of every add or mul: it names the mask
  // and offers --allow-inf, which makes the run healthy.
  const auto b = run_cli({"bisect-nan", "--model", model, "--data", data, "--steps", "4", "--level", "O2", "-q"});
  EXPECT_EQ(b.code, 1) << b.err;
  EXPECT_TRUE(has(b.out, "the first failure is the -Inf mask mul_scalar in 'Mul'")) << b.out;
  EXPECT_TRUE(has(b.out, "allow it: --allow-inf Mul")) << b.out;
  EXPECT_FALSE(has(b.out, "fix found in")) << b.out;
  const json allowed = run_json({"--model", model, "--data", data, "--steps", "4", "--level", "O2", "--allow-inf", "Mul"});
  EXPECT_EQ(allowed["summary"]["verdict"], "healthy");

  // A mask whose -Inf reaches the loss (the row minimum): nothing to allow or black-list.
  const auto loss = run_cli({"bisect-nan", "--model", kDir + "mask_to_loss.onnx", "--data", kDir + "mask_to_loss.npz",
                             "--steps", "4", "--level", "O2", "-q"});
  EXPECT_EQ(loss.code, 1) << loss.err;
  EXPECT_TRUE(has(loss.out, "which makes NaN/+Inf of it")) << loss.out;
  EXPECT_FALSE(has(loss.out, "--allow-inf")) << loss.out;
  EXPECT_FALSE(has(loss.out, "fix found in")) << loss.out;

  // The healthy masks: bisect-nan says they are intended and that there is nothing to fix.
  const auto h = run_cli({"bisect-nan", "--model", kDir + "hf_bert_mul.onnx", "--data", kDir + "hf_bert_mul.npz",
                          "--steps", "4", "--level", "O2", "-q"});
  EXPECT_EQ(h.code, 0) << h.err;
  EXPECT_TRUE(has(h.out, "healthy as configured; nothing to black-list")) << h.out;
  EXPECT_TRUE(has(h.out, "mul_scalar in 'Mul') is intended")) << h.out;
}

// ---- 3. every skipped step names its cause -----------------------------------------------

TEST(OnnxExports, EverySkippedUpdateNamesItsCauseAndProbingIsNoFailure) {
  // A scaler started at 2^32: the first updates skip while it comes down.
  int code = -1;
  const json r = run_json({"--model", "scaler_probing", "--level", "O2", "--steps", "40"}, &code);
  const json& nf = r["nonfinite"];
  ASSERT_GT(nf["skipped"].get<int>(), 0);
  ASSERT_EQ(nf["skips"].size(), nf["skipped"].get<std::size_t>());
  for (const json& s : nf["skips"]) {
    EXPECT_NE(s["cause"], "unknown") << s.dump();
    EXPECT_FALSE(s["text"].get<std::string>().empty());
    EXPECT_GT(s["params"].get<int>(), 0) << s.dump();
    EXPECT_LT(s["scale_after"].get<double>(), s["scale_before"].get<double>()) << s.dump();
    EXPECT_TRUE(s["reading"] == "initial" || s["reading"] == "lower") << s.dump();
  }
  EXPECT_EQ(code, 0) << r["summary"]["verdict_text"];
  EXPECT_TRUE(has(r["summary"]["verdict_text"].get<std::string>(), "probing for its scale")) << r["summary"]["verdict_text"];
}

// transformers' own BERT with its default attention ("sdpa": F.scaled_dot_product_attention
// with the padding mask as a boolean attn_mask, exported as a Where of 0 and -inf and a
// safe softmax) runs its attention as scaled_dot_product_attention, its forward is
// PyTorch's, and at O2 the -inf of the mask the policy casts to fp16/bf16 and the attention
// reads is intended: healthy.
TEST(OnnxExports, TransformersBertWithSdpaRunsItsAttentionAsOneOpAndIsHealthyAtO2) {
  const std::string model = kDir + "hf_bert_sdpa.onnx", data = kDir + "hf_bert_sdpa.npz";
  const std::string out = tmp("bert_sdpa.npy");
  ASSERT_EQ(run_cli({"infer", "--model", model, "--data", data, "--out", out, "-q"}).code, 0);
  EXPECT_LT(rel_error(npy(out), npy(kDir + "hf_bert_sdpa.ref.npy")), 2e-5);
  std::filesystem::remove(out);
  for (const std::string dtype : {"float16", "bfloat16"}) {
    int code = -1;
    const json r = run_json({"--model", model, "--data", data, "--steps", "3", "--level", "O2", "--dtype", dtype}, &code);
    EXPECT_EQ(code, 0) << dtype << ": " << r["summary"]["verdict_text"];
    EXPECT_EQ(r["summary"]["verdict"], "healthy") << dtype;
    EXPECT_FALSE(r["nonfinite"]["intended"].empty()) << dtype;
    const std::string text = r.dump();
    EXPECT_TRUE(has(text, "\"scaled_dot_product_attention\"")) << dtype;
    EXPECT_FALSE(has(text, "\"softmax\"")) << dtype << ": an attention ran node by node";
  }
}

// transformers' own GPT-2 (tiny, random weights) exported as users export it: its forward
// is PyTorch's, and a short O2 fp16 run, whose scaler skips updates 1, 3, 5, 6 and 9 as
// the gradients grow, is healthy, each skip with its cause: a backward op's overflow, or
// autograd's sum over a residual.
TEST(OnnxExports, TransformersGpt2SkipsWhileItsGradientsGrowAndEverySkipHasACause) {
  const std::string model = kDir + "hf_gpt2_tiny.onnx", data = kDir + "hf_gpt2_tiny.npz";
  const std::string out = tmp("gpt2.npy");
  ASSERT_EQ(run_cli({"infer", "--model", model, "--data", data, "--out", out, "-q"}).code, 0);
  const std::vector<double> want = npy(kDir + "hf_gpt2_tiny.ref.npy");
  EXPECT_LT(rel_error(npy(out), want), 2e-5);
  std::filesystem::remove(out);
#if defined(AMPCHECK_SANITIZED)
  GTEST_SKIP() << "the forward ran; the 20-step O2 training is the Release build's check (minutes under the "
                  "sanitizers, of code the training suites meet here)";
#endif

  int code = -1;
  const json r = run_json({"--model", model, "--data", data, "--steps", "20", "--level", "O2", "--dtype", "float16"}, &code);
  EXPECT_EQ(code, 0) << r["summary"]["verdict_text"];
  const json& skips = r["nonfinite"]["skips"];
  ASSERT_GE(skips.size(), 2u);
  std::set<std::string> readings, causes;
  for (const json& s : skips) {
    readings.insert(s["reading"].get<std::string>());
    causes.insert(s["cause"].get<std::string>());
    EXPECT_TRUE(s["cause"] == "op" || s["cause"] == "accumulation") << s.dump();
    EXPECT_TRUE(s.contains("event")) << s.dump();
    EXPECT_GT(s["params"].get<int>(), 0) << s.dump();
  }
  EXPECT_TRUE(readings.count("lower")) << skips.dump();  // skips after an update stepped: still probing
  EXPECT_TRUE(causes.count("accumulation")) << skips.dump();
  EXPECT_TRUE(r["nonfinite"]["failures"].empty()) << r["nonfinite"]["failures"].dump();
  const json bf16 = run_json({"--model", model, "--data", data, "--steps", "20", "--level", "O2", "--dtype", "bfloat16"});
  EXPECT_EQ(bf16["summary"]["verdict"], "healthy") << bf16["summary"]["verdict_text"];
}

}  // namespace
}  // namespace ampcheck
