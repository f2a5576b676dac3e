// The CUPTI tracer: an engine observer that, on a GPU, has CUPTI record every kernel,
// memcpy and memset, and ties each to the op instance that launched it (module path,
// forward or backward, step). Op begin pushes the instance's external correlation id, op
// end pops it, step end asks for a join of what CUPTI has recorded
// (inspector/kernel_trace.h). The engine does not know it exists.
//
// The training thread does no more than that: a worker thread, started by start() and
// joined by stop() (inspector/cupti_worker.h), takes the buffers CUPTI completes, walks
// their records and joins them, and at each step end's ask it is the worker that has
// CUPTI hand back its completed buffers (cuptiActivityFlushAll(0), which CUPTI allows
// from any thread). The step end does not wait for that join: what it hands over
// (take_flushes) is what the joins done by then made, usually the previous step's. It
// waits only when the worker is still on the join asked one step end before, so that
// records reach the op trace within two steps of their own (the op trace keeps four,
// inspector/trace.cpp). flush() and stop() wait for their join.
//
// Where there is nothing to trace (a build without CUDA; a CUDA build on a machine whose
// CUDA runtime sees no GPU) the tracer says it is unavailable and why, and does nothing:
// no CUPTI call at all, no records, one branch per hook.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/hooks.h"
#include "inspector/cupti_activity.h"
#include "inspector/cupti_worker.h"
#include "inspector/kernel_trace.h"

namespace ampcheck::inspector {

struct CuptiTracerOptions {
  KernelCorrelatorOptions correlator;
  cupti::BufferSettings buffers;
};

class CuptiTracer : public Observer {
 public:
  // Decides availability from the build and the CUDA runtime's device count; calls no
  // CUPTI function.
  explicit CuptiTracer(CuptiTracerOptions options = {});
  ~CuptiTracer() override;  // stops
  CuptiTracer(const CuptiTracer&) = delete;
  CuptiTracer& operator=(const CuptiTracer&) = delete;

  bool available() const { return why_unavailable_.empty(); }
  // "" when available; otherwise the reason, for a report's one line.
  const std::string& why_unavailable() const { return why_unavailable_; }

  // Turns CUPTI on. False when unavailable, when another tracer in this process runs, or
  // when CUPTI refuses (another profiler holds it, no permission to profile): the tracer
  // is then unavailable from here on and why_unavailable() names the failed call.
  bool start();
  // Turns CUPTI off, forces its last buffers out and waits for the worker to join them;
  // nothing waits after, and the worker thread is joined.
  void stop();
  bool running() const { return running_; }

  // From the thread that runs the ops (CUPTI's correlation stack is per thread). Ops
  // already running when start() was called are not pushed; an op that never ended (its
  // kernel threw) is popped at the next op end around it or at step end.
  void on_op_begin(const OpEvent& e) override;
  void on_op_end(const OpEvent& e) override;
  // Asks the worker for a join and hands over what earlier joins made (see above).
  void on_step_end(std::int64_t step) override;

  // Around the other observers' work inside an op's begin and end: what they launch is
  // correlated with kObserversExternal, not with the op (inspector/kernel_watch.h).
  void push_observers();
  void pop_observers();

  // For a reader that needs the records now (GLOG's per-op mode, after synchronizing the
  // GPU): waits for a join of every buffer CUPTI has completed by this call; what is new
  // goes on flushes(). Ops still open stay pushed.
  void flush(std::int64_t step);

  // CUPTI's clock now, in its nanoseconds (the kernel records' timestamps): 0 when not
  // running. The caller pairs it with its own clock to place kernels on its timeline.
  std::uint64_t timestamp_ns() const;

  // Every non-empty flush handed over so far (by on_step_end, flush, stop and
  // take_flushes), in join order; take_flushes() also takes the joins done since, without
  // waiting, and hands them all over.
  const std::vector<KernelFlush>& flushes() const { return flushes_; }
  std::vector<KernelFlush> take_flushes();
  // As of the last join handed over: after stop(), of the whole run (a start() after a
  // stop() counts afresh).
  const KernelTraceStats& stats() const { return stats_; }
  std::size_t waiting() const { return waiting_; }

  // CUPTI calls made since this tracer was made: 0 for an unavailable one.
  std::uint64_t cupti_calls() const { return cupti::calls() - calls_before_; }
  // CUPTI errors met while running (they do not stop training): how many, and the
  // first few, each naming the call.
  std::uint64_t error_count() const { return error_count_; }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  void note(std::string error);
  void close_open_ops();
  void collect();  // what the worker's joins made, onto flushes_, stats_, errors_

  CuptiTracerOptions options_;
  std::string why_unavailable_;
  bool running_ = false;
  std::unique_ptr<ActivityWorker> worker_;  // while running
  std::uint64_t step_ticket_ = 0;           // the join the last step end asked for
  struct Open {
    std::uint64_t sequence = 0, external = 0;
  };
  std::vector<Open> open_;  // the ops pushed and not popped, innermost last
  int observers_pushed_ = 0;
  std::vector<KernelFlush> flushes_;
  KernelTraceStats stats_;
  std::size_t waiting_ = 0;
  std::uint64_t calls_before_ = 0;
  std::uint64_t error_count_ = 0;
  std::vector<std::string> errors_;
};

}  // namespace ampcheck::inspector
