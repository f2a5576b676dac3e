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
    : options_(options),
      why_unavailable_(unavailable_reason()),
      correlator_([&] {
        KernelCorrelatorOptions o = options.correlator;
        o.ends_told = true;  // on_op_end tells each op's end
        return o;
      }()),
      calls_before_(cupti::calls()) {}

CuptiTracer::~CuptiTracer() { stop(); }

bool CuptiTracer::start() {
  if (running_) return true;
  if (!available()) return false;
  if (bool expected = false; !g_claimed.compare_exchange_strong(expected, true)) {
    why_unavailable_ = "another CUPTI tracer is running in this process";
    return false;
  }
  if (std::string e = cupti::enable(options_.buffers); !e.empty()) {
    why_unavailable_ = std::move(e);
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
  note(cupti::flush(true));
  drain();
  if (KernelFlush last = correlator_.finish(); !last.empty()) flushes_.push_back(std::move(last));
  running_ = false;
  g_claimed = false;
}

void CuptiTracer::on_op_begin(const OpEvent& e) {
  if (!running_) return;
  const std::uint64_t external = correlator_.begin_op(e);
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
    correlator_.end_op(open_.back().external);
    open_.pop_back();
    note(cupti::pop());
  }
}

void CuptiTracer::on_step_end(std::int64_t step) {
  if (!running_) return;
  close_open_ops();  // the step is over: an op left open by an exception ends with it
  flush(step);
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
  // flush, and the correlator waits for them (KernelCorrelatorOptions).
  note(cupti::flush(false));
  drain();
  if (KernelFlush f = correlator_.flush(step); !f.empty()) flushes_.push_back(std::move(f));
}

std::vector<KernelFlush> CuptiTracer::take_flushes() { return std::exchange(flushes_, {}); }

void CuptiTracer::close_open_ops() {
  while (observers_pushed_ > 0) pop_observers();
  while (!open_.empty()) {
    correlator_.end_op(open_.back().external);
    open_.pop_back();
    note(cupti::pop());
  }
}

void CuptiTracer::drain() {
  for (ActivityBatch& batch : cupti::take_completed()) {
    for (KernelRecord& k : batch.kernels) {
      auto it = names_.find(k.name);
      if (it == names_.end()) it = names_.emplace(k.name, demangle_kernel_name(k.name)).first;
      k.name = it->second;
    }
    correlator_.add(std::move(batch));
  }
  for (std::string& e : cupti::take_errors()) note(std::move(e));
}

void CuptiTracer::note(std::string error) {
  if (error.empty()) return;
  ++error_count_;
  if (errors_.size() < kErrorsKept) errors_.push_back(std::move(error));
}

}  // namespace ampcheck::inspector
