// What the inspector heard, in the report model (reports/report.h): the per-op-type
// dtype table, every op instance with its casts, kernels, numerics and local error, the
// other tensors' numerics, update swamping and the NaN/Inf findings. Run settings,
// steps and the summary's training numbers are the caller's (it ran the training).
#pragma once

#include "inspector/inspector.h"
#include "reports/chrome_trace.h"
#include "reports/report.h"

namespace ampcheck::inspector {

// Fills what the inspector's mode recorded and leaves the rest as it is.
void fill_report(const Inspector& inspector, reports::Report& report);

reports::Numerics to_report(const TensorStats& stats);
// The report's counts of a DtypeCalls (fp8 present only where some call ran in fp8).
reports::DtypeCounts dtype_counts(const DtypeCalls& c);
reports::NanEvent to_report(const NanEvent& event);
reports::LostValue to_report(const LostValue& lost);
std::string dtype_text(DType d);  // "float16": the names the report uses

// The op records as Chrome trace spans: one per op call (the policy's casts as "cast"),
// and one per training step around its ops; times relative to the first record.
std::vector<reports::TraceSpan> trace_spans(const OpTrace& trace);

}  // namespace ampcheck::inspector
