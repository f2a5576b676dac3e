#include "inspector/kernel_trace.h"

#include <cxxabi.h>  // abi::__cxa_demangle: CUPTI names C++ kernels by their mangled names

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ampcheck::inspector {
namespace {

// Orders are total over every field, so that records equal in time still come out in
// one order whatever order they arrived in.
auto key(const KernelRecord& r) {
  return std::tie(r.start_ns, r.end_ns, r.device, r.stream, r.correlation, r.name, r.grid.x,
                  r.grid.y, r.grid.z, r.block.x, r.block.y, r.block.z);
}
auto key(const MemcpyRecord& r) {
  return std::tie(r.start_ns, r.end_ns, r.device, r.stream, r.correlation, r.kind, r.bytes);
}
auto key(const MemsetRecord& r) {
  return std::tie(r.start_ns, r.end_ns, r.device, r.stream, r.correlation, r.kind, r.bytes, r.value);
}

template <class R>
void sort_by_start(std::vector<R>& records) {
  std::sort(records.begin(), records.end(), [](const R& a, const R& b) { return key(a) < key(b); });
}

template <class R>
void append_waiting(std::vector<R>& to, std::vector<R>& from) {
  to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}

}  // namespace

OpInstance OpInstance::of(const OpEvent& e) {
  return OpInstance{e.sequence, e.step, e.phase, e.op, e.module, e.inserted_cast};
}

std::string_view memcpy_kind_name(MemcpyKind k) {
  switch (k) {
    case MemcpyKind::unknown: return "unknown";
    case MemcpyKind::host_to_device: return "HtoD";
    case MemcpyKind::device_to_host: return "DtoH";
    case MemcpyKind::device_to_device: return "DtoD";
    case MemcpyKind::host_to_host: return "HtoH";
    case MemcpyKind::peer_to_peer: return "PtoP";
    case MemcpyKind::array: return "array";
  }
  return "?";
}

std::string_view memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::unknown: return "unknown";
    case MemoryKind::pageable: return "pageable";
    case MemoryKind::pinned: return "pinned";
    case MemoryKind::device: return "device";
    case MemoryKind::array: return "array";
    case MemoryKind::managed: return "managed";
  }
  return "?";
}

bool ActivityBatch::empty() const {
  return kernels.empty() && memcpys.empty() && memsets.empty() && correlations.empty() &&
         dropped == 0 && invalid == 0 && other == 0;
}

bool KernelFlush::empty() const {
  return ops.empty() && unattributed.empty() && observers.empty() && dropped == 0 && invalid == 0;
}

KernelCorrelator::KernelCorrelator(KernelCorrelatorOptions options) : options_(options) {}

std::uint64_t KernelCorrelator::begin_op(OpInstance instance) {
  const std::uint64_t id = next_external_;
  begin_op_with(id, std::move(instance));
  return id;
}

void KernelCorrelator::begin_op_with(std::uint64_t external, OpInstance instance) {
  instances_.emplace(external, Live{std::move(instance), flushes_});
  next_external_ = std::max(next_external_, external + 1);
  ++stats_.op_instances;
}

void KernelCorrelator::end_op(std::uint64_t external) {
  if (const auto it = instances_.find(external); it != instances_.end() && !it->second.ended) {
    it->second.ended = true;
    it->second.ended_at = flushes_;
  }
}

void KernelCorrelator::add(ActivityBatch batch) {
  stats_.kernels += batch.kernels.size();
  stats_.memcpys += batch.memcpys.size();
  stats_.memsets += batch.memsets.size();
  stats_.correlations += batch.correlations.size();
  stats_.dropped += batch.dropped;
  stats_.invalid += batch.invalid;
  dropped_ += batch.dropped;
  invalid_ += batch.invalid;
  append_waiting(new_correlations_, batch.correlations);
  for (KernelRecord& r : batch.kernels) kernels_.push_back({std::move(r), flushes_});
  for (MemcpyRecord& r : batch.memcpys) memcpys_.push_back({r, flushes_});
  for (MemsetRecord& r : batch.memsets) memsets_.push_back({r, flushes_});
}

std::size_t KernelCorrelator::waiting() const {
  return kernels_.size() + memcpys_.size() + memsets_.size();
}

KernelFlush KernelCorrelator::flush(std::int64_t step) { return join(step, false); }

