// The op trace as a Chrome trace (the Trace Event Format): opens in Perfetto
// (ui.perfetto.dev) and chrome://tracing. One "X" (complete) event per span, on one of
// two tracks of one process; "M" (metadata) events name the process and the tracks.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ampcheck::reports {

struct TraceSpan {
  std::string name;      // "linear"
  std::string category;  // "forward", "backward", "optimizer", "cast", "kernel"
  double start_us = 0;   // since the trace's start
  double duration_us = 0;
  int track = 0;         // 0: the training thread's ops; 1: GPU kernels
  std::vector<std::pair<std::string, std::string>> args;  // "dtype" -> "float16", "module" -> "fc1", ...
};

// The whole trace as JSON text: {"displayTimeUnit": "ms", "traceEvents": [...]}, the
// metadata first, then the spans sorted by start (a longer span first at equal starts,
// so a parent precedes the spans nested in it). `process_name`: "ampcheck <model> <level>".
std::string chrome_trace_json(const std::vector<TraceSpan>& spans, const std::string& process_name);

}  // namespace ampcheck::reports
