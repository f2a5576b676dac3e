// The consensus check of a data-parallel run: each rank's view of every step (its own
// found_inf, the decision it acted on, the scale, its parameters' checksum; the engine's
// DataParallelStep), carried to rank 0 and compared there. Any step where the ranks
// decided differently or where their parameters stopped being bit-identical is named,
// with the rank whose own gradient overflowed and the parameter it overflowed in.
#pragma once

#include <string>
#include <vector>

#include "engine/hooks.h"
#include "reports/report.h"

namespace ampcheck::inspector {

// One rank's steps as text, for a gather, and back (exact: doubles in hex).
std::string encode_steps(const std::vector<DataParallelStep>& steps);
std::vector<DataParallelStep> decode_steps(const std::string& text);

// Every rank's steps, in rank order.
reports::Distributed consensus(const std::vector<std::vector<DataParallelStep>>& ranks, const std::string& runtime);

// One line for the verdict when the ranks did not agree ("" when they did).
std::string consensus_failure(const reports::Distributed& d);

}  // namespace ampcheck::inspector
