// The GPU kernels each op call really ran, in the inspector: the CUPTI tracer
// (inspector/cupti_tracer.h) joins CUPTI's records to op instances, the classifier
// (inspector/kernel_class.h) reads each kernel's name once, and the op trace
// (inspector/trace.h) gets them on the call's record, its instance and its op type's GPU
// time. The engine does not know this exists.
//
// Two observers, attached around the others (Inspector::attach): `enter` first, `leave`
// last. At an op's begin, enter() correlates the other observers' own GPU work with
// kObserversExternal and leave() then pushes the op's id, so only what the op itself
// launches is the op's; at its end the op's id is popped first and the observers'
// work is again theirs. In per-op mode (GLOG_v=5) the GPU is synchronized and CUPTI
// flushed at each op's end, so the log line written after it names the op's kernels.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/hooks.h"
#include "inspector/cupti_tracer.h"
#include "inspector/kernel_class.h"
#include "inspector/trace.h"

namespace ampcheck::inspector {

struct KernelWatchOptions {
  CuptiTracerOptions tracer;
  // Synchronize the GPU and flush CUPTI at each op's end, so that kernels_of(sequence)
  // holds the op's kernels when the observers after this one hear the end (the GLOG log).
  bool per_op = false;
  // Whether the other observers launch GPU work of their own inside op events (the NaN
  // watch's and the numerics' statistics: stats mode and above). Where they do not
  // (trace mode), their work needs no correlation id of its own: two CUPTI calls per op
  // instead of six.
  bool observers_launch = true;
};

// Kernels no op launched, by name: the step's own bookkeeping (the scaler's unscale, the
// optimizer's update, copies of the loss), or records whose correlation was lost.
struct OutsideKernels {
  KernelClass cls;
  std::int64_t launches = 0;
  std::uint64_t total_ns = 0;
};

class KernelWatch {
 public:
  KernelWatch(OpTrace* trace, KernelWatchOptions options = {});
  ~KernelWatch();
  KernelWatch(const KernelWatch&) = delete;
  KernelWatch& operator=(const KernelWatch&) = delete;

  // Turns CUPTI on; false (and why_not() says why) where it cannot: no GPU, a build
  // without CUDA, another profiler holding CUPTI. Training goes on either way.
  bool start();
  // The last flush: every record still out is joined or reported. Idempotent.
  void stop();
  bool running() const { return tracer_.running(); }
  const std::string& why_not() const { return tracer_.why_unavailable(); }

  Observer& enter() { return enter_; }
  Observer& leave() { return leave_; }

  // Per-op mode: the kernels the op call `sequence` launched (empty when none, or when
  // it is not the op that just ended).
  std::vector<std::pair<const GpuLaunch*, const KernelClass*>> kernels_of(std::uint64_t sequence) const;

  const KernelTraceStats& stats() const { return tracer_.stats(); }
  // CUPTI errors met while running, the first few, each naming the call.
  const std::vector<std::string>& errors() const { return tracer_.errors(); }
  std::uint64_t error_count() const { return tracer_.error_count(); }
  const std::map<std::string, OutsideKernels>& outside_ops() const { return outside_; }
  const std::map<std::string, OutsideKernels>& observers_own() const { return observers_; }

  // The class of a kernel name, read once per name.
  const KernelClass& classify(const std::string& name);

 private:
  struct Enter : Observer {
    KernelWatch* w;
    void on_op_begin(const OpEvent& e) override;
    void on_op_end(const OpEvent& e) override;
    void on_step_end(std::int64_t step) override;
  };
  struct Leave : Observer {
    KernelWatch* w;
    void on_op_begin(const OpEvent& e) override;
    void on_op_end(const OpEvent& e) override;
  };
  void deliver();

  OpTrace* trace_;
  KernelWatchOptions options_;
  CuptiTracer tracer_;
  Enter enter_;
  Leave leave_;
  double clock_offset_ = 0;  // steady-clock seconds at CUPTI's 0
  std::unordered_map<std::string, KernelClass> classes_;
  std::map<std::string, OutsideKernels> outside_, observers_;
  // Per-op mode: the launches of the op that just ended, for kernels_of.
  std::uint64_t last_sequence_ = 0;
  std::vector<GpuLaunch> last_launches_;
  std::vector<const KernelClass*> last_classes_;
};

}  // namespace ampcheck::inspector
