// The consensus check of data-parallel runs (inspector/consensus.h), on ranks' step
// records written here by hand: what agreeing ranks look like, a rank-local overflow that
// the reduction absorbed, ranks that acted differently, and replicas that drifted apart.
#include <gtest/gtest.h>

#include "inspector/consensus.h"

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

}  // namespace
}  // namespace ampcheck::inspector
