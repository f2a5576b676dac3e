// The CPU thread pool (kernels/cpu/parallel.h): every chunk of every region runs exactly
// once with the bounds the definition gives (n and grain only), regions back to back
// end only when their last chunk is done (a region's results are all there when
// parallel_for returns, even where a worker was asleep and arrives late), an exception
// in a chunk reaches the caller and leaves the pool working, and a parallel_for inside a
// chunk runs in the calling thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace ampcheck {
namespace {

namespace kc = kernels::cpu;

struct Threads {
  explicit Threads(int n) : before(kc::num_threads()) { kc::set_num_threads(n); }
  ~Threads() { kc::set_num_threads(before); }
  int before;
};

TEST(ThreadPool, EveryChunkOfEveryRegionRunsOnceWithItsBounds) {
  for (const int threads : {1, 2, 3, 8}) {
    Threads t(threads);
    for (int region = 0; region < 3000; ++region) {
      const std::int64_t n = 1 + region % 37, grain = 1 + region % 5;
      std::vector<std::atomic<int>> seen(static_cast<std::size_t>(n));
      std::atomic<int> bad_bounds{0};
      kc::parallel_for(n, grain, [&](std::int64_t lo, std::int64_t hi) {
        // The definition: chunk c is [c*grain, min(n, (c+1)*grain)).
        if (lo % grain != 0 || hi != std::min(n, lo + grain)) ++bad_bounds;
        for (std::int64_t i = lo; i < hi; ++i) ++seen[static_cast<std::size_t>(i)];
        if (region % 97 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));  // past the spin window
      });
      ASSERT_EQ(bad_bounds.load(), 0) << threads << " threads, region " << region;
      for (std::int64_t i = 0; i < n; ++i)
        ASSERT_EQ(seen[static_cast<std::size_t>(i)].load(), 1)
            << threads << " threads, region " << region << ", item " << i << " (every item once, done on return)";
    }
  }
}

TEST(ThreadPool, RegionsAfterIdleGapsStillRunEveryChunk) {
  Threads t(2);
  for (int region = 0; region < 20; ++region) {
    std::this_thread::sleep_for(std::chrono::microseconds(region % 2 ? 50 : 1500));  // workers asleep or spinning
    std::atomic<std::int64_t> sum{0};
    kc::parallel_for(1000, 7, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) sum += i;
    });
    EXPECT_EQ(sum.load(), 999 * 1000 / 2);
  }
}

TEST(ThreadPool, AnExceptionReachesTheCallerAndThePoolKeepsWorking) {
  Threads t(2);
  for (int attempt = 0; attempt < 50; ++attempt) {
    std::atomic<int> ran{0};
    EXPECT_THROW(kc::parallel_for(64, 1,
                                  [&](std::int64_t lo, std::int64_t) {
                                    ++ran;
                                    if (lo == 5) throw std::runtime_error("chunk 5");
                                  }),
                 std::runtime_error);
    EXPECT_LE(ran.load(), 64);
    std::atomic<int> after{0};
    kc::parallel_for(64, 1, [&](std::int64_t, std::int64_t) { ++after; });
    EXPECT_EQ(after.load(), 64) << "the region after a failed one runs every chunk";
  }
}

TEST(ThreadPool, ANestedParallelForRunsInTheCallingThread) {
  Threads t(2);
  std::atomic<int> mismatched{0}, inner{0};
  kc::parallel_for(8, 1, [&](std::int64_t, std::int64_t) {
    const auto me = std::this_thread::get_id();
    kc::parallel_for(16, 1, [&](std::int64_t, std::int64_t) {
      if (std::this_thread::get_id() != me) ++mismatched;
      ++inner;
    });
  });
  EXPECT_EQ(mismatched.load(), 0);
  EXPECT_EQ(inner.load(), 8 * 16);
}

}  // namespace
}  // namespace ampcheck
