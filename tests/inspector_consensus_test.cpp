// The consensus check of data-parallel runs (inspector/consensus.h), on ranks' step
// records written here by hand: what agreeing ranks look like, a rank-local overflow that
// the reduction absorbed, ranks that acted differently, and replicas that drifted apart.
#include <gtest/gtest.h>

#include "inspector/consensus.h"

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampcheck::inspector {
namespace {

DataParallelStep step(std::int64_t k, int rank, bool local, bool skipped, std::uint64_t checksum, double scale = 65536,
                      const std::string& overflow = "") {
  DataParallelStep e;
  e.step = k;
  e.rank = rank;
  e.world = 2;
  e.local_found_inf = local;
  e.found_inf = skipped;
  e.skipped = skipped;
  e.scale = scale;
  e.shard_rows = 4;
  e.checksum = checksum;
  e.overflow = overflow;
  return e;
}

TEST(Consensus, RanksThatActAlikeAgree) {
  const auto d = consensus({{step(1, 0, false, false, 11), step(2, 0, false, false, 12)},
                            {step(1, 1, false, false, 11), step(2, 1, false, false, 12)}},
                           "mpi");
  EXPECT_TRUE(d.in_agreement);
  EXPECT_EQ(d.world_size, 2);
  EXPECT_EQ(d.first_divergence, 0);
  ASSERT_EQ(d.ranks.size(), 2u);
  EXPECT_EQ(d.ranks[1].rows, 8);
  EXPECT_EQ(d.ranks[0].final_checksum, "000000000000000c");
  EXPECT_EQ(consensus_failure(d), "");
}

TEST(Consensus, ARankLocalOverflowThatAllRanksSkippedIsNamedNotAFailure) {
  const auto d = consensus({{step(1, 0, false, true, 7)}, {step(1, 1, true, true, 7, 65536, "fc1.weight")}}, "mpi");
  EXPECT_TRUE(d.in_agreement);
  ASSERT_EQ(d.local_overflows.size(), 1u);
  EXPECT_EQ(d.local_overflows[0].rank, 1);
  EXPECT_EQ(d.local_overflows[0].step, 1);
  EXPECT_EQ(d.local_overflows[0].tensor, "fc1.weight");
}

TEST(Consensus, ADecisionTakenDifferentlyIsADisagreementAndTheDivergenceItCauses) {
  auto r0 = step(2, 0, false, false, 21);  // applied the update
  auto r1 = step(2, 1, true, true, 20, 65536, "head.weight");  // skipped it
  r0.reduced = r1.reduced = false;
  const auto d = consensus({{step(1, 0, false, false, 10), r0}, {step(1, 1, false, false, 10), r1}}, "mpi");
  EXPECT_FALSE(d.in_agreement);
  EXPECT_FALSE(d.found_inf_reduced);
  ASSERT_EQ(d.disagreements.size(), 1u);
  EXPECT_EQ(d.disagreements[0].step, 2);
  EXPECT_EQ(d.disagreements[0].skipped, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(d.disagreements[0].applied, (std::vector<std::int64_t>{0}));
  EXPECT_NE(d.disagreements[0].detail.find("rank 1's own gradient of head.weight overflowed"), std::string::npos);
  EXPECT_EQ(d.first_divergence, 2);
  EXPECT_NE(consensus_failure(d).find("ranks disagreed at step 2"), std::string::npos);
}

TEST(Consensus, ReplicasThatDriftWithoutADisagreementAreADivergence) {
  // The same decisions, but rank 1's parameters differ after step 3 (a broken gradient
  // reduction, or a nondeterministic kernel).
  const auto d = consensus({{step(1, 0, false, false, 1), step(2, 0, false, false, 2), step(3, 0, false, false, 3)},
                            {step(1, 1, false, false, 1), step(2, 1, false, false, 2), step(3, 1, false, false, 99)}},
                           "mpi");
  EXPECT_FALSE(d.in_agreement);
  EXPECT_TRUE(d.disagreements.empty());
  EXPECT_EQ(d.first_divergence, 3);
  EXPECT_NE(d.divergence.find("after step 3"), std::string::npos);
  const auto scales = consensus({{step(1, 0, false, false, 1, 65536)}, {step(1, 1, false, false, 1, 32768)}}, "mpi");
  EXPECT_EQ(scales.first_divergence, 1);
  EXPECT_NE(scales.divergence.find("loss scales differ"), std::string::npos);
}

TEST(Consensus, StepRecordsTravelExactly) {
  auto e = step(5, 1, true, true, 0xfedcba9876543210ull, 0.1, "blocks.0.conv.weight");
  e.local_loss = 1.0 / 3;
  const auto back = decode_steps(encode_steps({e, step(6, 1, false, false, 3)}));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].checksum, e.checksum);
  EXPECT_EQ(back[0].scale, 0.1);
  EXPECT_EQ(back[0].local_loss, 1.0 / 3);
  EXPECT_EQ(back[0].overflow, "blocks.0.conv.weight");
  EXPECT_EQ(back[1].overflow, "");
  EXPECT_TRUE(back[0].skipped);
}

// fp8: four ranks whose amaxes were reduced in two groups (ranks 0-1 and 2-3, as
// Megatron-LM PR 442's bug reduced over the wrong process group): at step 2 rank 2 saw a
// larger input amax than ranks 0-1, so the groups' scales of that tensor part. Named at
// that step, with the groups and their scales, before the parameters drift.
TEST(Consensus, Fp8ScalesThatDifferBetweenRanksAreNamedAtTheirFirstStep) {
  std::vector<std::vector<DataParallelStep>> ranks(4);
  for (int r = 0; r < 4; ++r)
    for (std::int64_t k = 1; k <= 3; ++k) {
      DataParallelStep e = step(k, r, false, false, 100 + static_cast<std::uint64_t>(k));
      const bool second_group = r >= 2 && k >= 2;
      e.fp8 = {{"encoder.ff1 input", second_group ? 4.0f : 2.0f, second_group ? 112.0f : 224.0f},
               {"encoder.ff1 weight", 0.5f, 896.0f}};
      ranks[static_cast<std::size_t>(r)].push_back(e);
    }
  const auto d = consensus(ranks, "mpi");
  EXPECT_FALSE(d.in_agreement);
  EXPECT_EQ(d.first_divergence, 2);
  EXPECT_NE(d.divergence.find("fp8 scales of encoder.ff1 input differ after step 2"), std::string::npos) << d.divergence;
  EXPECT_NE(d.divergence.find("ranks 0, 1: scale 224 from amax 2"), std::string::npos) << d.divergence;
  EXPECT_NE(d.divergence.find("ranks 2, 3: scale 112 from amax 4"), std::string::npos) << d.divergence;
  EXPECT_NE(d.divergence.find("wrong process group"), std::string::npos) << d.divergence;
  EXPECT_EQ(consensus_failure(d), d.divergence);
  // The same records on every rank: in agreement.
  for (auto& r : ranks)
    for (auto& e : r) e.fp8[0] = {"encoder.ff1 input", 2.0f, 224.0f};
  EXPECT_TRUE(consensus(ranks, "mpi").in_agreement);
}

TEST(Consensus, Fp8RecordsTravelWithTheirStepExactly) {
  auto e = step(5, 1, false, false, 9);
  e.fp8 = {{"blocks.0 attn.q input", 0.1f, 4479.99951f}, {"head grad_output", 3.0e-30f, 1.9e34f}};
  const auto back = decode_steps(encode_steps({e, step(6, 1, false, false, 3)}));
  ASSERT_EQ(back.size(), 2u);
  ASSERT_EQ(back[0].fp8.size(), 2u);
  EXPECT_EQ(back[0].fp8[0].tensor, "blocks.0 attn.q input");
  EXPECT_EQ(back[0].fp8[0].amax, 0.1f);
  EXPECT_EQ(back[0].fp8[0].scale, 4479.99951f);
  EXPECT_EQ(back[0].fp8[1].amax, 3.0e-30f);
  EXPECT_EQ(back[0].fp8[1].scale, 1.9e34f);
  EXPECT_TRUE(back[1].fp8.empty());
  EXPECT_THROW(decode_steps("fp8\t7\t0x1p+0\t0x1p+0\tx\n"), std::runtime_error);  // no step 7 before it
}

// --- jobs recorded rank by rank (consensus_of_recordings) -------------------------------

// Base64 of little-endian 64-bit words, as the recorder packs its checksums
// (recorder/ampcheck_recorder/ranks.py, pack): RFC 4648's alphabet, written out here.
std::string pack(const std::vector<std::uint64_t>& words) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes;
  for (std::uint64_t w : words)
    for (int b = 0; b < 8; ++b) bytes.push_back(static_cast<unsigned char>((w >> (8 * b)) & 0xff));
  std::string out;
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::uint32_t n = (std::uint32_t{bytes[i]} << 16) | (i + 1 < bytes.size() ? bytes[i + 1] << 8 : 0u) |
                            (i + 2 < bytes.size() ? bytes[i + 2] : 0u);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

// One rank's recording: three parameters (p0 and p2 replicated, p1 a shard of the rank's
// own), each step's parameter and gradient checksums given per parameter.
struct RankSteps {
  std::vector<std::vector<std::uint64_t>> params, grads;  // per step
  std::vector<bool> skipped;
};
reports::Report rank_report(int rank, int world, const RankSteps& s, bool reduced = true) {
  reports::Report r;
  reports::RankRecording& k = r.rank.emplace();
  k.rank = rank;
  k.world_size = world;
  k.launcher = "torchrun";
  k.backend = "gloo";
  k.found_inf_reduced = reduced;
  k.params = {"p0", "p1", "p2"};
  k.initial_hashes = pack({100, 200 + static_cast<std::uint64_t>(rank), 300});
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    reports::StepRecord st;
    st.step = static_cast<std::int64_t>(i) + 1;
    st.loss = 1.0;
    st.loss_scale = 65536;
    st.skipped = st.found_inf = i < s.skipped.size() && s.skipped[i];
    st.param_hashes = pack(s.params[i]);
    st.grad_hashes = pack(s.grads[i]);
    r.steps.push_back(st);
  }
  return r;
}

