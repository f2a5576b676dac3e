// The CUPTI tracer's worker (inspector/cupti_tracer.h): a thread of its own that takes
// the buffers CUPTI completes, walks their records, and joins them with the op instances
// (KernelCorrelator, inspector/kernel_trace.h), so that the training thread only pushes
// and pops correlation ids and tells op begins, op ends and step ends.
//
// Who does what:
//   CUPTI's buffer callbacks (CUPTI's thread, or inside a flush): lend() hands out a
//     buffer, from a small free list before a new allocation; completed() queues it and
//     wakes the worker. Nothing else.
//   the training thread: begin_op() hands out the op instance's external id and queues the
//     instance under the lock, end_op() queues its end; ask() asks for a join and
//     returns, join_now() and finish() ask and wait.
//   the worker thread: tells the correlator the queued begins and ends, walks each
//     completed buffer (the parse hook) as soon as it is queued and gives it back to the
//     free list; for a join it first has CUPTI hand back its completed buffers (the flush
//     hook, so cuptiActivityFlushAll runs on this thread, never on the training thread),
//     then joins and publishes the flush, the stats and the errors for take().
// Asks that come while a join is under way are served together by the next one (labelled
// with the latest step), so a slow join never queues up joins behind it.
//
// The output is the correlator's: the same records joined to the same op instances, in
// its deterministic order (ops by sequence, records by start time then the rest of the
// record), whatever order the buffers completed in and whichever thread completed them.
//
// The hooks are CUPTI's calls in the tracer (cupti::flush, cupti::parse) and fakes in the
// tests (tests/inspector_cupti_worker_test.cpp), which feed it buffers by hand.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "inspector/cupti_activity.h"
#include "inspector/kernel_trace.h"

namespace ampcheck::inspector {

struct ActivityWorkerHooks {
  // Has CUPTI hand back its completed buffers (forced: all of them) through completed(),
  // on the calling thread; "" or the failed call.
  std::function<std::string(bool forced)> flush;
  // The records of a completed buffer's first `valid` bytes; failed calls go to `errors`.
  std::function<ActivityBatch(std::uint8_t* buffer, std::size_t valid, std::vector<std::string>& errors)> parse;
};

// What the joins made since the last take().
struct ActivityResults {
  std::vector<KernelFlush> flushes;  // the non-empty ones, in join order
  KernelTraceStats stats;            // after the last join
  std::size_t waiting = 0;           // records not joined yet, after the last join
  std::vector<std::string> errors;   // CUPTI errors met (flush, dropped count, walk)
};

class ActivityWorker final : public cupti::BufferSink {
 public:
  // Starts the thread.
  ActivityWorker(KernelCorrelatorOptions correlator, cupti::BufferSettings buffers, ActivityWorkerHooks hooks);
  // Serves the joins already asked for, joins the thread and frees the buffers it holds.
  // Let go of it as CUPTI's sink first (cupti::release_sink).
  ~ActivityWorker();
  ActivityWorker(const ActivityWorker&) = delete;
  ActivityWorker& operator=(const ActivityWorker&) = delete;

  // cupti::BufferSink, from any thread. At most BufferSettings::max_buffers are out at
  // once, counting those queued and being walked.
  std::uint8_t* lend(std::size_t& bytes) override;
  void completed(cupti::CompletedBuffer buffer) override;

  // The training thread. The id to push for the op instance: from 1 up, never
  // kObserversExternal.
  std::uint64_t begin_op(OpInstance instance);
  void end_op(std::uint64_t external);

  // Asks for a join labelled `step` and returns at once: its ticket, for wait().
  std::uint64_t ask(std::int64_t step);
  // Returns once a join begun after the ask `ticket` was made is done (0: at once).
  void wait(std::uint64_t ticket);
  // ask and wait: a join that holds every buffer CUPTI completed before the call.
  void join_now(std::int64_t step);
  // The last join: CUPTI flushed forced, every record joined or unattributed, every op
  // instance let go (KernelCorrelator::finish). Waits. Nothing is joined after it.
  void finish();

  // What the joins done since the last call published; never waits for one.
  ActivityResults take();

 private:
  void run();
  // On the worker thread, outside the lock.
  void absorb(std::vector<std::pair<std::uint64_t, OpInstance>>& begun, std::vector<std::uint64_t>& ended,
              std::vector<cupti::CompletedBuffer>& buffers, std::vector<std::string>& errors);
  // Under the lock: onto the free list, or freed when it is full or the buffer is not one
  // this worker lent (a previous sink's, handed back late).
  void give_back(std::uint8_t* buffer);

  const ActivityWorkerHooks hooks_;
  const std::size_t buffer_bytes_;
  const std::size_t max_buffers_;

  std::mutex mutex_;
  std::condition_variable wake_;  // the worker: buffers, asks, quitting
  std::condition_variable done_;  // the waiters: a join done
  // Under mutex_.
  std::vector<std::uint8_t*> free_;
  std::vector<std::uint8_t*> out_;  // lent and not given back: with CUPTI, queued or being walked
  std::vector<cupti::CompletedBuffer> completed_;
  std::vector<std::pair<std::uint64_t, OpInstance>> begun_;  // by external id, rising
  std::vector<std::uint64_t> ended_;
  std::uint64_t next_external_ = 1;
  std::uint64_t asked_ = 0;   // the last ticket handed out
  std::uint64_t joined_ = 0;  // every ticket up to this one is served
  std::int64_t asked_step_ = 0;
  bool finish_asked_ = false;
  bool quit_ = false;
  ActivityResults results_;

  // The worker thread's alone.
  KernelCorrelator correlator_;
  std::unordered_map<std::string, std::string> names_;  // CUPTI's kernel names, demangled
  bool finished_ = false;

  std::thread thread_;  // last: starts once everything above is built
};

}  // namespace ampcheck::inspector
