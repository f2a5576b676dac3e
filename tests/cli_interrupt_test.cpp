// Ctrl-C keeps what was seen (cli/interrupt.h): the training loop's stop predicate, then
// the commands in-process with real signals raised mid-step (raise() delivers at once, in
// this thread, so the step a signal lands in is known exactly), and the process-level
// behaviour (a second signal, a signal during a report write, an ignored signal) in
// death tests, which run in a child process.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>  // getpid

#include <algorithm>
#include <cstdint>
#include <cstdlib>  // std::_Exit
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/run_command.h"
#include "engine/hooks.h"
#include "reports/atomic_file.h"
#include "reports/json.h"
#include "reports/text.h"
#include "tests/cli_harness.h"

namespace ampcheck {
namespace {

namespace fs = std::filesystem;
using testing::has;
using testing::run_cli;

// Raises `sig` (`times` times) the `occurrence`-th time a step numbered `at` begins:
// each training numbers its steps from 1 (bisect-nan's second run begins its step 7
// after the first run's), and compare's levels each begin every step.
class SignalAtStep : public Observer {
 public:
  SignalAtStep(int sig, std::int64_t at, int occurrence = 1, int times = 1)
      : sig_(sig), at_(at), occurrence_(occurrence), times_(times) {
    add_observer(this);
  }
  ~SignalAtStep() override { remove_observer(this); }
  SignalAtStep(const SignalAtStep&) = delete;
  SignalAtStep& operator=(const SignalAtStep&) = delete;
  void on_step_begin(std::int64_t step) override {
    if (step != at_ || ++seen_ != occurrence_) return;
    for (int i = 0; i < times_; ++i) raise(sig_);
  }

