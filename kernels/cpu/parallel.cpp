#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <utility>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <malloc.h>  // mallopt (glibc)
#include <sched.h>   // sched_getaffinity
#include <unistd.h>  // sysconf
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

namespace ampcheck::kernels::cpu {
namespace {

thread_local bool t_in_parallel = false;

// A fixed set of workers that join each parallel_for as they come; chunks are claimed
// from one counter, so which thread runs a chunk varies but the chunks never do.
//
// A region ends when its last chunk is done, not when every worker has checked in: a
// worker asleep in the kernel must not hold the caller up for its wake-up (tens of
// microseconds) when the caller and the awake workers have already run every chunk.
// So the claim counter carries the region's generation in its high half: a worker that
// arrives late, after its region ended, finds another generation there and claims
// nothing, and the caller may overwrite body_ and chunks_ as soon as the last chunk is
// done (a worker reads them only before a claim of its own region succeeds, and that
// region cannot end before the chunk it is about to claim is done).
class Pool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() { stop_workers(); }

  int threads() const { return threads_; }

  void resize(int threads) {
    std::lock_guard<std::mutex> run(run_mu_);
    stop_workers();
    threads_ = std::max(1, threads);
    // More threads than CPUs to run them: a spinning thread would hold a CPU that a
    // thread with a chunk to finish is waiting for (libgomp throttles its spin likewise).
    spin_ = threads_ <= cpu_budget().available();
    stop_ = false;
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { work(); });
  }

  void run(std::int64_t chunks, const std::function<void(std::int64_t)>& body) {
    std::lock_guard<std::mutex> run(run_mu_);
    const std::uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
    body_.store(&body, std::memory_order_relaxed);
    chunks_.store(chunks, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    claim_.store(gen << 32, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(mu_);
      generation_.store(gen, std::memory_order_release);
    }
    cv_.notify_all();
    drain(gen);
    auto finished = [&] { return done_.load(std::memory_order_acquire) == chunks; };
    spin_until(finished);
    if (!finished()) {
      std::unique_lock<std::mutex> lock(mu_);
      waiting_ = true;
      done_cv_.wait(lock, finished);
      waiting_ = false;
    }
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  // Claims and runs chunks of region `gen` until none is left. After an exception the
  // rest are claimed and counted without running; the first exception is rethrown by
  // run() on the calling thread.
  void drain(std::uint64_t gen) {
    t_in_parallel = true;
    bool failed = false;
    for (;;) {
      const auto* body = body_.load(std::memory_order_acquire);
      const std::int64_t chunks = chunks_.load(std::memory_order_acquire);
      std::uint64_t c = claim_.load(std::memory_order_acquire);
      bool claimed = false;
      while ((c >> 32) == (gen & 0xffffffffu) && static_cast<std::int64_t>(c & 0xffffffffu) < chunks) {
        if (claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
          claimed = true;
          break;
        }
      }
      if (!claimed) break;
      if (!failed) {
        try {
          (*body)(static_cast<std::int64_t>(c & 0xffffffffu));
        } catch (...) {
          failed = true;
          std::lock_guard<std::mutex> lock(mu_);
          if (!error_) error_ = std::current_exception();
        }
      }
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
        std::lock_guard<std::mutex> lock(mu_);
        if (waiting_) done_cv_.notify_one();
      }
    }
    t_in_parallel = false;
  }

  // A step runs hundreds of small parallel regions back to back: a worker that slept
  // between them would be woken through the kernel each time (tens of microseconds, more
  // than many regions take), so workers and the caller spin a short while first, as
  // OpenMP runtimes do, and only then block.
  template <typename Ready>
  void spin_until(Ready ready) const {
    if (!spin_) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    for (int i = 0; !ready(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) return;
    }
  }

  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      auto moved = [&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; };
      spin_until(moved);
      if (!moved()) {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, moved);
      }
      if (stop_.load(std::memory_order_acquire)) return;
      seen = generation_.load(std::memory_order_acquire);
      drain(seen);
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::mutex run_mu_;  // one parallel_for at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  bool waiting_ = false;  // the caller sleeps on done_cv_ (guarded by mu_)
  std::vector<std::thread> workers_;
  std::atomic<const std::function<void(std::int64_t)>*> body_{nullptr};
  std::atomic<std::int64_t> chunks_{0};
  std::atomic<std::uint64_t> claim_{0};  // generation << 32 | next chunk
  std::atomic<std::int64_t> done_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  int threads_ = 1;
  bool spin_ = true;  // threads_ fit the CPUs this process may use
  std::exception_ptr error_;
};