TEST(Consensus, ARecordedJobComparesItsReplicasOnlyAndNamesTheOneThatDivergedFirst) {
  // Step 1 alike but for p1 (a shard: it differs from the start); at step 2 rank 1's p2
  // differs, its gradient already different after the reduction.
  const RankSteps r0{{{1, 50, 3}, {4, 51, 6}}, {{7, 8, 9}, {10, 11, 12}}, {}};
  const RankSteps r1{{{1, 60, 3}, {4, 61, 99}}, {{7, 18, 9}, {10, 21, 98}}, {}};
  const auto d = consensus_of_recordings({rank_report(0, 2, r0), rank_report(1, 2, r1)});
  EXPECT_FALSE(d.in_agreement);
  EXPECT_EQ(d.runtime, "torchrun (gloo)");
  ASSERT_TRUE(d.compared_params && d.sharded_params);
  EXPECT_EQ(*d.compared_params, 2);
  EXPECT_EQ(*d.sharded_params, 1);
  EXPECT_EQ(d.first_divergence, 2);
  EXPECT_NE(d.divergence.find("(rank 0 vs rank 1)"), std::string::npos) << d.divergence;
  EXPECT_NE(d.divergence.find("p2 first: its gradient already differed after the reduction"), std::string::npos)
      << d.divergence;
  EXPECT_EQ(consensus_failure(d), d.divergence);

  // The shard alone differing, step after step, is no divergence.
  const RankSteps s1{{{1, 70, 3}, {4, 71, 6}}, {{7, 28, 9}, {10, 31, 12}}, {}};
  const auto same = consensus_of_recordings({rank_report(0, 2, r0), rank_report(1, 2, s1)});
  EXPECT_TRUE(same.in_agreement) << same.divergence;
  EXPECT_EQ(consensus_failure(same), "");
}

