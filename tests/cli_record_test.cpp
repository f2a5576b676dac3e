// `ampcheck record` and `bisect-nan --script` in-process: what they refuse before any
// Python runs, each with exit 2 and the fix. (The runs themselves, on PyTorch scripts,
// are tests/e2e/record_*.sh, in the Python environment scripts/pyenv.sh makes.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <filesystem>

#include "cli/exit_codes.h"
#include "cli/record_command.h"  // check_recorded_kernels
#include "cli/recorder_process.h"
#include "tests/cli_harness.h"

namespace ampcheck::testing {
namespace {

TEST(CliRecord, NoCommandIsUsage) {
  const CliResult r = run_cli({"record"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "no command to run; give it after --: ampcheck record -- python train.py")) << r.err;
}

TEST(CliRecord, BadOptionsAreNamed) {
  CliResult r = run_cli({"record", "--inspect", "everything", "--", "python3", "train.py"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "--inspect \"everything\" is not a mode; use trace, stats or full")) << r.err;
  r = run_cli({"record", "--seeds", "0", "--", "python3", "train.py"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "--seeds 0 is out of range")) << r.err;
  r = run_cli({"record", "--max-skipped", "2", "--", "python3", "train.py"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "--max-skipped 2 is not a fraction")) << r.err;
}

TEST(CliRecord, CommandNotOnPathIsUsage) {
  const CliResult r = run_cli({"record", "--", "ampcheck-no-such-python", "train.py"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "command not found: \"ampcheck-no-such-python\" (not on PATH)")) << r.err;
}

TEST(CliRecord, RecorderFolderOverrideMustHoldTheRecorder) {
  ::setenv("AMPCHECK_RECORDER", "/nonexistent/recorder", 1);
  const CliResult r = run_cli({"record", "--", "python3", "train.py"});
  ::unsetenv("AMPCHECK_RECORDER");
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "AMPCHECK_RECORDER=/nonexistent/recorder holds no recorder")) << r.err;
}

TEST(CliRecord, BisectScriptRefusesTheEnginesTrainingOptions) {
  CliResult r = run_cli({"bisect-nan", "--script", "python3 train.py", "--steps", "5"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "--steps sets ampcheck's own training, and the script trains with its own settings")) << r.err;
  // --loss-tolerance is the script's too now (its fp32 twin is the reference), checked as for the engine.
  r = run_cli({"bisect-nan", "--script", "python3 train.py", "--loss-tolerance", "-0.1"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "--loss-tolerance -0.1 must be >= 0")) << r.err;
  r = run_cli({"bisect-nan", "--script", "  "});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "the command is empty")) << r.err;
}

// The interpreter of a command line, and a line split as sh splits plain words and quotes.
TEST(CliRecord, ShellWordsAndThePythonOfACommand) {
  EXPECT_EQ(cli::shell_words("python train.py --name 'a b' \"c \\\"d\\\"\" e\\ f"),
            (std::vector<std::string>{"python", "train.py", "--name", "a b", "c \"d\"", "e f"}));
  EXPECT_EQ(cli::python_of({"/venv/bin/python3.11", "train.py"}), "/venv/bin/python3.11");
  EXPECT_EQ(cli::python_of({"CUDA_VISIBLE_DEVICES=0", "python", "train.py"}), "python");
  EXPECT_EQ(cli::python_of({"accelerate", "launch", "train.py"}), "python3");
}


// The forgotten `--`: the command's own options named, and the form to use.
TEST(CliRecord, AForgottenDoubleDashIsAnsweredWithTheFormToUse) {
  CliResult r = run_cli({"record", "--quiet", "python", "x.py", "--steps", "5"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "--steps is the command's, not ampcheck's: put -- before the command, ampcheck record "
                         "--quiet -- python x.py --steps 5"))
      << r.err;
  r = run_cli({"record", "--report", "a.json", "python", "-u", "x.py"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "-u is the command's, not ampcheck's: put -- before the command, ampcheck record --report "
                         "a.json -- python -u x.py"))
      << r.err;
  r = run_cli({"record", "--reprot", "a.json", "--", "python", "x.py"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "unknown option \"--reprot\" (did you mean \"--report\"?)")) << r.err;
  r = run_cli({"record", "--kernels", "-1", "--", "python3", "x.py"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "--kernels -1: give the steps to profile")) << r.err;
  r = run_cli({"record", "--listen", "some", "--", "python3", "x.py"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "--listen \"some\" is not a policy; use auto or all")) << r.err;
}

// record --kernels reads the profile it made as `ampcheck kernels` reads one: the same
// verdict on a real H100 Kineto trace (bf16 BERT) as the kernels command gives, and a CPU
// run's profile said to have no GPU kernel instead of failing the recording.
TEST(CliRecord, TheKernelsOfARecordingAreReadAsAmpcheckKernelsReadsAProfile) {
  namespace fs = std::filesystem;
  const fs::path trace =
      fs::path(AMPCHECK_SOURCE_DIR) / ".." / "shared" / "data" / "traces" / "kineto_h100_bert-small_bf16_tracelens.json.gz";
  if (!fs::exists(trace)) GTEST_SKIP() << trace.string() << " is absent: the shared traces are not beside this checkout";
  const cli::KernelsCheck k = cli::check_recorded_kernels(trace, 2, "cuda");
  const CliResult direct = run_cli({"kernels", trace.string()});
  ASSERT_EQ(direct.code, cli::kOk) << direct.err;
  ASSERT_FALSE(k.json.empty()) << k.text;
  EXPECT_TRUE(has(direct.out, k.verdict_text)) << k.verdict_text << "\n" << direct.out;
  EXPECT_TRUE(has(k.text, "GPU kernels of steps 2-3 (record --kernels")) << k.text;

  const cli::KernelsCheck none = cli::check_recorded_kernels(fs::path("/nonexistent/trace.json"), 2, "cpu");
  EXPECT_TRUE(none.json.empty());
  EXPECT_TRUE(has(none.text, "no profile was written")) << none.text;
}

}  // namespace
}  // namespace ampcheck::testing
