// What CUPTI tells about the GPU work of a run, as plain host values, and the join that
// puts each kernel, copy and memset on the op instance that launched it. Pure host code,
// in every build: on a GPU the CUPTI tracer's worker thread (inspector/cupti_worker.h)
// turns CUPTI's activity records into these structs, and the tests build them by hand.
//
// The join is Kineto's (libkineto CuptiActivityApi / CuptiActivityProfiler): at op begin
// the tracer pushes an external correlation id (CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0)
// and pops it at op end; every CUDA API call made meanwhile gets an external-correlation
// record (external id -> CUPTI correlation id), and the kernel, memcpy or memset it
// launched carries that correlation id. CUPTI hands records back in buffers that complete
// in any order and late (a kernel can arrive before its correlation record, a step's
// records after the step ended), so nothing is joined on arrival: the correlator joins at
// each flush, whatever has come by then, and keeps what it cannot join yet for a while.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/hooks.h"

namespace ampcheck::inspector {

// One op call, as the engine's op begin event names it.
struct OpInstance {
  std::uint64_t sequence = 0;  // OpEvent::sequence: the key OpTrace's records carry too
  std::int64_t step = 0;
  Phase phase = Phase::forward;
  Op op = Op::cast;
  std::string module;          // "encoder.layers.2.attn"; "" outside any module
  bool inserted_cast = false;  // a cast the AMP policy inserted
  static OpInstance of(const OpEvent& e);
  bool operator==(const OpInstance&) const = default;
};

struct Dim3 {
  std::uint32_t x = 1, y = 1, z = 1;
  bool operator==(const Dim3&) const = default;
};

// CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL. Timestamps are CUPTI's nanoseconds; a kernel
// CUPTI could not time (no device memory for the timestamps) has start == end == 0.
struct KernelRecord {
  std::string name;  // the tracer demangles CUPTI's names of C++ kernels (demangle_kernel_name)
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint32_t device = 0, stream = 0;
  Dim3 grid, block;
  std::uint32_t correlation = 0;  // CUPTI's id of the API call that launched it
  std::uint64_t duration_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
  bool operator==(const KernelRecord&) const = default;
};

// CUpti_ActivityMemcpyKind, by direction.
enum class MemcpyKind : std::uint8_t {
  unknown,
  host_to_device,
  device_to_host,
  device_to_device,
  host_to_host,
  peer_to_peer,
  array,  // any copy to or from a CUDA array
};
std::string_view memcpy_kind_name(MemcpyKind k);  // "HtoD", "DtoH", "DtoD", ...

// CUpti_ActivityMemoryKind: where a memset wrote.
enum class MemoryKind : std::uint8_t { unknown, pageable, pinned, device, array, managed };
std::string_view memory_kind_name(MemoryKind k);

// CUPTI_ACTIVITY_KIND_MEMCPY.
struct MemcpyRecord {
  MemcpyKind kind = MemcpyKind::unknown;
  std::uint64_t bytes = 0;
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint32_t device = 0, stream = 0;
  std::uint32_t correlation = 0;
  bool operator==(const MemcpyRecord&) const = default;
};

// CUPTI_ACTIVITY_KIND_MEMSET.
struct MemsetRecord {
  MemoryKind kind = MemoryKind::unknown;
  std::uint64_t bytes = 0;
  std::uint32_t value = 0;
  std::uint64_t start_ns = 0, end_ns = 0;
  std::uint32_t device = 0, stream = 0;
  std::uint32_t correlation = 0;
  bool operator==(const MemsetRecord&) const = default;
};

// CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: the API call `correlation` ran while
// `external` was the innermost id pushed.
struct CorrelationRecord {
  std::uint64_t external = 0;
  std::uint32_t correlation = 0;
  bool operator==(const CorrelationRecord&) const = default;
};

// What one completed CUPTI buffer held, in its order.
struct ActivityBatch {
  std::vector<KernelRecord> kernels;
  std::vector<MemcpyRecord> memcpys;
  std::vector<MemsetRecord> memsets;
  std::vector<CorrelationRecord> correlations;
  std::uint64_t dropped = 0;  // records CUPTI had no buffer space for (cuptiActivityGetNumDroppedRecords)
  std::uint64_t invalid = 0;  // records it handed back unreadable (cuptiActivityGetNextRecord: invalid kind)
  std::uint64_t other = 0;    // records of kinds not modelled here (the API records)
  bool empty() const;
};

// The GPU work of one op instance.
struct OpActivity {
  OpInstance op;
  std::vector<KernelRecord> kernels;  // by start time
  std::vector<MemcpyRecord> memcpys;  // by start time
  std::vector<MemsetRecord> memsets;  // by start time
  bool operator==(const OpActivity&) const = default;
};

// GPU work no op instance can be found for: launched outside any op (the allocator, the
// step's own bookkeeping), or whose correlation record was dropped, or that arrived
// after its op instance was let go (KernelCorrelatorOptions::late_flushes).
struct Unattributed {
  std::vector<KernelRecord> kernels;
  std::vector<MemcpyRecord> memcpys;
  std::vector<MemsetRecord> memsets;
  bool empty() const { return kernels.empty() && memcpys.empty() && memsets.empty(); }
  bool operator==(const Unattributed&) const = default;
};

// What one flush joined: only what is new since the previous flush. An op instance whose
// records came in over several flushes appears in each, with the records new there.
struct KernelFlush {
  std::int64_t step = 0;          // the step whose end flushed (finish(): the last)
  std::vector<OpActivity> ops;    // by op sequence
  Unattributed unattributed;      // by start time
  Unattributed observers;         // launched by the observers themselves (kObserversExternal), by start time
  std::uint64_t dropped = 0;      // records CUPTI dropped, reported since the last flush
  std::uint64_t invalid = 0;      // unreadable records since the last flush
  bool empty() const;
  bool operator==(const KernelFlush&) const = default;
};

// Totals over the run, for a report's "N kernels, M unattributed, K dropped" line.
struct KernelTraceStats {
  std::uint64_t op_instances = 0;   // begin_op calls
  std::uint64_t kernels = 0, memcpys = 0, memsets = 0, correlations = 0;  // records taken
  std::uint64_t attributed = 0;     // kernels, memcpys and memsets joined to an op instance
  std::uint64_t observers = 0;      // launched while kObserversExternal was pushed: the inspector's own work
  std::uint64_t no_correlation = 0; // unattributed: no correlation record came in time
  std::uint64_t unknown_op = 0;     // unattributed: its external id names no live op instance
  std::uint64_t conflicts = 0;      // correlation ids named by two external ids (the later-begun op kept)
  std::uint64_t dropped = 0;        // records CUPTI dropped
  std::uint64_t invalid = 0;        // records CUPTI handed back unreadable
  std::uint64_t unattributed() const { return no_correlation + unknown_op; }
  bool operator==(const KernelTraceStats&) const = default;
};

struct KernelCorrelatorOptions {
  // A record whose correlation record has not come is kept this many flushes after the
  // one it arrived before, then reported unattributed (no_correlation).
  std::uint32_t grace_flushes = 1;
  // An op instance (and its correlation records) is kept this many flushes after the
  // first flush after its end for records that arrive late, then let go: a record for
  // it after that is unattributed (unknown_op).
  std::uint32_t late_flushes = 2;
  // The caller tells each op's end (end_op), as the CUPTI tracer does: an op instance not
  // ended yet is never let go (flushes made inside an op, around its inserted casts, in
  // GLOG's per-op mode). Without, the late window counts from its begin.
  bool ends_told = false;
};

// The external id pushed while the engine's observers (the inspector's statistics, its
// copies of tensors to the host) do their own GPU work inside an op's begin or end: their
// kernels and copies are theirs, not the op's. begin_op never hands it out.
inline constexpr std::uint64_t kObserversExternal = ~std::uint64_t{0};

// The join. Not thread-safe: one thread begins ops, adds batches and flushes (the CUPTI
// tracer's worker thread, inspector/cupti_worker.h, which hears of op begins and ends
// from the training thread). The output is the same whatever order the records of a
// flush arrived in.
class KernelCorrelator {
 public:
  explicit KernelCorrelator(KernelCorrelatorOptions options = {});