 private:
  int sig_;
  std::int64_t at_;
  int occurrence_, times_;
  int seen_ = 0;
};

class Scratch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ampcheck_interrupt_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  fs::path dir_;
};

// The handler in place now for `sig` (SIG_DFL, SIG_IGN or a function).
void (*disposition(int sig))(int) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

// ---------------------------------------------------------------------------------------
// The stop predicate: the loop asks it after each step but the last.

cli::InstrumentedRun train(const std::string& model, std::int64_t steps, std::function<bool()> stop,
                           const std::string& level = "O2") {
  cli::RunArgs args;
  args.model = model;
  args.steps = steps;
  args.level = level;
  args.quiet = true;
  cli::RunSetup setup;
  setup.mode = inspector::Mode::stats;
  setup.stop = std::move(stop);
  std::ostringstream err;
  return cli::instrumented_run(args, cli::resolve(args), setup, err);
}

TEST(InterruptLoop, StopAfterKStepsReportsExactlyThoseSteps) {
  constexpr std::int64_t kSteps = 12, kStopAfter = 5;
  int asked = 0;
  const cli::InstrumentedRun cut = train("mlp", kSteps, [&] { return ++asked >= kStopAfter; });
  const cli::InstrumentedRun full = train("mlp", kSteps, {});
  EXPECT_EQ(asked, kStopAfter);  // asked after steps 1..5, stopped after the 5th
  ASSERT_TRUE(cut.report.interrupted.has_value());
  const reports::Interruption& i = *cut.report.interrupted;
  EXPECT_EQ(i.steps_run, kStopAfter);
  EXPECT_EQ(i.steps_requested, kSteps);
  EXPECT_EQ(i.signal, "");  // a predicate, not a signal
  EXPECT_EQ(i.bisect_run, 0);
  EXPECT_EQ(cut.report.run.steps, kSteps);  // the settings say what was asked
  // What was seen is what a complete run saw in those steps, bit for bit.
  ASSERT_FALSE(full.report.interrupted.has_value());
  ASSERT_EQ(full.report.steps.size(), static_cast<std::size_t>(kSteps));
  ASSERT_EQ(cut.report.steps.size(), static_cast<std::size_t>(kStopAfter));
  for (std::size_t s = 0; s < cut.report.steps.size(); ++s) {
    EXPECT_EQ(cut.report.steps[s].step, static_cast<std::int64_t>(s) + 1);
    EXPECT_EQ(cut.report.steps[s].loss, full.report.steps[s].loss) << "step " << s + 1;
    EXPECT_EQ(cut.report.steps[s].loss_scale, full.report.steps[s].loss_scale) << "step " << s + 1;
  }
  EXPECT_EQ(cut.report.summary.final_loss, full.report.steps[kStopAfter - 1].loss);
  // The verdict claims only the steps run.
  ASSERT_EQ(full.report.summary.verdict, "healthy");
  EXPECT_EQ(cut.report.summary.verdict, "interrupted");
  EXPECT_EQ(cut.report.summary.verdict_text.rfind("interrupted after 5 of 12 steps; in the steps run: healthy: ", 0),
            0u)
      << cut.report.summary.verdict_text;
  const std::string text = reports::to_text(cut.report);
  EXPECT_TRUE(has(text, "interrupted after 5 of 12 steps: everything below covers those steps only")) << text;
  EXPECT_TRUE(has(text, "verdict: interrupted after 5 of 12 steps")) << text;
}

TEST(InterruptLoop, NeverStoppingAsksAfterEveryStepButTheLast) {
  int asked = 0;
  const cli::InstrumentedRun r = train("mlp", 7, [&] {
    ++asked;
    return false;
  });
  EXPECT_EQ(asked, 6);
  EXPECT_FALSE(r.report.interrupted.has_value());
  EXPECT_EQ(r.report.steps.size(), 7u);
  // Asked to stop after the last step: nothing was left out, so nothing is marked.
  const cli::InstrumentedRun one = train("mlp", 1, [] { return true; });
  EXPECT_FALSE(one.report.interrupted.has_value());
  EXPECT_EQ(one.report.steps.size(), 1u);
}

TEST(InterruptLoop, AFailureSeenStaysFailed) {
  // Where the planted overflow first fails, from a complete run; stop two steps later.
  const cli::InstrumentedRun full = train("variance_overflow", 60, {}, "O1");
  ASSERT_TRUE(full.failed);
  ASSERT_FALSE(full.report.nonfinite.failures.empty());
  const std::int64_t first = full.report.nonfinite.failures.front().step;
  ASSERT_LT(first + 2, 60) << "the planted failure comes too late for this test";
  int asked = 0;
  const cli::InstrumentedRun cut = train("variance_overflow", 60, [&] { return ++asked >= first + 2; }, "O1");
  ASSERT_TRUE(cut.report.interrupted.has_value());
  EXPECT_EQ(cut.report.interrupted->steps_run, first + 2);
  EXPECT_TRUE(cut.failed);
  EXPECT_EQ(cut.report.summary.verdict, "failed");
  EXPECT_EQ(cut.report.summary.verdict_text.rfind("FAILED: ", 0), 0u) << cut.report.summary.verdict_text;
  EXPECT_TRUE(has(cut.report.summary.verdict_text,
                  "(the run was interrupted after " + std::to_string(first + 2) + " of 60 steps)"))
      << cut.report.summary.verdict_text;
}

// ---------------------------------------------------------------------------------------
// The commands in-process, with a real signal raised mid-step.

using InterruptCommand = Scratch;

TEST_F(InterruptCommand, RunWritesCompleteReportsMarkedInterruptedAndExits130) {
  const void* before = reinterpret_cast<const void*>(disposition(SIGINT));
  testing::CliResult r;
  {
    const SignalAtStep ctrl_c(SIGINT, 4);
    r = run_cli({"run", "--model", "mlp", "--steps", "40", "--quiet", "--report", path("run.json"), "--html",
                 path("run.html")});
  }
  EXPECT_EQ(r.code, cli::kInterrupted) << r.err;
  EXPECT_EQ(r.code, 130);
  EXPECT_EQ(names(), (std::vector<std::string>{"run.html", "run.json"}));  // no temporary file
  const reports::Report rep = reports::read_report(path("run.json"));
  ASSERT_TRUE(rep.interrupted.has_value());
  EXPECT_EQ(rep.interrupted->signal, "SIGINT");
  EXPECT_EQ(rep.interrupted->steps_run, 4);  // the step it came in finished, no other
  EXPECT_EQ(rep.interrupted->steps_requested, 40);
  EXPECT_EQ(rep.steps.size(), 4u);
  EXPECT_EQ(rep.summary.verdict, "interrupted");
  // The summary printed is the saved report's, and says how far it got.
  EXPECT_EQ(r.out, reports::to_text(rep));
  EXPECT_TRUE(has(r.out, "interrupted after 4 of 40 steps, by SIGINT")) << r.out;
  const std::string html = slurp(path("run.html"));
  EXPECT_TRUE(has(html, "Interrupted after 4 of 40 steps, by SIGINT")) << "run.html";
  EXPECT_TRUE(has(html, "</html>"));
  // The command gave back the handler it found.
  EXPECT_EQ(reinterpret_cast<const void*>(disposition(SIGINT)), before);
  EXPECT_EQ(reinterpret_cast<const void*>(disposition(SIGTERM)), reinterpret_cast<const void*>(SIG_DFL));
}

TEST_F(InterruptCommand, SigtermIsTreatedLikeCtrlC) {
  testing::CliResult r;
  {
    const SignalAtStep cancel(SIGTERM, 2);
    r = run_cli({"run", "--model", "mlp", "--steps", "40", "--quiet", "--json"});
  }
  EXPECT_EQ(r.code, 130) << r.err;
  const reports::Report rep = reports::from_json(r.out, "stdout");
  ASSERT_TRUE(rep.interrupted.has_value());
  EXPECT_EQ(rep.interrupted->signal, "SIGTERM");
  EXPECT_EQ(rep.interrupted->steps_run, 2);
}

TEST_F(InterruptCommand, CompareStopsAfterTheLockStepAndKeepsEveryLevelAligned) {
  testing::CliResult r;
  {
    const SignalAtStep ctrl_c(SIGINT, 3);  // in the first level's step 3; the others then do theirs
    r = run_cli({"compare", "--levels", "O0,O2", "--steps", "20", "--quiet", "--report", path("cmp.json")});
  }
  EXPECT_EQ(r.code, 130) << r.err;
  EXPECT_EQ(names(), std::vector<std::string>{"cmp.json"});
  const reports::Report rep = reports::read_report(path("cmp.json"));
  ASSERT_TRUE(rep.interrupted.has_value());
  EXPECT_EQ(rep.interrupted->steps_run, 3);
  EXPECT_EQ(rep.interrupted->steps_requested, 20);
  ASSERT_TRUE(rep.compare.has_value());
  ASSERT_EQ(rep.compare->runs.size(), 2u);
  for (const reports::LevelRun& level : rep.compare->runs) EXPECT_EQ(level.losses.size(), 3u) << level.level;
  EXPECT_EQ(rep.summary.verdict, "interrupted");
  EXPECT_TRUE(has(r.out, "interrupted after 3 of 20 steps, by SIGINT")) << r.out;
}

TEST_F(InterruptCommand, BisectStoppedInALaterRunKeepsTheTrialsJudgedAndClaimsNoFix) {
  testing::CliResult r;
  {
    // Run 1 (as configured) fails; run 2 tries every candidate in fp32: stop it in step 7.
    const SignalAtStep ctrl_c(SIGINT, 7, /*occurrence=*/2);
    r = run_cli({"bisect-nan", "--model", "variance_overflow", "--steps", "60", "--quiet", "--report",
                 path("bisect.json")});
  }
  EXPECT_EQ(r.code, 130) << r.err << r.out;
  const reports::Report rep = reports::read_report(path("bisect.json"));
  ASSERT_TRUE(rep.interrupted.has_value());
  EXPECT_EQ(rep.interrupted->bisect_run, 2);
  EXPECT_EQ(rep.interrupted->steps_run, 7);
  EXPECT_EQ(rep.interrupted->steps_requested, 60);
  ASSERT_TRUE(rep.bisect.has_value());
  EXPECT_FALSE(rep.bisect->found);
  EXPECT_TRUE(rep.bisect->culprits.empty());
  ASSERT_EQ(rep.bisect->trials.size(), 1u);  // the run as configured, judged on all its steps
  EXPECT_FALSE(rep.bisect->trials[0].healthy);
  EXPECT_EQ(rep.steps.size(), 60u);
  EXPECT_EQ(rep.summary.verdict, "failed");  // of the run as configured, which did finish
  EXPECT_TRUE(has(r.out, "bisect-nan: interrupted by SIGINT during run 2, after 7 of 60 steps: the search did not "
                         "finish, so no fix is claimed"))
      << r.out;
}

TEST_F(InterruptCommand, BisectStoppedInTheRunAsConfiguredJudgesNothing) {
  testing::CliResult r;
  {
    const SignalAtStep ctrl_c(SIGINT, 3);
    r = run_cli({"bisect-nan", "--model", "variance_overflow", "--steps", "60", "--quiet", "--json"});
  }
  EXPECT_EQ(r.code, 130) << r.err;
  const reports::Report rep = reports::from_json(r.out, "stdout");
  ASSERT_TRUE(rep.interrupted.has_value());
  EXPECT_EQ(rep.interrupted->bisect_run, 1);
  EXPECT_EQ(rep.interrupted->steps_run, 3);
  EXPECT_EQ(rep.steps.size(), 3u);
  ASSERT_TRUE(rep.bisect.has_value());
  EXPECT_TRUE(rep.bisect->trials.empty());
  EXPECT_FALSE(rep.bisect->found);
}

// ---------------------------------------------------------------------------------------
// The process: death tests run the body in a child (re-executed, as the engine has threads).

// The child re-runs the test from its start, SetUp included, in a process of its own: it
// finds the parent's scratch directory in the environment, so that the parent sees what
// the child left there.
class InterruptProcess : public Scratch {
 protected:
  static constexpr const char* kDirVariable = "AMPCHECK_INTERRUPT_TEST_DIR";
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    if (const char* parent = std::getenv(kDirVariable)) {
      dir_ = parent;
      return;
    }
    Scratch::SetUp();
    ::setenv(kDirVariable, dir_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv(kDirVariable);
    Scratch::TearDown();
  }
};

TEST_F(InterruptProcess, TheFirstSignalOnlyAsks) {
  {
    const cli::InterruptScope scope;
    EXPECT_FALSE(cli::interrupt_requested());
    EXPECT_EQ(cli::interrupt_signal_name(), "");
    raise(SIGTERM);  // would end this process without the handler
    EXPECT_TRUE(cli::interrupt_requested());
    EXPECT_EQ(cli::interrupt_signal_name(), "SIGTERM");
  }
  // The handlers are given back; what arrived is still known (main() ends by it).
  EXPECT_EQ(reinterpret_cast<const void*>(disposition(SIGTERM)), reinterpret_cast<const void*>(SIG_DFL));
  EXPECT_EQ(cli::interrupt_signal_name(), "SIGTERM");
  // A new scope starts afresh.
  const cli::InterruptScope next;
  EXPECT_FALSE(cli::interrupt_requested());
}

TEST_F(InterruptProcess, OneScopeAtATime) {
  const cli::InterruptScope scope;
  EXPECT_THROW(cli::InterruptScope second, std::logic_error);
}

TEST_F(InterruptProcess, ASecondSignalEndsTheRunAtOnceWithoutAReport) {
  const std::string report = path("run.json");
  EXPECT_EXIT(
      {
        const SignalAtStep twice(SIGINT, 3, 1, 2);
        run_cli({"run", "--model", "mlp", "--steps", "40", "--quiet", "--report", report});
        std::_Exit(0);  // not reached: the second SIGINT ended the process in step 3
      },
      ::testing::KilledBySignal(SIGINT), "");
  EXPECT_TRUE(names().empty()) << "a report or a temporary file was left";
}

TEST_F(InterruptProcess, ASecondSignalDuringAReportWriteWaitsForTheFile) {
  const std::string file = path("run.json");
  const std::string content(1 << 20, 'x');
  EXPECT_EXIT(
      {
        const cli::InterruptScope scope;
        raise(SIGINT);  // the first: asks
        {
          const cli::ReportWrite whole;
          raise(SIGINT);  // the second, mid-write: deferred
          reports::write_file_atomically(file, content);
        }  // ends here, by SIGINT
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGINT), "");
  EXPECT_EQ(names(), std::vector<std::string>{"run.json"});  // in place, and no temporary file
  EXPECT_TRUE(slurp(file) == content) << "run.json is not the whole content";
}

TEST_F(InterruptProcess, EndByTheInterruptingSignal) {
  EXPECT_EXIT(
      {
        {
          const cli::InterruptScope scope;
          raise(SIGTERM);
        }
        cli::end_by_interrupting_signal();
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

TEST_F(InterruptProcess, AnIgnoredSignalStaysIgnored) {
  // A background job of a shell without job control starts with SIGINT ignored.
  EXPECT_EXIT(
      {
        signal(SIGINT, SIG_IGN);
        {
          const cli::InterruptScope scope;
          raise(SIGINT);
          if (cli::interrupt_requested()) std::_Exit(1);
        }
        std::_Exit(disposition(SIGINT) == SIG_IGN ? 0 : 2);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace ampcheck
