#include "inspector/kernel_watch.h"

#include <chrono>
#include <utility>

#include "kernels/memory_kernels.h"  // MemoryKernels::cuda().synchronize: per-op mode waits for the GPU

namespace ampcheck::inspector {

KernelWatch::KernelWatch(OpTrace* trace, KernelWatchOptions options)
    : trace_(trace), options_(std::move(options)), tracer_(options_.tracer) {
  enter_.w = this;
  leave_.w = this;
}

KernelWatch::~KernelWatch() { stop(); }

bool KernelWatch::start() {
  if (!tracer_.start()) return false;
  // CUPTI's clock and the op records' steady clock, read back to back: a kernel's start
  // in record time is its CUPTI start plus this offset (microseconds off at most, which
  // the Chrome trace's GPU track can bear).
  const std::uint64_t cupti_now = tracer_.timestamp_ns();
  const double steady_now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  clock_offset_ = steady_now - static_cast<double>(cupti_now) * 1e-9;
  return true;
}

void KernelWatch::stop() {
  if (!tracer_.running()) return;
  tracer_.stop();
  deliver();
}

const KernelClass& KernelWatch::classify(const std::string& name) {
  auto it = classes_.find(name);
  if (it == classes_.end()) it = classes_.emplace(name, classify_kernel_name(name)).first;
  return it->second;
}

void KernelWatch::deliver() {
  for (KernelFlush& f : tracer_.take_flushes()) {
    for (const OpActivity& a : f.ops) {
      std::vector<const KernelClass*> classes;
      classes.reserve(a.kernels.size());
      for (const KernelRecord& k : a.kernels) classes.push_back(&classify(k.name));
      if (options_.per_op && a.op.sequence == last_sequence_) {
        for (std::size_t i = 0; i < a.kernels.size(); ++i) {
          const KernelRecord& k = a.kernels[i];
          last_launches_.push_back(GpuLaunch{k.name, static_cast<double>(k.start_ns) * 1e-9 + clock_offset_,
                                             static_cast<double>(k.duration_ns()) * 1e-9, k.grid, k.block, k.stream,
                                             classes[i]});
          last_classes_.push_back(classes[i]);
        }
      }
      if (trace_ != nullptr) trace_->add_gpu(a, classes, clock_offset_);
    }
    auto tally = [&](const std::vector<KernelRecord>& kernels, std::map<std::string, OutsideKernels>& into) {
      for (const KernelRecord& k : kernels) {
        OutsideKernels& o = into[k.name];
        o.cls = classify(k.name);
        ++o.launches;
        o.total_ns += k.duration_ns();
      }
    };
    tally(f.unattributed.kernels, outside_);
    tally(f.observers.kernels, observers_);
  }
}

std::vector<std::pair<const GpuLaunch*, const KernelClass*>> KernelWatch::kernels_of(std::uint64_t sequence) const {
  std::vector<std::pair<const GpuLaunch*, const KernelClass*>> out;
  if (sequence != last_sequence_) return out;
  for (std::size_t i = 0; i < last_launches_.size(); ++i) out.emplace_back(&last_launches_[i], last_classes_[i]);
  return out;
}

// ---- the two observers

void KernelWatch::Enter::on_op_begin(const OpEvent&) {
  if (w->options_.observers_launch) w->tracer_.push_observers();
}

void KernelWatch::Leave::on_op_begin(const OpEvent& e) {
  if (w->options_.observers_launch) w->tracer_.pop_observers();
  w->tracer_.on_op_begin(e);
}

void KernelWatch::Enter::on_op_end(const OpEvent& e) {
  CuptiTracer& t = w->tracer_;
  if (!t.running()) return;
  t.on_op_end(e);
  if (w->options_.per_op) {
    w->last_sequence_ = e.sequence;
    w->last_launches_.clear();
    w->last_classes_.clear();
    if (e.kernel.rfind("cuda:", 0) == 0) kernels::MemoryKernels::cuda().synchronize();
    t.flush(e.step);
    w->deliver();
  }
  if (w->options_.observers_launch) t.push_observers();
}

void KernelWatch::Leave::on_op_end(const OpEvent&) {
  if (w->options_.observers_launch) w->tracer_.pop_observers();
}

void KernelWatch::Enter::on_step_end(std::int64_t step) {
  if (!w->tracer_.running()) return;
  w->tracer_.on_step_end(step);
  w->deliver();
}

}  // namespace ampcheck::inspector
