// The CUPTI tracer: an engine observer that, on a GPU, has CUPTI record every kernel,
// memcpy and memset, and ties each to the op instance that launched it (module path,
// forward or backward, step). Op begin pushes the instance's external correlation id, op
// end pops it, step end flushes CUPTI's buffers and joins what came back
// (inspector/kernel_trace.h). The engine does not know it exists.
//
// Where there is nothing to trace (a build without CUDA; a CUDA build on a machine whose
// CUDA runtime sees no GPU) the tracer says it is unavailable and why, and does nothing:
// no CUPTI call at all, no records, one branch per hook.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/hooks.h"
#include "inspector/cupti_activity.h"
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
  // Turns CUPTI off, forces its last buffers out and joins them; nothing waits after.
  void stop();
  bool running() const { return running_; }

  // From the thread that runs the ops (CUPTI's correlation stack is per thread). Ops
  // already running when start() was called are not pushed; an op that never ended (its
  // kernel threw) is popped at the next op end around it or at step end.
  void on_op_begin(const OpEvent& e) override;
  void on_op_end(const OpEvent& e) override;
  void on_step_end(std::int64_t step) override;  // flush(step)

  // Around the other observers' work inside an op's begin and end: what they launch is
  // correlated with kObserversExternal, not with the op (inspector/kernel_watch.h).
  void push_observers();
  void pop_observers();

  // Hands back CUPTI's finished buffers and joins them: what is new goes on flushes().
  // Ops still open stay pushed (a flush inside an op, after the GPU was synchronized).
  void flush(std::int64_t step);

  // CUPTI's clock now, in its nanoseconds (the kernel records' timestamps): 0 when not
  // running. The caller pairs it with its own clock to place kernels on its timeline.
  std::uint64_t timestamp_ns() const;

  // Every non-empty flush so far, in order; take_flushes() hands them over.
  const std::vector<KernelFlush>& flushes() const { return flushes_; }
  std::vector<KernelFlush> take_flushes();
  const KernelTraceStats& stats() const { return correlator_.stats(); }
  std::size_t waiting() const { return correlator_.waiting(); }

  // CUPTI calls made since this tracer was made: 0 for an unavailable one.
  std::uint64_t cupti_calls() const { return cupti::calls() - calls_before_; }
  // CUPTI errors met while running (they do not stop training): how many, and the
  // first few, each naming the call.
  std::uint64_t error_count() const { return error_count_; }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  void note(std::string error);
  void close_open_ops();
  void drain();

  CuptiTracerOptions options_;
  std::string why_unavailable_;
  bool running_ = false;
  KernelCorrelator correlator_;
  struct Open {
    std::uint64_t sequence = 0, external = 0;
  };
  std::vector<Open> open_;  // the ops pushed and not popped, innermost last
  int observers_pushed_ = 0;
  std::vector<KernelFlush> flushes_;
  std::unordered_map<std::string, std::string> names_;  // CUPTI's kernel names, demangled
  std::uint64_t calls_before_ = 0;
  std::uint64_t error_count_ = 0;
  std::vector<std::string> errors_;
};

}  // namespace ampcheck::inspector
