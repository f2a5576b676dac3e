#include "inspector/cupti_worker.h"

#include <algorithm>
#include <cstdlib>

namespace ampcheck::inspector {
namespace {

// CUPTI wants 8-byte aligned buffers (ACTIVITY_RECORD_ALIGNMENT).
constexpr std::size_t kAlign = 8;
// Buffers kept for reuse once CUPTI gave them back: a step's worth in the usual case, so
// that lend() allocates only when CUPTI holds more than that at once.
constexpr std::size_t kFreeKept = 4;

}  // namespace

ActivityWorker::ActivityWorker(KernelCorrelatorOptions correlator, cupti::BufferSettings buffers,
                               ActivityWorkerHooks hooks)
    : hooks_(std::move(hooks)),
      buffer_bytes_(std::max(kAlign, (buffers.bytes + kAlign - 1) / kAlign * kAlign)),
      max_buffers_(buffers.max_buffers),
      correlator_(correlator),
      thread_([this] { run(); }) {}

ActivityWorker::~ActivityWorker() {
  {
    std::lock_guard lock(mutex_);
    quit_ = true;
  }
  wake_.notify_one();
  thread_.join();
  // Buffers still out are CUPTI's: the callbacks free them once no sink is set.
  for (const cupti::CompletedBuffer& b : completed_) std::free(b.data);
  for (std::uint8_t* p : free_) std::free(p);
}

std::uint8_t* ActivityWorker::lend(std::size_t& bytes) {
  std::lock_guard lock(mutex_);
  if (out_.size() >= max_buffers_) return nullptr;
  std::uint8_t* p = nullptr;
  if (!free_.empty()) {
    p = free_.back();
    free_.pop_back();
  } else {
    p = static_cast<std::uint8_t*>(std::aligned_alloc(kAlign, buffer_bytes_));
    if (p == nullptr) return nullptr;
  }
  out_.push_back(p);
  bytes = buffer_bytes_;
  return p;
}

void ActivityWorker::completed(cupti::CompletedBuffer buffer) {
  {
    std::lock_guard lock(mutex_);
    completed_.push_back(std::move(buffer));
  }
  wake_.notify_one();
}

void ActivityWorker::give_back(std::uint8_t* buffer) {
  if (buffer == nullptr) return;
  const auto it = std::find(out_.begin(), out_.end(), buffer);
  if (it == out_.end()) {
    std::free(buffer);
    return;
  }
  out_.erase(it);
  if (free_.size() < kFreeKept) {
    free_.push_back(buffer);
  } else {
    std::free(buffer);
  }
}

std::uint64_t ActivityWorker::begin_op(OpInstance instance) {
  std::lock_guard lock(mutex_);
  const std::uint64_t external = next_external_++;
  begun_.emplace_back(external, std::move(instance));
  return external;
}

void ActivityWorker::end_op(std::uint64_t external) {
  std::lock_guard lock(mutex_);
  ended_.push_back(external);
}

std::uint64_t ActivityWorker::ask(std::int64_t step) {
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    asked_step_ = step;
    ticket = ++asked_;
  }
  wake_.notify_one();
  return ticket;
}

void ActivityWorker::wait(std::uint64_t ticket) {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return joined_ >= ticket; });
}

void ActivityWorker::join_now(std::int64_t step) { wait(ask(step)); }

void ActivityWorker::finish() {
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(mutex_);
    finish_asked_ = true;
    ticket = ++asked_;
  }
  wake_.notify_one();
  wait(ticket);
}

ActivityResults ActivityWorker::take() {
  std::lock_guard lock(mutex_);
  ActivityResults out;
  out.flushes.swap(results_.flushes);
  out.errors.swap(results_.errors);
  out.stats = results_.stats;
  out.waiting = results_.waiting;
  return out;
}

void ActivityWorker::run() {
  // Swapped with the queues each round, so that both sides keep their capacity and the
  // training thread's begin_op does not allocate once the vectors have grown.
  std::vector<std::pair<std::uint64_t, OpInstance>> begun;
  std::vector<std::uint64_t> ended;
  std::vector<cupti::CompletedBuffer> buffers;
  std::vector<std::string> errors;
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return quit_ || !completed_.empty() || asked_ > joined_; });
    if (quit_ && completed_.empty() && asked_ == joined_) return;
    // Every ask made so far is served by this join; one made from here on waits for the next.
    const std::uint64_t serving = asked_;
    const bool join = serving > joined_ && !finished_;
    const bool final = join && finish_asked_;
    const std::int64_t step = asked_step_;
    if (join) {
      // CUPTI hands its completed buffers back through completed(), on this thread.
      lock.unlock();
      if (std::string e = hooks_.flush(final); !e.empty()) errors.push_back(std::move(e));
      lock.lock();
    }
    begun.swap(begun_);
    ended.swap(ended_);
    buffers.swap(completed_);
    lock.unlock();

    absorb(begun, ended, buffers, errors);
    KernelFlush flush;
    if (join) {
      flush = final ? correlator_.finish() : correlator_.flush(step);
      finished_ = final;
    }

    lock.lock();
    for (const cupti::CompletedBuffer& b : buffers) give_back(b.data);
    buffers.clear();
    for (std::string& e : errors) results_.errors.push_back(std::move(e));
    errors.clear();
    if (serving > joined_) {
      if (!flush.empty()) results_.flushes.push_back(std::move(flush));
      results_.stats = correlator_.stats();
      results_.waiting = correlator_.waiting();
      joined_ = serving;
      done_.notify_all();
    }
  }
}

void ActivityWorker::absorb(std::vector<std::pair<std::uint64_t, OpInstance>>& begun, std::vector<std::uint64_t>& ended,
                            std::vector<cupti::CompletedBuffer>& buffers, std::vector<std::string>& errors) {
  // Begins first: a buffer's records name only ops begun before CUPTI handed it back,
  // and every such begin was queued before the buffer was.
  for (auto& [external, instance] : begun) correlator_.begin_op_with(external, std::move(instance));
  begun.clear();
  for (const std::uint64_t external : ended) correlator_.end_op(external);
  ended.clear();
  for (cupti::CompletedBuffer& b : buffers) {
    if (!b.error.empty()) errors.push_back(std::move(b.error));
    if (finished_) continue;  // after the last join: nothing is joined any more
    ActivityBatch batch = hooks_.parse(b.data, b.valid, errors);
    batch.dropped += b.dropped;
    for (KernelRecord& k : batch.kernels) {
      auto it = names_.find(k.name);
      if (it == names_.end()) it = names_.emplace(k.name, demangle_kernel_name(k.name)).first;
      k.name = it->second;
    }
    if (!batch.empty()) correlator_.add(std::move(batch));
  }
}

}  // namespace ampcheck::inspector
