// `ampcheck record` and `bisect-nan --script` in-process: what they refuse before any
// Python runs, each with exit 2 and the fix. (The runs themselves, on PyTorch scripts,
// are tests/e2e/record_*.sh, in the Python environment scripts/pyenv.sh makes.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cli/exit_codes.h"
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
  r = run_cli({"bisect-nan", "--script", "python3 train.py", "--loss-tolerance", "0.1"});
  EXPECT_EQ(r.code, cli::kUsage);
  EXPECT_TRUE(has(r.err, "--loss-tolerance needs an fp32 run of the same training")) << r.err;
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

}  // namespace
}  // namespace ampcheck::testing
