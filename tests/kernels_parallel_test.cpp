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
#include <fstream>
#include <map>
#include <sstream>
#include <string>
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


// cgroup v2's cpu.max is "<quota> <period>" or "max <period>" (Linux's
// Documentation/admin-guide/cgroup-v2.rst): the quota in CPUs, rounded up; anything else
// is no quota.
TEST(CpuBudget, ACgroupV2QuotaIsCountedInWholeCpusRoundedUp) {
  EXPECT_EQ(kc::cpus_of_cgroup_v2_max("max 100000"), 0);
  EXPECT_EQ(kc::cpus_of_cgroup_v2_max("200000 100000"), 2);
  EXPECT_EQ(kc::cpus_of_cgroup_v2_max("150000 100000"), 2);
  EXPECT_EQ(kc::cpus_of_cgroup_v2_max("100000 100000"), 1);
  EXPECT_EQ(kc::cpus_of_cgroup_v2_max("50000 100000"), 1);
  EXPECT_EQ(kc::cpus_of_cgroup_v2_max("400000 50000"), 8);
  for (const char* bad : {"", "max", "200000", "200000 0", "-1 100000", "2e5 100000", "200000 100000 x", "cpu 2"})
    EXPECT_EQ(kc::cpus_of_cgroup_v2_max(bad), 0) << '"' << bad << '"';
}

// Layouts as proc(5) and cgroups(7) describe /proc/self/cgroup and /proc/self/mountinfo,
// over a made-up file system: the quota is found in each and the tightest level binds.
TEST(CpuBudget, TheCgroupQuotaIsFoundInV2V1AndHybridLayoutsAndTheTightestLevelBinds) {
  std::map<std::string, std::string> files;
  auto read = [&files](const std::string& path) {
    const auto f = files.find(path);
    return f == files.end() ? std::string() : f->second;
  };
  // cgroup v2 alone, a service nested two levels down; its parent holds the limit.
  const std::string v2_mounts = "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
  const std::string v2_group = "0::/ci.slice/job-7.scope\n";
  EXPECT_EQ(kc::cgroup_quota_cpus(v2_group, v2_mounts, read), 0);
  files["/sys/fs/cgroup/ci.slice/job-7.scope/cpu.max"] = "max 100000";
  files["/sys/fs/cgroup/ci.slice/cpu.max"] = "250000 100000";
  files["/sys/fs/cgroup/cpu.max"] = "max 100000";
  EXPECT_EQ(kc::cgroup_quota_cpus(v2_group, v2_mounts, read), 3);
  files["/sys/fs/cgroup/ci.slice/job-7.scope/cpu.max"] = "100000 100000";
  EXPECT_EQ(kc::cgroup_quota_cpus(v2_group, v2_mounts, read), 1);
  // A container: its own cgroup is the mount's root, seen at the mount point.
  const std::string container_mounts = "700 650 0:26 /docker/4b1e /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
  files["/sys/fs/cgroup/cpu.max"] = "200000 100000";
  EXPECT_EQ(kc::cgroup_quota_cpus("0::/docker/4b1e\n", container_mounts, read), 2);
  EXPECT_EQ(kc::cgroup_quota_cpus("0::/\n", container_mounts, read), 2);
  // Hybrid (v1 controllers, an empty cgroup2 at unified/): the cpu hierarchy's CFS quota.
  files.clear();
  const std::string hybrid_mounts =
      "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
      "34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
  const std::string hybrid_group = "3:cpuset:/\n2:cpu,cpuacct:/build\n0::/build\n";
  files["/sys/fs/cgroup/cpu,cpuacct/build/cpu.cfs_quota_us"] = "-1";
  files["/sys/fs/cgroup/cpu,cpuacct/build/cpu.cfs_period_us"] = "100000";
  EXPECT_EQ(kc::cgroup_quota_cpus(hybrid_group, hybrid_mounts, read), 0);
  files["/sys/fs/cgroup/cpu,cpuacct/build/cpu.cfs_quota_us"] = "150000";
  EXPECT_EQ(kc::cgroup_quota_cpus(hybrid_group, hybrid_mounts, read), 2);
  files["/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"] = "50000";  // the root's limit binds
  files["/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"] = "100000";
  EXPECT_EQ(kc::cgroup_quota_cpus(hybrid_group, hybrid_mounts, read), 1);
  // Nothing readable: no quota, not a failure.
  EXPECT_EQ(kc::cgroup_quota_cpus("", "", read), 0);
  EXPECT_EQ(kc::cgroup_quota_cpus("garbage\n", "not a mount line\n", read), 0);
}

TEST(CpuBudget, TheAvailableCpusAreTheAffinityMaskCappedByTheQuota) {
  kc::CpuBudget b;
  b.online = 64;
  EXPECT_EQ(b.available(), 64);  // nothing known but the machine
  b.affinity = 8;
  EXPECT_EQ(b.available(), 8);
  b.quota = 2;
  EXPECT_EQ(b.available(), 2);
  b.quota = 16;
  EXPECT_EQ(b.available(), 8);
}

// The kernel's own account of this process's affinity (/proc/self/status,
// Cpus_allowed_list: "0-3,8,10-11"), counted here independently of sched_getaffinity.
TEST(CpuBudget, TheAffinityIsTheKernelsCpusAllowedList) {
  std::ifstream status("/proc/self/status");
  if (!status) GTEST_SKIP() << "no /proc/self/status on this system";
  int allowed = -1;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
    allowed = 0;
    std::stringstream ranges(line.substr(line.find(':') + 1));
    for (std::string r; std::getline(ranges, r, ',');) {
      const auto dash = r.find('-');
      allowed += dash == std::string::npos ? 1 : std::stoi(r.substr(dash + 1)) - std::stoi(r.substr(0, dash)) + 1;
    }
  }
  ASSERT_GT(allowed, 0) << "Cpus_allowed_list not found";
  EXPECT_EQ(kc::cpu_budget().affinity, allowed);
  EXPECT_LE(kc::cpu_budget().available(), allowed);
}

}  // namespace
}  // namespace ampcheck
