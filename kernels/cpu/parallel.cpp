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
#include <vector>

namespace ampcheck::kernels::cpu {
namespace {

thread_local bool t_in_parallel = false;

// A fixed set of workers that all join each parallel_for; chunks are claimed from an
// atomic counter, so which thread runs a chunk varies but the chunks never do.
class Pool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() { stop_workers(); }

  int threads() const { return threads_; }

  void resize(int threads) {
    std::lock_guard<std::mutex> run(run_mu_);
    stop_workers();
    threads_ = std::max(1, threads);
    stop_ = false;
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { work(); });
  }

  void run(std::int64_t chunks, const std::function<void(std::int64_t)>& body) {
    std::lock_guard<std::mutex> run(run_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      body_ = &body;
      chunks_ = chunks;
      next_.store(0);
      pending_.store(static_cast<int>(workers_.size()));
      generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    drain();
    spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
    if (pending_.load(std::memory_order_acquire) != 0) {
      std::unique_lock<std::mutex> lock(mu_);
      done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    body_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  // Runs chunks until none is left; the first exception stops the rest and is rethrown
  // by run() on the calling thread.
  void drain() {
    t_in_parallel = true;
    try {
      for (std::int64_t c = next_++; c < chunks_; c = next_++) (*body_)(c);
    } catch (...) {
      next_.store(chunks_);
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    t_in_parallel = false;
  }

  // A step runs hundreds of small parallel regions back to back: a worker that slept
  // between them would be woken through the kernel each time (tens of microseconds, more
  // than many regions take), so workers and the caller spin a short while first, as
  // OpenMP runtimes do, and only then block.
  template <typename Ready>
  static void spin_until(Ready ready) {
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
      drain();
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_one();
      }
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
  std::vector<std::thread> workers_;
  const std::function<void(std::int64_t)>* body_ = nullptr;
  std::int64_t chunks_ = 0;
  std::atomic<std::int64_t> next_{0};
  std::atomic<int> pending_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  int threads_ = 1;
  std::exception_ptr error_;
};

int default_threads() {
  if (const char* env = std::getenv("AMPCHECK_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

Pool& pool() {
  static Pool p(default_threads());
  return p;
}

}  // namespace

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
  if (chunks == 1 || t_in_parallel || pool().threads() == 1) {
    for (std::int64_t c = 0; c < chunks; ++c) chunk(c);
    return;
  }
  pool().run(chunks, chunk);
}

}  // namespace ampcheck::kernels::cpu