int default_threads() {
  if (const char* env = std::getenv("AMPCHECK_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return cpu_budget().available();
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Quota / period in CPUs, rounded up; 0 where there is no quota.
int cpus_of_quota(std::int64_t quota, std::int64_t period) {
  if (quota <= 0 || period <= 0) return 0;
  return static_cast<int>(std::min<std::int64_t>((quota + period - 1) / period, 1 << 20));
}

// The kernels allocate their work buffers per call (a convolution's column matrix is
// megabytes). glibc serves a block above its mmap threshold with a fresh mapping and
// gives freed memory at the top of a heap back to the system, so each call paid for
// page faults on memory the previous call had just returned (measured: the cnn sample's
// step 1.7x slower, where which thread ran a chunk decided which arena freed it). Fixed
// thresholds keep blocks up to 64 MiB in the heaps and up to 512 MiB of free memory
// before trimming, as a caching allocator would; set once, before the first kernel.
void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
}

Pool& pool() {
  static const bool tuned = (keep_freed_memory(), true);
  static Pool p(default_threads());
  (void)tuned;
  return p;
}

}  // namespace

int cpus_of_cgroup_v2_max(const char* line) {
  char quota[32] = {};
  std::int64_t period = 0;
  char rest = 0;
  if (std::sscanf(line, "%31s %" SCNd64 " %c", quota, &period, &rest) != 2) return 0;
  char* end = nullptr;
  const long long q = std::strtoll(quota, &end, 10);
  if (end == quota || *end != '\0') return 0;  // "max": no quota
  return cpus_of_quota(q, period);
}

int cgroup_quota_cpus(std::string_view proc_self_cgroup, std::string_view mountinfo,
                      const std::function<std::string(const std::string&)>& first_line) {
  // Mounts: cgroup2's, and each v1 hierarchy's with the cpu controller, with the cgroup
  // path at the mount's root (a container sees its own cgroup as "/" or as a path).
  struct Mount {
    std::string root, point;
  };
  std::vector<Mount> v2, v1_cpu;
  std::stringstream mounts{std::string(mountinfo)};
  for (std::string line; std::getline(mounts, line);) {
    // "id parent major:minor root mount-point options [optional...] - fstype source super-options"
    std::stringstream f(line);
    std::string id, parent, dev, root, point, options, word;
    if (!(f >> id >> parent >> dev >> root >> point >> options)) continue;
    while (f >> word && word != "-") {}
    std::string fstype, source, super;
    if (!(f >> fstype >> source >> super)) continue;
    if (fstype == "cgroup2") v2.push_back({root, point});
    if (fstype == "cgroup") {
      std::stringstream opts(super);
      for (std::string o; std::getline(opts, o, ',');)
        if (o == "cpu") v1_cpu.push_back({root, point});
    }
  }
  int best = 0;
  auto take = [&best](int cpus) {
    if (cpus > 0 && (best == 0 || cpus < best)) best = cpus;
  };
  // The cgroup's directory under a mount and each parent's up to the mount itself (a
  // parent's limit binds its children).
  auto each_level = [](const Mount& m, std::string path, auto&& visit) {
    if (m.root != "/" && path.rfind(m.root, 0) == 0) path = path.substr(m.root.size());
    if (path.empty() || path[0] != '/') path = "/" + path;
    for (;;) {
      visit(m.point + (path == "/" ? "" : path));
      if (path == "/") return;
      const auto slash = path.rfind('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  };
  std::stringstream groups{std::string(proc_self_cgroup)};
  for (std::string entry; std::getline(groups, entry);) {
    // "hierarchy-id:controllers:path"; cgroup v2's is "0::path".
    const auto first = entry.find(':');
    const auto second = first == std::string::npos ? first : entry.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string id = entry.substr(0, first), controllers = entry.substr(first + 1, second - first - 1);
    const std::string path = entry.substr(second + 1);
    if (id == "0" && controllers.empty()) {
      for (const Mount& m : v2)
        each_level(m, path, [&](const std::string& dir) { take(cpus_of_cgroup_v2_max(first_line(dir + "/cpu.max").c_str())); });
      continue;
    }
    std::stringstream names(controllers);
    bool cpu = false;
    for (std::string c; std::getline(names, c, ',');) cpu = cpu || c == "cpu";
    if (!cpu) continue;
    for (const Mount& m : v1_cpu)
      each_level(m, path, [&](const std::string& dir) {
        std::int64_t quota = 0, period = 0;
        if (std::sscanf(first_line(dir + "/cpu.cfs_quota_us").c_str(), "%" SCNd64, &quota) == 1 &&
            std::sscanf(first_line(dir + "/cpu.cfs_period_us").c_str(), "%" SCNd64, &period) == 1)
          take(cpus_of_quota(quota, period));
      });
  }
  return best;
}

int CpuBudget::available() const {
  int n = affinity > 0 ? affinity : online;
  if (quota > 0) n = std::min(n, quota);
  return std::max(1, n);
}

const CpuBudget& cpu_budget() {
  static const CpuBudget budget = [] {
    CpuBudget b;
    b.online = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) b.affinity = CPU_COUNT(&set);
    auto whole = [](const char* path) {
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      return text.str();
    };
    b.quota = cgroup_quota_cpus(whole("/proc/self/cgroup"), whole("/proc/self/mountinfo"), read_line);
    return b;
  }();
  return budget;
}

void set_num_threads(int n) {
  pool().resize(n);
}

int num_threads() { return pool().threads(); }

void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(1, grain);
  const std::int64_t chunks = (n + grain - 1) / grain;
  auto chunk = [&](std::int64_t c) { body(c * grain, std::min(n, (c + 1) * grain)); };
  // (More chunks than the claim counter's 32 bits hold run in order here: the same chunks.)
  if (chunks == 1 || t_in_parallel || pool().threads() == 1 || chunks >= (std::int64_t{1} << 32)) {
    for (std::int64_t c = 0; c < chunks; ++c) chunk(c);
    return;
  }
  pool().run(chunks, chunk);
}

}  // namespace ampcheck::kernels::cpu
