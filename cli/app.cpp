#include "cli/app.h"

#include <CLI/CLI.hpp>  // CLI::App, CLI::ParseError

#include <cctype>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ampcheck_build_info.h"  // AMPCHECK_VERSION
#include "cli/bisect_command.h"
#include "cli/command.h"
#include "cli/compare_command.h"
#include "cli/config_command.h"
#include "cli/diff_command.h"
#include "cli/doctor_command.h"
#include "cli/exit_codes.h"
#include "cli/fp8_scale_command.h"
#include "cli/fp_command.h"
#include "cli/infer_command.h"
#include "cli/kernels_command.h"
#include "cli/ops_command.h"
#include "cli/record_command.h"
#include "cli/report_command.h"
#include "cli/run_command.h"
#include "cli/selftest_command.h"
#include "cli/mpi_launch.h"
#include "cli/usage_error.h"
#include "engine/dtype/convert.h"  // conversion_isa
#include "engine/device.h"
#include "engine/memory_budget.h"  // --max-memory
#include "engine/tensor.h"  // OutOfMemory
#include "engine/dist/communicator.h"
#include "engine/util/strings.h"  // closest: did-you-mean
#include "models/model_file.h"

namespace ampcheck::cli {

namespace {
std::string version_text() {
  return std::string("ampcheck ") + AMPCHECK_VERSION + " (" + cuda_build_description() +
         "; CPU conversions: " + std::string(conversion_isa_name()) + ")";
}
}  // namespace

int run(int argc, const char* const* argv, std::ostream& given_out, std::ostream& err) {
  set_command_line(argc, argv);
  // Under mpirun, rank 0 speaks for the job: the other ranks train, silently.
  std::ostream null(nullptr);
  std::ostream& out = dist::launched_by_mpi() && dist::world().rank() != 0 ? null : given_out;
  CLI::App app{"ampcheck: is mixed precision really on, where do NaNs come from, what drifted"};
  app.name("ampcheck");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::function<std::string()>(version_text));
  // Every size a user's file claims is checked against this before it is allocated
  // (engine/memory_budget.h); without it, against what the machine has available.
  std::string max_memory;
  app.add_option("--max-memory", max_memory,
                 "the most one tensor or array read from a file may take (8G, 512M; also AMPCHECK_MAX_MEMORY); "
                 "default: the machine's available memory");
  // Every command, in the order `--help` lists them.
  const std::vector<Command> commands = {
      add_run_command(app),
      add_record_command(app),
      add_bisect_command(app),
      add_compare_command(app),
      add_infer_command(app),
      add_kernels_command(app),
      add_diff_command(app),
      add_report_command(app),
      add_fp_command(app),
      add_fp8_scale_command(app),
      add_config_command(app),
      add_ops_command(app),
      add_doctor_command(app),
      add_selftest_command(app),
  };

  try {
    conversion_isa();  // a bad AMPCHECK_CPU_ISA is the user's to fix: say so up front
  } catch (const std::invalid_argument& e) {
    err << "ampcheck: " << e.what() << '\n';
    return kUsage;
  }

  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::vector<std::string> names;
    std::string list;
    for (const Command& c : commands) {
      known = known || c.app->check_name(argv[1]);
      names.push_back(c.app->get_name());
      list += (list.empty() ? "" : ", ") + c.app->get_name();
    }
    if (!known) {
      const std::string_view best = closest(argv[1], std::vector<std::string_view>(names.begin(), names.end()));
      err << "ampcheck: unknown command \"" << argv[1] << "\""
          << (best.empty() ? "" : " (did you mean \"" + std::string(best) + "\"?)")
          << "; commands: " << list << " (run `ampcheck --help`)\n";
      return kUsage;
    }
  }

  if (argc > 1) {
    for (const Command& c : commands)
      if (c.check_words && c.app->check_name(argv[1])) {
        try {
          c.check_words(std::vector<std::string>(argv + 2, argv + argc));
        } catch (const UsageError& e) {
          err << "ampcheck: " << one_line(e.what()) << '\n';
          return kUsage;
        }
      }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kOk;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return kOk;
  } catch (const CLI::CallForVersion&) {
    out << version_text() << '\n';
    return kOk;
  } catch (const CLI::ParseError& e) {
    err << "ampcheck: " << e.what() << "\n(run `ampcheck --help` or `ampcheck SUBCOMMAND --help`)\n";
    return kUsage;
  }

  if (!max_memory.empty()) {
    const auto limit = parse_size(max_memory);
    if (!limit || *limit == 0) {
      err << "ampcheck: --max-memory \"" << max_memory << "\" is not a size: give bytes or a number with K, M, G or T (8G)\n";
      return kUsage;
    }
    set_memory_limit(*limit);
  }
  try {
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run(out, err);
  } catch (const UsageError& e) {
    err << "ampcheck: " << one_line(e.what()) << '\n';
    return kUsage;
  } catch (const models::ModelFileError& e) {
    // A model or its data that fails while training (a token id beyond an imported
    // embedding's table): the user's input to fix, not ampcheck's.
    err << "ampcheck: --model: " << one_line(e.what()) << '\n';
    return kUsage;
  } catch (const OutOfMemory& e) {
    // A size the user chose (a layer, the batch, the data) that the machine cannot hold.
    err << "ampcheck: " << one_line(e.what()) << '\n';
    return kUsage;
  } catch (const std::exception& e) {
    // Exit 3 is ampcheck's own defect, never the user's input: every failure an input
    // causes is one of the errors above.
    err << "ampcheck: internal error (a defect of ampcheck, not of your input): " << one_line(e.what())
        << "; please report it with the command and the files it read\n";
    return kInternal;
  }
  err << "ampcheck: no command given; run `ampcheck --help`\n";
  return kUsage;
}

}  // namespace ampcheck::cli