KernelFlush KernelCorrelator::finish() { return join(last_step_, true); }

KernelFlush KernelCorrelator::join(std::int64_t step, bool final) {
  last_step_ = step;
  // Correlation records first: which op instance each API call ran under. Two records
  // for one call should not happen (CUPTI writes one per kind, for the innermost id);
  // when they do, the later-begun op (the larger id) wins whatever the arrival order.
  for (const CorrelationRecord& c : new_correlations_) {
    auto [it, inserted] = correlations_.try_emplace(c.correlation, Correlation{c.external, flushes_});
    if (!inserted && it->second.external != c.external) {
      ++stats_.conflicts;
      it->second.external = std::max(it->second.external, c.external);
    }
  }
  new_correlations_.clear();

  KernelFlush out;
  out.step = step;
  out.dropped = std::exchange(dropped_, 0);
  out.invalid = std::exchange(invalid_, 0);
  std::map<std::uint64_t, OpActivity> joined;  // by external id

  // Each waiting record: onto its op instance, unattributed, or left waiting.
  auto place = [&](auto& waiting, auto to_op, auto to_unattributed) {
    using Item = typename std::remove_reference_t<decltype(waiting)>::value_type;
    std::vector<Item> still;
    for (Item& w : waiting) {
      const auto c = correlations_.find(w.record.correlation);
      if (c != correlations_.end() && c->second.external == kObserversExternal) {
        (out.observers.*to_unattributed).push_back(std::move(w.record));
        ++stats_.observers;
      } else if (c != correlations_.end()) {
        const auto live = instances_.find(c->second.external);
        if (live != instances_.end()) {
          auto [slot, fresh] = joined.try_emplace(live->first);
          if (fresh) slot->second.op = live->second.op;
          (slot->second.*to_op).push_back(std::move(w.record));
          ++stats_.attributed;
        } else {
          (out.unattributed.*to_unattributed).push_back(std::move(w.record));
          ++stats_.unknown_op;
        }
      } else if (final || flushes_ - w.arrived >= std::uint64_t{options_.grace_flushes}) {
        (out.unattributed.*to_unattributed).push_back(std::move(w.record));
        ++stats_.no_correlation;
      } else {
        still.push_back(std::move(w));
      }
    }
    waiting = std::move(still);
  };
  place(kernels_, &OpActivity::kernels, &Unattributed::kernels);
  place(memcpys_, &OpActivity::memcpys, &Unattributed::memcpys);
  place(memsets_, &OpActivity::memsets, &Unattributed::memsets);

  // Output by op sequence; external ids follow begin order, so they break ties.
  out.ops.reserve(joined.size());
  for (auto& [id, activity] : joined) out.ops.push_back(std::move(activity));
  std::stable_sort(out.ops.begin(), out.ops.end(),
                   [](const OpActivity& a, const OpActivity& b) { return a.op.sequence < b.op.sequence; });
  for (OpActivity& a : out.ops) {
    sort_by_start(a.kernels);
    sort_by_start(a.memcpys);
    sort_by_start(a.memsets);
  }
  for (Unattributed* u : {&out.unattributed, &out.observers}) {
    sort_by_start(u->kernels);
    sort_by_start(u->memcpys);
    sort_by_start(u->memsets);
  }

  // This flush is done. Let go of the op instances (and correlation records) whose own
  // step's flush is late_flushes behind: records for them stop being waited for.
  ++flushes_;
  const auto expired = [&](std::uint64_t born) {
    return final || flushes_ >= born + 1 + std::uint64_t{options_.late_flushes};
  };
  // An instance that has not ended yet (or whose end was never told: the correlator used
  // without end_op) counts from its begin; one that ended, from its end.
  std::erase_if(instances_, [&](const auto& entry) {
    const Live& l = entry.second;
    return expired(l.ended ? std::max(l.ended_at, l.born) : l.born) && (l.ended || !options_.ends_told || final);
  });
  std::erase_if(correlations_, [&](const auto& entry) { return expired(entry.second.born); });
  return out;
}

std::string demangle_kernel_name(std::string_view name) {
  if (!name.starts_with("_Z")) return std::string(name);
  const std::string mangled(name);
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> text(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && text ? std::string(text.get()) : mangled;
}

}  // namespace ampcheck::inspector
