// Hostile files (issue 31): each class of tests/data/hostile/ (make_hostile.py writes them)
// ends as a user's input must: exit 2 with one line that names the file and says what is
// wrong, with the size needed where memory is the reason; never exit 3, never a signal
// (the sanitizer build runs these, and the test hostile.TARGET replays every file through
// the fuzz targets). Sizes are checked against a small --max-memory, so a check that came
// after the allocation would show as an allocation the budget never allowed.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/cli_harness.h"

namespace ampcheck::cli {
namespace {

using testing::has;
using testing::run_cli;

const std::string kHostile = std::string(AMPCHECK_SOURCE_DIR) + "/tests/data/hostile/";

// `ampcheck --max-memory 256M ARGS...` ending in exit 2 with one line naming `file` and
// holding each of `words`.
void refused(std::vector<std::string> args, const std::string& file, const std::vector<std::string>& words) {
  args.insert(args.begin(), {"--max-memory", "256M"});
  const auto r = run_cli(args);
  SCOPED_TRACE(file);
  EXPECT_EQ(r.code, 2) << r.err;
  std::string body = r.err;
  while (!body.empty() && body.back() == '\n') body.pop_back();
  EXPECT_EQ(body.find('\n'), std::string::npos) << "more than one line:\n" << r.err;
  EXPECT_TRUE(has(r.err, file)) << r.err;
  EXPECT_FALSE(has(r.err, "internal error")) << r.err;
  for (const std::string& w : words) EXPECT_TRUE(has(r.err, w)) << "no \"" << w << "\" in: " << r.err;
}

// `run` on a hostile model, with the data make_hostile.py wrote for it where it has some.
std::vector<std::string> run_onnx(const std::string& file) {
  std::vector<std::string> args = {"run", "--model", file, "--steps", "1", "--inspect", "off", "--device", "cpu", "-q"};
  const std::string data = kHostile + "data/" + std::filesystem::path(file).stem().string() + ".npz";
  if (std::filesystem::exists(data)) args.insert(args.end(), {"--data", data});
  return args;
}

TEST(HostileOnnx, AttributesAreCheckedAgainstTheRankTheyDescribeBeforeAnyLibrarySeesThem) {
  // strides 0 was SIGFPE in the ONNX library's shape inference, for any op type.
  for (const char* f : {"conv_strides_zero", "maxpool_strides_zero", "unsupported_op_strides_zero", "conv_dilations_zero"}) {
    const std::string file = kHostile + "onnx/" + f + ".onnx";
    refused({"ops", "--onnx", file}, file, {});
    refused(run_onnx(file), file, {});
  }
  // A kernel_shape shorter than the spatial rank was read past its end.
  for (const char* f : {"conv_kernel_shape_empty", "conv_kernel_shape_short"}) {
    const std::string file = kHostile + "onnx/" + f + ".onnx";
    refused(run_onnx(file), file, {"kernel_shape"});
  }
}

TEST(HostileOnnx, IntegerShapeArithmeticIsCheckedForOverflow) {
  for (const char* f : {"div_int64_min_by_minus_one", "mul_shape_overflow", "reshape_product_wraps"}) {
    const std::string file = kHostile + "onnx/" + f + ".onnx";
    refused(run_onnx(file), file, {"int64"});
  }
  // INT64_MIN % -1 traps in C++ but is 0: the model runs (the shape computes to [0, 0]:
  // Reshape's copies of the input's dims).
  const auto mod = run_cli(run_onnx(kHostile + "onnx/mod_int64_min_by_minus_one.onnx"));
  EXPECT_LE(mod.code, 1) << mod.err;
}

TEST(HostileOnnx, ArraysAFileSizesAreRefusedBeforeTheyAreMadeWithTheSizeNeeded) {
  refused(run_onnx(kHostile + "onnx/constant_of_shape_huge.onnx"), kHostile + "onnx/constant_of_shape_huge.onnx",
          {"[20000, 20000]", "--max-memory"});
  refused(run_onnx(kHostile + "onnx/range_huge.onnx"), kHostile + "onnx/range_huge.onnx", {"--max-memory"});
  // Range(INT64_MIN, INT64_MAX, INT64_MAX) has 3 elements (counted in 128 bits): it runs.
  const auto wraps = run_cli(run_onnx(kHostile + "onnx/range_wraps.onnx"));
  EXPECT_LE(wraps.code, 1) << wraps.err;
  for (const char* f : {"range_float_inf", "constant_of_shape_negative", "initializer_claims_more_than_it_holds"}) {
    const std::string file = kHostile + "onnx/" + f + ".onnx";
    refused(run_onnx(file), file, {});
  }
}

TEST(HostileOnnx, ModelsThatCannotTrainAreTheUsersErrorNotAnInternalOne) {
  refused(run_onnx(kHostile + "onnx/no_trainable_parameter.onnx"), kHostile + "onnx/no_trainable_parameter.onnx",
          {"no trainable parameter", "ampcheck infer"});
  refused(run_onnx(kHostile + "onnx/loss_without_weights.onnx"), kHostile + "onnx/loss_without_weights.onnx",
          {"does not depend on any trainable parameter"});
  std::vector<std::string> no_input = run_onnx(kHostile + "onnx/no_graph_input.onnx");
  no_input.insert(no_input.end(), {"--data", kHostile + "data/no_trainable_parameter.npz"});
  refused(no_input, kHostile + "onnx/no_graph_input.onnx", {"no input"});
}

TEST(HostileOnnx, ExternalDataOutsideTheModelsFolderIsRefusedAlikeWhetherItExistsOrNot) {
  // /etc/passwd exists on every machine, the other two paths nowhere: one message for all,
  // so a model cannot probe which paths exist.
  for (const char* f : {"external_absolute", "external_dotdot", "external_dotdot_missing"}) {
    const std::string file = kHostile + "onnx/" + f + ".onnx";
    refused({"ops", "--onnx", file}, file, {"which is not a path inside the model's folder"});
  }
  // Inside the folder but absent: said so, naming the file to copy there.
  refused({"ops", "--onnx", kHostile + "onnx/external_missing.onnx"}, kHostile + "onnx/external_missing.onnx",
          {"cannot be read"});
  refused({"ops", "--onnx", kHostile + "onnx/nested_too_deep.onnx"}, kHostile + "onnx/nested_too_deep.onnx", {"nest"});
}

TEST(HostileData, LabelsAndHeadersFromAFileAreChecked) {
  const auto data_run = [](const std::string& file) {
    return std::vector<std::string>{"run", "--model", "mlp", "--data", file, "--steps", "1", "--batch", "2",
                                    "--inspect", "off", "--device", "cpu", "-q"};
  };
  // Labels of INT64_MAX were exit 3 (the class count max + 1 wrapped).
  for (const char* f : {"labels_int64_max", "labels_negative", "labels_beyond_classes"}) {
    const std::string file = kHostile + "arrays/" + f + ".npz";
    refused(data_run(file), file, {"label"});
  }
  // A header whose shape product wraps was read as an empty array (exit 0, a corrupt result).
  refused(data_run(kHostile + "arrays/npy_shape_product_wraps.npy"), kHostile + "arrays/npy_shape_product_wraps.npy", {"shape"});
  // A 3 GB member claimed in a file of under a kilobyte: refused from the file's own size.
  for (const char* f : {"npz_member_claims_3gb", "npz_member_claims_3gb_stored"}) {
    const std::string file = kHostile + "arrays/" + f + ".npz";
    refused(data_run(file), file, {"2.8 GiB"});
  }
  refused(data_run(kHostile + "arrays/npy_shape_huge.npy"), kHostile + "arrays/npy_shape_huge.npy", {});
  // A header holding line breaks (found by fuzz.arrays): the message quotes it on one line.
  refused(data_run(kHostile + "arrays/npy_header_with_line_breaks.npy"),
          kHostile + "arrays/npy_header_with_line_breaks.npy", {"the .npy shape"});
}

TEST(HostileFiles, EveryFileOfTheCorpusEndsInExitTwoOrLessNamingTheFile) {
  // The command each target's files go to, as the fuzz targets run them.
  namespace fs = std::filesystem;
  std::size_t seen = 0;
  for (const char* target : {"onnx", "arrays", "model_file", "config", "report", "profile"}) {
    for (const auto& e : fs::directory_iterator(kHostile + target)) {
      const std::string file = e.path().string();
      std::vector<std::string> args;
      const std::string t = target;
      if (t == "onnx") args = {"ops", "--onnx", file};
      else if (t == "arrays") args = {"run", "--model", "mlp", "--data", file, "--steps", "1", "--inspect", "off", "-q"};
      else if (t == "model_file") args = {"run", "--model", file, "--steps", "1", "--inspect", "off", "-q"};
      else if (t == "config") args = {"config", "explain", file};
      else if (t == "report") args = {"report", file, "--text"};
      else args = {"kernels", file};
      args.insert(args.begin(), {"--max-memory", "256M"});
      const auto r = run_cli(args);
      ++seen;
      SCOPED_TRACE(file);
      EXPECT_TRUE(r.code == 0 || r.code == 1 || r.code == 2) << r.code << ": " << r.err;
      if (r.code == 2) {
        EXPECT_TRUE(has(r.err, file)) << r.err;
        std::string body = r.err;
        while (!body.empty() && body.back() == '\n') body.pop_back();
        EXPECT_EQ(body.find('\n'), std::string::npos) << r.err;
      }
    }
  }
  EXPECT_GE(seen, 50u);
}

}  // namespace
}  // namespace ampcheck::cli