  // Op begin: remembers the instance and returns the external id to push for it (from
  // 1 up; 0 is never handed out).
  std::uint64_t begin_op(OpInstance instance);
  std::uint64_t begin_op(const OpEvent& e) { return begin_op(OpInstance::of(e)); }
  // As begin_op, with an id the caller handed out (the CUPTI tracer's worker: the
  // training thread hands ids out and the worker tells them here later). Ids must rise
  // from one call to the next; begin_op then continues above the last.
  void begin_op_with(std::uint64_t external, OpInstance instance);
  // Op end: the late window of the instance counts from here (an op that flushes are
  // made inside, as a per-op flush does around its inserted casts, stays live until it
  // ends); an instance that never ends is let go at finish().
  void end_op(std::uint64_t external);

  // A batch of records, in any order relative to the others.
  void add(ActivityBatch batch);

  // Step end: joins everything added so far and returns what is new, in a deterministic
  // order; ages what is still waiting and lets go of what has waited long enough.
  KernelFlush flush(std::int64_t step);
  // End of the run: as flush, and nothing waits any more (every record not joined now is
  // unattributed, every op instance let go).
  KernelFlush finish();

  const KernelTraceStats& stats() const { return stats_; }
  std::size_t waiting() const;                 // records not joined yet
  std::size_t live_instances() const { return instances_.size(); }

 private:
  struct Live {
    OpInstance op;
    std::uint64_t born = 0;   // flushes done before it began
    bool ended = false;
    std::uint64_t ended_at = 0;  // flushes done before it ended
  };
  struct Correlation {
    std::uint64_t external = 0;
    std::uint64_t born = 0;  // flushes done before it arrived
  };
  template <class R>
  struct Waiting {
    R record;
    std::uint64_t arrived = 0;  // flushes done before it arrived
  };
  KernelFlush join(std::int64_t step, bool final);

  KernelCorrelatorOptions options_;
  std::uint64_t flushes_ = 0;
  std::int64_t last_step_ = 0;
  std::uint64_t next_external_ = 1;
  std::map<std::uint64_t, Live> instances_;                       // by external id
  std::unordered_map<std::uint32_t, Correlation> correlations_;   // by correlation id
  std::vector<CorrelationRecord> new_correlations_;
  std::vector<Waiting<KernelRecord>> kernels_;
  std::vector<Waiting<MemcpyRecord>> memcpys_;
  std::vector<Waiting<MemsetRecord>> memsets_;
  std::uint64_t dropped_ = 0, invalid_ = 0;  // since the last flush
  KernelTraceStats stats_;
};

// "_Z5scaleIfEvPT_i" -> "void scale<float>(float*, int)";
// a name that is not a mangled C++ name (cuBLAS's "sm90_xmma_gemm_...") comes back as is.
std::string demangle_kernel_name(std::string_view name);

}  // namespace ampcheck::inspector