TEST(Consensus, ARecordedRankThatSkipsAloneIsNamedWithWhetherFoundInfWasReduced) {
  const RankSteps applied{{{1, 2, 3}, {4, 5, 6}}, {{1, 1, 1}, {2, 2, 2}}, {false, false}};
  const RankSteps skipped{{{1, 9, 3}, {1, 9, 3}}, {{1, 1, 1}, {2, 2, 2}}, {false, true}};
  const auto d = consensus_of_recordings({rank_report(0, 3, applied, false), rank_report(1, 3, skipped, false),
                                          rank_report(2, 3, applied, false)});
  ASSERT_EQ(d.disagreements.size(), 1u);
  EXPECT_EQ(d.disagreements[0].step, 2);
  EXPECT_EQ(d.disagreements[0].skipped, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(d.disagreements[0].applied, (std::vector<std::int64_t>{0, 2}));
  EXPECT_NE(d.disagreements[0].detail.find("found_inf was not reduced over the ranks"), std::string::npos);
  EXPECT_EQ(d.first_divergence, 2);
  EXPECT_NE(consensus_failure(d).find("ranks disagreed at step 2: rank 1 skipped the update that ranks 0, 2 applied"),
            std::string::npos)
      << consensus_failure(d);
}

TEST(Consensus, AGradientReductionNarrowerThanTheWrapperWasAskedFailsTheJob) {
  const RankSteps same{{{1, 2, 3}}, {{1, 1, 1}}, {}};
  std::vector<reports::Report> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(rank_report(r, 2, same));
    reports::RankRecording& k = *ranks.back().rank;
    k.initial_hashes = pack({100, 200, 300});
    k.asked.push_back({"fully_shard", {"layers.0"}, "bfloat16", "float32", "", {}});
    // FSDP's own: bf16 all-gathers in forward, fp32 reduce-scatters in backward (as asked);
    // a tensor-parallel all_reduce in backward in bf16 (not as asked).
    k.collectives.push_back({"all_gather", "c10d._allgather_base_", "bfloat16", "forward", "layers.0", "", 2, 64, 1, {}});
    k.collectives.push_back(
        {"reduce_scatter", "c10d._reduce_scatter_base_", "float32", "backward", "layers.0", "", 2, 64, 1, {}});
    k.collectives.push_back({"all_reduce", "c10d.allreduce_", "bfloat16", "backward", "tp", "ReduceGrad", 3, 96, 1, {}});
  }
  const auto d = consensus_of_recordings(ranks);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].kind, "reduce_dtype");
  EXPECT_TRUE(d.findings[0].failure);
  EXPECT_EQ(d.findings[0].ranks, (std::vector<std::int64_t>{0, 1}));
  EXPECT_NE(d.findings[0].detail.find("gradients reduced in bfloat16 where float32 was asked"), std::string::npos);
  EXPECT_NE(d.findings[0].detail.find("in the backward of autograd.Function ReduceGrad in 'tp'"), std::string::npos);
  EXPECT_NE(d.findings[0].detail.find("6 call(s) on ranks 0, 1"), std::string::npos) << d.findings[0].detail;
  EXPECT_FALSE(d.in_agreement);
  EXPECT_EQ(consensus_failure(d), d.findings[0].detail);
  ASSERT_EQ(d.collectives.size(), 3u);
  EXPECT_EQ(d.collectives[2].ranks, 2);
  EXPECT_EQ(d.collectives[2].calls, 6);
}

TEST(Consensus, ALossNonFiniteOnOneRankIsNamedAndReportsNotOfOneJobAreRefused) {
  const RankSteps same{{{1, 2, 3}}, {{1, 1, 1}}, {}};
  auto r1 = rank_report(1, 2, same);
  r1.rank->initial_hashes = pack({100, 200, 300});
  r1.steps[0].loss = std::numeric_limits<double>::infinity();
  auto r0 = rank_report(0, 2, same);
  r0.rank->initial_hashes = pack({100, 200, 300});
  const auto d = consensus_of_recordings({r0, r1});
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].kind, "loss_non_finite");
  EXPECT_EQ(d.findings[0].ranks, (std::vector<std::int64_t>{1}));
  EXPECT_THROW(consensus_of_recordings({r1, r0}), std::invalid_argument);  // not in rank order
  reports::Report plain;
  EXPECT_THROW(consensus_of_recordings({r0, plain}), std::invalid_argument);  // no rank's recording
}

}  // namespace
}  // namespace ampcheck::inspector
