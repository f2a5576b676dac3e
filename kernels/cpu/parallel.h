// Threads for the CPU kernels. Work is split into fixed chunks whose results do not
// depend on which thread runs them, so every thread count gives bit-identical results.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace ampcheck::kernels::cpu {

// Threads the CPU kernels use. Default: AMPCHECK_NUM_THREADS where set, else the CPUs
// this process may run on (available_cpus()).
void set_num_threads(int n);
int num_threads();

// The CPUs this process may use: the CPUs of its affinity mask (taskset, a container's
// cpuset), capped by its cgroup's CPU quota rounded up (cgroup v2 cpu.max, or v1
// cpu.cfs_quota_us / cpu.cfs_period_us, in its own cgroup and every parent), not the
// machine's online CPUs: a container limited to 2 CPUs on a 64-core host gets 2 threads,
// not 64 that the quota throttles. At least 1.
struct CpuBudget {
  int online = 1;    // the machine's online CPUs
  int affinity = 0;  // CPUs in the affinity mask (0: unknown)
  int quota = 0;     // the cgroup quota in CPUs, rounded up (0: none)
  int available() const;
};
const CpuBudget& cpu_budget();

// A cgroup v2 cpu.max line ("max 100000", "150000 100000"): the quota in CPUs rounded up,
// or 0 for none or for a line that is not of that form.
int cpus_of_cgroup_v2_max(const char* line);

// The tightest CPU quota, in CPUs rounded up (0: none), on the cgroup that
// /proc/self/cgroup's text names and its parents, in every cgroup2 mount and every v1
// hierarchy with the cpu controller that /proc/self/mountinfo's text lists (hybrid
// layouts included; a mount whose root is the cgroup itself, as in a container, too).
// first_line(path) reads a control file's first line ("" where there is none).
int cgroup_quota_cpus(std::string_view proc_self_cgroup, std::string_view mountinfo,
                      const std::function<std::string(const std::string&)>& first_line);

// Calls body(begin, end) over [0, n) in chunks of at least `grain` items, in parallel.
// Chunk boundaries depend on n and grain only, never on the thread count.
void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace ampcheck::kernels::cpu
