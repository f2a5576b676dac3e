#include "cli/report_command.h"

#include <CLI/CLI.hpp>  // CLI::App

#include <memory>
#include <ostream>
#include <string>

#include "cli/exit_codes.h"
#include "cli/usage_error.h"
#include "reports/atomic_file.h"
#include "reports/html.h"
#include "reports/json.h"
#include "reports/text.h"

namespace ampcheck::cli {
namespace {

struct ReportOptions {
  std::string file;
  std::string html;
  bool text = false;
};

CLI::App* add_options(CLI::App& app, ReportOptions& o) {
  CLI::App* cmd = app.add_subcommand("report", "Render a saved JSON report as HTML or as the text summary");
  cmd->add_option("file", o.file, "the JSON report (from --report)")->required();
  cmd->add_option("--html", o.html, "write the HTML report here");
  cmd->add_flag("--text", o.text, "print the text summary");
  return cmd;
}

int run_report(const ReportOptions& o, std::ostream& out, std::ostream&) {
  if (o.html.empty() && !o.text) throw UsageError("report: say what to render: --html OUT.html or --text");
  reports::Report report;
  try {
    report = reports::read_report(o.file);
  } catch (const reports::ReportError& e) {
    throw UsageError(e.what());
  }
  if (!o.html.empty()) {
    try {
      reports::write_file_atomically(o.html, reports::to_html(report));
    } catch (const reports::WriteError& e) {
      throw UsageError(std::string("--html: ") + e.what());
    }
  }
  if (o.text) out << reports::to_text(report);
  return kOk;
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto options = std::make_shared<ReportOptions>();
  return {add_options(app, *options),
          [options](std::ostream& out, std::ostream& err) { return run_report(*options, out, err); }};
}

}  // namespace ampcheck::cli
