// A hand-made report with every section filled, for the tests of the report writers and
// readers (values chosen by hand, not taken from a run).
#pragma once

#include "reports/report.h"

namespace ampcheck::testing {

// An O2 float16 run of 4 steps of "mlp": steps with one skipped overflow step, two op
// types, three op instances (one backward), numerics with histograms and fp16 overflow,
// a local error and a range loss, two non-finite producers (the first overflowed its own
// output, the second reads a gate an fp16 sigmoid flushed to 0), an intended -Inf mask,
// the scaler's probing, and, when asked, bisect and compare sections.
reports::Report sample_report(bool with_bisect = true, bool with_compare = true);

// The same run as if on a GPU with CUPTI (1.4): fc1's GEMM on tensor cores, a convolution
// of 3 input channels on CUDA cores (a warning), a depthwise one in f32 (a note), the
// GPU time per op type and the kernels outside any op.
reports::Report gpu_report();

}  // namespace ampcheck::testing
