#include "inspector/cupti_tracer.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "kernels/cuda/cuda.h"  // probe(): whether the CUDA runtime sees a GPU

namespace ampcheck::inspector {
namespace {

// CUPTI's activity state is per process: one tracer runs at a time.
std::atomic<bool> g_claimed{false};

constexpr std::size_t kErrorsKept = 8;

std::string unavailable_reason() {
  if (const std::string_view none = cupti::missing(); !none.empty()) return std::string(none);
  const kernels::cuda::Probe& p = kernels::cuda::probe();
  if (p.device_count == 0)
    return "no GPU: " + (p.why_none.empty() ? std::string("the CUDA runtime lists no device") : p.why_none);
  return {};
}

}  // namespace

CuptiTracer::CuptiTracer(CuptiTracerOptions options)
    : options_(options), why_unavailable_(unavailable_reason()), calls_before_(cupti::calls()) {}

CuptiTracer::~CuptiTracer() { stop(); }

bool CuptiTracer::start() {
  if (running_) return true;
  if (!available()) return false;
  if (bool expected = false; !g_claimed.compare_exchange_strong(expected, true)) {
    why_unavailable_ = "another CUPTI tracer is running in this process";
    return false;
  }
  KernelCorrelatorOptions correlator = options_.correlator;
  correlator.ends_told = true;  // on_op_end tells each op's end
  worker_ = std::make_unique<ActivityWorker>(correlator, options_.buffers,
                                             ActivityWorkerHooks{cupti::flush, cupti::parse});
  if (std::string e = cupti::enable(*worker_); !e.empty()) {
    why_unavailable_ = std::move(e);
    worker_.reset();
    g_claimed = false;
    return false;
  }
  running_ = true;
  return true;
}

void CuptiTracer::stop() {
  if (!running_) return;
  close_open_ops();
  note(cupti::disable());
  worker_->finish();  // the forced flush, on the worker thread, and the last join
  collect();
  cupti::release_sink();
  worker_.reset();
  step_ticket_ = 0;  // the next start's worker counts its tickets from 1
  running_ = false;
  g_claimed = false;
}

void CuptiTracer::on_op_begin(const OpEvent& e) {
  if (!running_) return;
  const std::uint64_t external = worker_->begin_op(OpInstance::of(e));
  note(cupti::push(external));
  open_.push_back({e.sequence, external});
}

void CuptiTracer::on_op_end(const OpEvent& e) {
  if (!running_) return;
  const auto it = std::find_if(open_.begin(), open_.end(), [&](const Open& o) { return o.sequence == e.sequence; });
  if (it == open_.end()) return;  // began before start()
  // Inner ops that never ended (an exception left them) go with it.
  for (bool done = false; !done;) {
    done = open_.back().sequence == e.sequence;
    worker_->end_op(open_.back().external);
    open_.pop_back();
    note(cupti::pop());
  }
}

void CuptiTracer::on_step_end(std::int64_t step) {
  if (!running_) return;
  close_open_ops();  // the step is over: an op left open by an exception ends with it
  // The worker lagging by more than a step would have records reach the op trace after
  // it let go of their calls: wait for the join the previous step end asked for (done
  // long since, unless joins are slower than steps).
  const std::uint64_t ticket = worker_->ask(step);
  worker_->wait(std::exchange(step_ticket_, ticket));
  collect();
}

void CuptiTracer::push_observers() {
  if (!running_) return;
  note(cupti::push(kObserversExternal));
  ++observers_pushed_;
}

void CuptiTracer::pop_observers() {
  if (!running_ || observers_pushed_ == 0) return;
  note(cupti::pop());
  --observers_pushed_;
}

std::uint64_t CuptiTracer::timestamp_ns() const { return running_ ? cupti::timestamp() : 0; }

void CuptiTracer::flush(std::int64_t step) {
  if (!running_) return;
  // Buffers whose records are complete: kernels still running come back at a later
  // join, and the correlator waits for them (KernelCorrelatorOptions).
  worker_->join_now(step);
  collect();
}

std::vector<KernelFlush> CuptiTracer::take_flushes() {
  collect();
  return std::exchange(flushes_, {});
}

void CuptiTracer::close_open_ops() {
  while (observers_pushed_ > 0) pop_observers();
  while (!open_.empty()) {
    worker_->end_op(open_.back().external);
    open_.pop_back();
    note(cupti::pop());
  }
}

void CuptiTracer::collect() {
  if (!worker_) return;
  ActivityResults r = worker_->take();
  for (KernelFlush& f : r.flushes) flushes_.push_back(std::move(f));
  stats_ = r.stats;
  waiting_ = r.waiting;
  for (std::string& e : r.errors) note(std::move(e));
}

void CuptiTracer::note(std::string error) {
  if (error.empty()) return;
  ++error_count_;
  if (errors_.size() < kErrorsKept) errors_.push_back(std::move(error));
}

}  // namespace ampcheck::inspector
