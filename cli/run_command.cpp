#include "cli/run_command.h"

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/exit_codes.h"
#include "cli/interrupt.h"
#include "cli/mpi_launch.h"
#include "cli/usage_error.h"
#include "engine/dist/communicator.h"
#include "engine/nn/layers.h"  // fp8_size_multiple
#include "inspector/consensus.h"
#include "inspector/fp8_watch.h"
#include "inspector/to_report.h"
#include "reports/advice.h"  // probing_note, gradient_underflow_text
#include "reports/chrome_trace.h"
#include "reports/drift.h"  // spread_of
#include "reports/html.h"
#include "reports/json.h"
#include "reports/text.h"

namespace ampcheck::cli {
namespace {

struct RunCommandOptions {
  RunArgs args;
  std::string inspect = "full";
  std::int64_t inspect_every = 1;
  int log_level = -1;  // -1: GLOG_v
  std::string report, html, chrome_trace;
  bool json = false;
  int seeds = 1;  // --seeds: the run with seeds seed .. seed+N-1, the spread recorded
};

CLI::App* add_options(CLI::App& app, RunCommandOptions& o) {
  CLI::App* run = app.add_subcommand("run", "Train a sample under AMP with the inspector attached, then summarise");
  add_run_args(run, o.args);
  run->add_option("--inspect", o.inspect, "off, trace, stats, full")->capture_default_str();
  run->add_option("--inspect-every", o.inspect_every,
                  "full mode on a long run: statistics and local errors on every N-th step only, and on the N steps "
                  "after each step whose gradients held Inf/NaN (the trace and the NaN/Inf watch see every step)")
      ->capture_default_str();
  run->add_option("--log-level", o.log_level, "GLOG-style op log at 5 (default: GLOG_v)");
  run->add_option("--report", o.report, "write the JSON report here (docs/report-format.md)");
  run->add_option("--html", o.html, "write the HTML report (one self-contained file) here");
  run->add_option("--chrome-trace", o.chrome_trace, "write a Chrome trace (Perfetto) of every op call here");
  run->add_flag("--json", o.json, "print the JSON report instead of the text summary");
  run->add_option("--seeds", o.seeds,
                  "also train with the next N-1 seeds and record the spread of the results, the training noise "
                  "`ampcheck diff` allows (docs/diff.md)")
      ->capture_default_str();
  return run;
}

constexpr int kMaxSeeds = 100;

int run_run(const RunCommandOptions& o, std::ostream& out, std::ostream& err) {
  if (o.args.nproc > 1 && !dist::launched_by_mpi()) return launch_under_mpi(o.args.nproc, err);
  const Resolved resolved = resolve(o.args);
  if (o.inspect_every > resolved.options.steps)
    throw UsageError(fmt::format("--inspect-every {} is more than the run's {} steps: no step but those after an "
                                 "Inf/NaN would be measured; give at most {}",
                                 o.inspect_every, resolved.options.steps, resolved.options.steps));
  if (!o.args.quiet) err << resolved.device_notice;
  const auto mode = inspector::parse_mode(o.inspect);
  if (!mode) throw UsageError("--inspect \"" + o.inspect + "\" is not a mode; use off, trace, stats or full");
  if (!o.chrome_trace.empty() && *mode == inspector::Mode::off)
    throw UsageError("--chrome-trace needs the op trace: use --inspect trace or above");
  if (o.inspect_every < 1)
    throw UsageError(fmt::format("--inspect-every {} is not a step count: give 1 (every step) or more", o.inspect_every));
  if (o.inspect_every > 1 && *mode != inspector::Mode::full)
    throw UsageError("--inspect-every samples full mode's statistics and local errors: use it with --inspect full");
  if (o.seeds < 1 || o.seeds > kMaxSeeds)
    throw UsageError(fmt::format("--seeds {} is out of range: give 1 (this seed only) to {}", o.seeds, kMaxSeeds));
  check_output("--report", o.report);
  check_output("--html", o.html);
  check_output("--chrome-trace", o.chrome_trace);
  RunSetup setup;
  setup.mode = *mode;
  setup.inspect_every = o.inspect_every;
  setup.glog_level = o.log_level >= 0 ? o.log_level : inspector::glog_level_from_env();
  setup.glog = &err;
  setup.keep_spans = !o.chrome_trace.empty();
  setup.progress_label = o.seeds > 1 ? fmt::format("seed {} (1/{})", o.args.seed, o.seeds) : "training";
  const InterruptScope interrupt;  // Ctrl-C: stop after the step, report what was seen, exit 130
  setup.stop = InterruptScope::stop_predicate();
  InstrumentedRun r = instrumented_run(o.args, resolved, setup, err);

  // The other seeds: the same configuration, its own report each, of which the spread
  // keeps the outcome. Their op logs and traces are not wanted: the report is the first's.
  bool interrupted = r.report.interrupted.has_value();
  if (o.seeds > 1 && !interrupted) {
    std::vector<reports::Report> runs{r.report};
    RunSetup other = setup;
    other.glog_level = 0;
    other.keep_spans = false;
    for (int k = 1; k < o.seeds; ++k) {
      RunArgs args = o.args;
      args.seed = o.args.seed + static_cast<std::uint64_t>(k);
      other.progress_label = fmt::format("seed {} ({}/{})", args.seed, k + 1, o.seeds);
      InstrumentedRun extra = instrumented_run(args, resolve(args), other, err);
      if (extra.report.interrupted) {  // a part-trained seed says nothing of the noise
        interrupted = true;
        break;
      }
      runs.push_back(std::move(extra.report));
    }
    if (runs.size() >= 2) r.report.spread = reports::spread_of(runs);
    if (interrupted)
      err << fmt::format("ampcheck run: interrupted after {} of {} seeds; {}\n", runs.size(), o.seeds,
                         runs.size() >= 2 ? fmt::format("the spread holds the {} trained whole", runs.size())
                                          : std::string("no spread recorded"));
  }

  if (!o.report.empty()) write_output("--report", o.report, reports::to_json(r.report));
  if (!o.html.empty()) write_output("--html", o.html, reports::to_html(r.report));
  if (!o.chrome_trace.empty())
    write_output("--chrome-trace", o.chrome_trace,
          reports::chrome_trace_json(r.spans, fmt::format("ampcheck {} {}", r.report.run.model, r.report.run.level)));
  out << (o.json ? reports::to_json(r.report) : reports::to_text(r.report));
  if (interrupted) return kInterrupted;
  return r.failed ? kCheckFailed : kOk;
}

}  // namespace

void set_verdict(reports::Report& report, bool inspected_trace, bool failed, const std::string& failure) {
  reports::Summary& s = report.summary;
  const reports::NonFinite& nf = report.nonfinite;
  // Gradient underflow is its own verdict when it is all that failed (bar the scale below
  // the floor that caused it): its cure is the loss scale, not a black list.
  if (failed && reports::loss_scale_is_the_cure(report)) {
    s.verdict = "gradient_underflow";
    s.verdict_text = "FAILED: " + reports::gradient_underflow_text(report);
  } else if (failed) {
    s.verdict = "failed";
    s.verdict_text = "FAILED: " + failure;
    if (const std::string advice = reports::static_scale_overflow_text(report); !advice.empty())
      s.verdict_text += "; " + advice;
  } else if (report.run.level == "O0" && fp8_calls(report) == 0) {
    s.verdict = "reference";
    s.verdict_text = "healthy fp32 reference run";
  } else if (inspected_trace && s.low_precision_calls == 0) {
    s.verdict = "amp_off";
    s.verdict_text = "AMP is NOT on: no op ran in a low-precision dtype";
  } else if (inspected_trace) {
    s.verdict = "healthy";
    const std::int64_t fp8 = fp8_calls(report);
    const std::string ran_in = fp8 == 0 ? report.run.dtype
                               : report.run.level == "O0" ? std::string("fp8")
                                                          : report.run.dtype + " or fp8 (" + std::to_string(fp8) + " in fp8)";
    s.verdict_text = fmt::format("healthy: AMP is on ({} of {} op calls ran in {}), {} skipped step(s) absorbed by the scaler",
                                 s.low_precision_calls, s.total_calls, ran_in, s.skipped_steps);
    std::int64_t probing = 0;
    for (const reports::SkippedUpdate& u : nf.skips) probing += reports::is_probing_reading(u.reading);
    if (probing > 0) s.verdict_text += fmt::format(" ({} of them probing for its scale)", probing);
    // Skips that would have failed the run but were the scaler coming down from its start.
    if (nf.probing && nf.probing->excused) s.verdict_text += "; " + reports::probing_note(report);
  } else {
    s.verdict = "unchecked";
    s.verdict_text = "trained; run with --inspect trace or above to see whether AMP is on";
  }
  // What was intended, so that a reader does not wonder where the mask's -Inf went.
  if (!failed && !nf.intended.empty() && s.verdict != "unchecked") {
    std::int64_t values = 0;
    bool softmax_only = true;
    for (const reports::IntendedInf& i : nf.intended) {
      values += i.values;
      for (const std::string& r : i.readers) softmax_only = softmax_only && r == "softmax";
    }
    s.verdict_text += fmt::format("; {} intended -Inf ({}) not counted as failures", values,
                                  softmax_only ? "masks softmax maps to 0" : "masks their readers map to finite values");
  }
}

void mark_interrupted(reports::Report& report, std::int64_t steps_run, std::int64_t steps_requested,
                      std::int64_t bisect_run) {
  reports::Interruption& i = report.interrupted.emplace();
  i.signal = std::string(interrupt_signal_name());
  i.steps_run = steps_run;
  i.steps_requested = steps_requested;
  i.bisect_run = bisect_run;
  if (bisect_run > 1) return;  // a later bisect-nan run: the report's own run is complete
  reports::Summary& s = report.summary;
  const std::string when = fmt::format("interrupted after {} of {} steps{}", steps_run, steps_requested,
                                       i.signal.empty() ? "" : ", by " + i.signal);
  if (s.verdict == "failed" || s.verdict == "gradient_underflow") {  // seen, so true whatever the steps not run would have done
    s.verdict_text += " (the run was " + when + ")";
    return;
  }
  s.verdict = "interrupted";
  s.verdict_text = when + "; in the steps run: " + s.verdict_text;
}

namespace {

// Which linear layers run in fp8 under which recipe, and which stay out and why.
std::string fp8_notice(const amp::Fp8Recipe& recipe, const std::vector<models::Fp8Layer>& layers) {
  std::int64_t on = 0;
  std::string kept;
  for (const models::Fp8Layer& l : layers) {
    if (l.fp8) {
      ++on;
    } else {
      kept += fmt::format("{}'{}' ({})", kept.empty() ? "" : ", ", l.layer, l.kept);
    }
  }
  return fmt::format("fp8: {} of {} linear layers in fp8 with {}{}\n", on, layers.size(), amp::to_string(recipe),
                     kept.empty() ? std::string() : "; kept out: " + kept);
}

// The fp8 watch's failures are the run's (after a NaN/Inf failure, which they usually explain).
void fp8_verdict(const inspector::Fp8Watch& watch, InstrumentedRun& r) {
  bool named = false;
  for (const inspector::Fp8Finding& f : watch.findings()) {
    if (!f.failure) continue;
    if (std::find(r.fp8_failed_layers.begin(), r.fp8_failed_layers.end(), f.layer) == r.fp8_failed_layers.end())
      r.fp8_failed_layers.push_back(f.layer);
    if (named) continue;  // the first failure is the run's
    named = true;
    r.failure = "fp8: " + f.text + (r.failed && !r.failure.empty() ? "; then " + r.failure : "");
    r.failed = true;
  }
}

}  // namespace

InstrumentedRun instrumented_run(const RunArgs& args, const Resolved& resolved, const RunSetup& setup, std::ostream& err) {
  inspector::InspectorOptions io;
  io.mode = setup.mode;
  io.sampler = inspector::Sampler(setup.inspect_every);
  io.shadow_every = setup.inspect_every;
  io.glog_level = setup.glog_level;
  io.glog = setup.glog;
  io.nan.max_skipped_fraction = setup.max_skipped_fraction;
  io.nan.allowed_ops = resolved.allowed_ops;
  io.nan.allowed_modules = resolved.allowed_modules;
  io.cupti = resolved.cupti && setup.mode >= inspector::Mode::trace;
  // The per-call records are the Chrome trace's spans: kept only when one is written
  // (every table of the report is kept in place either way).
  if (!setup.keep_spans) io.trace.max_records = 0;
  inspector::Inspector insp(io);

  std::unique_ptr<models::Trainer> trainer;
  try {
    trainer = std::make_unique<models::Trainer>(resolved.options);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  Progress progress(err, args.quiet || setup.progress_label.empty(), setup.progress_label, resolved.options.steps);
  // fp8: which linear layers run in fp8, and the watch of their casts (with any inspection).
  std::optional<inspector::Fp8Watch> fp8_watch;
  if (resolved.options.fp8) {
    const auto& layers = trainer->result().fp8_layers;
    // (A bisection's trial may keep every layer out: that is its question.)
    if (setup.command == "run" && layers.empty())
      throw UsageError("--fp8: the model has no linear layer module to run in fp8 (an ONNX model's GEMMs are graph "
                       "nodes, which fp8 does not reach yet: docs/fp8.md); drop --fp8, or describe the model in a "
                       "model file (docs/model-format.md)");
    if (setup.command == "run" && std::none_of(layers.begin(), layers.end(), [](const models::Fp8Layer& l) { return l.fp8; }))
      throw UsageError("--fp8: no linear layer of the model can run in fp8 (every one is kept or has a size that is "
                       "not a multiple of " + std::to_string(nn::fp8_size_multiple(*resolved.options.fp8)) +
                       (std::holds_alternative<amp::MXFP8BlockScaling>(*resolved.options.fp8)
                            ? ", MXFP8's blocks: TransformerEngine refuses such a tensor too)"
                            : ")"));
    if (!args.quiet) err << fp8_notice(*resolved.options.fp8, trainer->result().fp8_layers);
    if (setup.mode != inspector::Mode::off) {
      inspector::Fp8WatchOptions watch;
      watch.delayed = std::holds_alternative<amp::DelayedScaling>(*resolved.options.fp8);
      watch.block = std::holds_alternative<amp::MXFP8BlockScaling>(*resolved.options.fp8);
      fp8_watch.emplace(watch);
    }
  }
  insp.attach();
  if (fp8_watch) add_observer(&*fp8_watch);
  const std::int64_t steps = resolved.options.steps;
  std::int64_t ran = 0;
  while (ran < steps) {
    const models::StepResult s = trainer->step();
    progress.update(++ran, fmt::format("loss {:.4f} scale {:g}", s.loss, s.loss_scale));
    if (ran < steps && setup.stop && setup.stop()) break;  // at least one step: a report needs one
  }
  insp.detach();  // the evaluation pass is not part of the training trace
  if (fp8_watch) remove_observer(&*fp8_watch);
  progress.done();
  trainer->evaluate();
  const models::RunResult& result = trainer->result();

  InstrumentedRun r;
  reports::Report& rep = r.report;
  rep.run = run_info(setup.command, args, resolved, result, std::string(inspector::mode_name(setup.mode)));
  if (setup.inspect_every > 1) rep.run.inspect_every = setup.inspect_every;
  for (std::size_t i = 0; i < result.steps.size(); ++i) {
    const models::StepResult& s = result.steps[i];
    reports::StepRecord step;
    step.step = static_cast<std::int64_t>(i) + 1;
    step.loss = s.loss;
    step.loss_scale = s.loss_scale;
    step.found_inf = s.found_inf;
    step.skipped = s.skipped;
    rep.steps.push_back(step);
  }
  inspector::fill_report(insp, rep);
  rep.summary.initial_loss = result.steps.front().loss;
  rep.summary.final_loss = result.steps.back().loss;
  rep.summary.accuracy = result.accuracy;
  rep.summary.skipped_steps = result.skipped;
  rep.summary.final_loss_scale = result.final_scale;
  if (const inspector::NanWatch* w = insp.nan()) {
    const inspector::NanReport nr = w->report();
    r.failed = nr.failed();
    if (r.failed) {
      const inspector::Failure& f = nr.failures.front();
      if (f.kind == inspector::FailureKind::forward_non_finite && nr.producer) {
        const inspector::NanEvent& p = *nr.producer;
        r.failure = fmt::format("non-finite values first produced by {} in module '{}' ({}, step {})", op_name(p.op),
                                p.module, phase_name(p.phase), p.step);
        if (!p.lost.empty()) r.failure += "; " + inspector::lost_text(p, p.lost.front());
        if (nr.producers.size() > 1) {
          r.failure += "; also by";
          for (std::size_t i = 1; i < nr.producers.size(); ++i)
            r.failure += fmt::format("{} {} in '{}' ({}, step {})", i > 1 ? "," : "", op_name(nr.producers[i].op),
                                     nr.producers[i].module, phase_name(nr.producers[i].phase), nr.producers[i].step);
        }
      } else if (f.kind == inspector::FailureKind::gradient_underflow && nr.zero_gradients) {
        r.failure = fmt::format("gradients underflow: every parameter gradient was 0 in {} from step {}",
                                inspector::dtype_text(nr.zero_gradients->dtype), nr.zero_gradients->first_step);
      } else {
        r.failure = f.detail;
      }
    }
  }
  if (fp8_watch) {
    fp8_verdict(*fp8_watch, r);
    reports::Fp8Training& f = rep.fp8.emplace(inspector::to_report(*fp8_watch));
    f.recipe = amp::to_string(*resolved.options.fp8);
    for (const models::Fp8Layer& l : result.fp8_layers) {
      if (l.fp8)
        f.layers.push_back(l.layer);
      else
        f.kept.push_back(fmt::format("{} ({})", l.layer, l.kept));
    }
  }
  if (result.world > 1) {
    // The job's report. The consensus check: every rank's view of every step, on every
    // rank. Then one rank's report for all (the first that failed, else rank 0's), so that
    // every rank reads the same verdict and the same numbers: bisect-nan's search goes in
    // lock step, each trial a run of all the ranks.
    dist::Communicator& comm = dist::world();
    std::string joined;
    for (const std::string& text : comm.gather(inspector::encode_steps(result.data_parallel), 0))
      joined += text + '\x1d';
    joined = comm.broadcast(joined, 0);
    std::vector<std::vector<DataParallelStep>> ranks;
    for (std::size_t at = 0, end; (end = joined.find('\x1d', at)) != std::string::npos; at = end + 1)
      ranks.push_back(inspector::decode_steps(joined.substr(at, end - at)));
    const reports::Distributed consensus = inspector::consensus(ranks, comm.runtime());
    int source = 0;
    const std::vector<std::string> flags = comm.gather(r.failed ? "1" : "0", 0);
    for (std::size_t k = 0; k < flags.size(); ++k)
      if (flags[k] == "1") {
        source = static_cast<int>(k);
        break;
      }
    source = std::stoi(comm.broadcast(std::to_string(source), 0));
    const bool any_failed = comm.all_reduce_or(r.failed);
    const std::string shared =
        comm.broadcast(comm.rank() == source ? reports::to_json(rep) + '\x1e' + r.failure : std::string(), source);
    const std::size_t cut = shared.rfind('\x1e');
    rep = reports::from_json(shared.substr(0, cut), "rank " + std::to_string(source) + "'s report");
    r.failure = shared.substr(cut + 1);
    r.failed = any_failed;
    rep.distributed = consensus;
    if (const std::string failure = inspector::consensus_failure(consensus); !failure.empty()) {
      // The ranks' disagreement first: what followed comes of it.
      r.failure = failure + (r.failed && !r.failure.empty() ? "; then " + r.failure : "");
      r.failed = true;
    }
    if (source != 0) r.failure += " (on rank " + std::to_string(source) + ")";
  }
  set_verdict(rep, insp.trace() != nullptr, r.failed, r.failure);
  if (fp8_watch) {  // its warnings belong in the line a person reads (those of the first
                    // casts' initial scale, which every delayed-scaling run has, in the report only)
    std::vector<inspector::Fp8Finding> warnings;
    for (const inspector::Fp8Finding& f : fp8_watch->findings())
      if (!f.failure && !f.first_cast_only) warnings.push_back(f);
    if (!warnings.empty())
      rep.summary.verdict_text += fmt::format("; fp8 warning{}: {}{}", warnings.size() == 1 ? "" : "s", warnings.front().text,
                                              warnings.size() > 1 ? fmt::format(" (and {} more)", warnings.size() - 1) : "");
  }
  if (rep.kernels) {  // the kernel check's warnings belong in the line a person reads
    const std::int64_t warnings = rep.kernels->warnings();
    if (warnings > 0)
      rep.summary.verdict_text += fmt::format("; {} kernel warning{}: op instances whose GPU kernels did not run as "
                                              "the AMP policy says (see GPU kernels)",
                                              warnings, warnings == 1 ? "" : "s");
    else if (!rep.kernels->traced)
      rep.summary.verdict_text += "; GPU kernels not traced (" + rep.kernels->not_traced + ")";
  }
  if (ran < steps) mark_interrupted(rep, ran, steps);
  if (setup.keep_spans && insp.trace()) r.spans = inspector::trace_spans(*insp.trace());
  return r;
}

std::int64_t fp8_calls(const reports::Report& report) {
  std::int64_t n = 0;
  for (const reports::OpTypeRow& row : report.op_types) n += row.calls.fp8.value_or(0);
  return n;
}

Command add_run_command(CLI::App& app) {
  auto options = std::make_shared<RunCommandOptions>();
  return {add_options(app, *options),
          [options](std::ostream& out, std::ostream& err) { return run_run(*options, out, err); }};
}

}  // namespace ampcheck::cli
