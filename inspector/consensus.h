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

// A job recorded rank by rank (`ampcheck record -- torchrun ...`: reports whose `rank` is
// set, in rank order): the consensus above over the steps they have in common, computed on
// the parameters that are replicas (equal on every rank before the first update; a shard
// each rank holds alone is not compared), with the parameter that diverged first named, and
// what only recordings show (reports::DistributedFinding): gradients reduced in a narrower
// dtype than a data-parallel wrapper was asked for, gradients of replicas that differ after
// the reduction, a loss non-finite on some ranks only, a comm hook reducing in low
// precision. Throws std::invalid_argument when the reports are not the ranks of one job.
reports::Distributed consensus_of_recordings(const std::vector<reports::Report>& ranks);

// One line for the verdict when the ranks did not agree, or a finding failed the job ("" when
// neither).
std::string consensus_failure(const reports::Distributed& d);

}  // namespace ampcheck::inspector
