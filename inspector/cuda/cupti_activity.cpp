// CUPTI's Activity API (CUDA builds): the buffer callbacks, the record translation and
// the calls the tracer makes, each result checked and named.
#include <cupti.h>  // cuptiActivity*, CUpti_Activity* record structs, cuptiGetResultString

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "inspector/cupti_activity.h"

namespace ampcheck::inspector::cupti {
namespace {

std::atomic<std::uint64_t> g_calls{0};

// Every CUPTI call goes through here: counted, and its result turned into "" or words.
std::string check(CUptiResult result, std::string_view call) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  if (result == CUPTI_SUCCESS) return {};
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr) text = "unknown CUPTI result";
  return std::string(call) + " failed: " + text + " (CUptiResult " +
         std::to_string(static_cast<int>(result)) + ")";
}

// What the callbacks share with the tracer: the sink, set and let go under the mutex, so
// that a callback on CUPTI's thread never uses a sink being destroyed.
struct State {
  std::mutex mutex;
  BufferSink* sink = nullptr;
  bool registered = false;
};
// Never destroyed: CUPTI may hand back a buffer while the process exits.
State& state() {
  static State* s = new State;
  return *s;
}

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *max_records = 0;  // as many as fit
  *buffer = nullptr;
  *size = 0;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sink == nullptr) return;  // CUPTI drops records and counts them
  std::size_t bytes = 0;
  *buffer = s.sink->lend(bytes);
  if (*buffer != nullptr) *size = bytes;
}

// Only hands the buffer over: its records are walked on the tracer's worker thread.
void CUPTIAPI buffer_completed(CUcontext context, std::uint32_t stream, std::uint8_t* buffer,
                               std::size_t /*size*/, std::size_t valid) {
  CompletedBuffer done;
  done.data = buffer;
  done.valid = buffer != nullptr ? valid : 0;
  std::size_t dropped = 0;
  done.error = check(cuptiActivityGetNumDroppedRecords(context, stream, &dropped), "cuptiActivityGetNumDroppedRecords");
  done.dropped = dropped;

  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sink != nullptr) {
    s.sink->completed(std::move(done));
  } else {
    std::free(buffer);  // lent before the sink was let go (BufferSink::lend)
  }
}

struct Kind {
  CUpti_ActivityKind kind;
  const char* call;
};
// External correlation records are written for API records, so the runtime and driver
// API kinds must be on for them to appear (NVIDIA/Fuser PR 1135 found the same); the
// API records themselves are skipped (batch.other).
constexpr Kind kKinds[] = {
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "cuptiActivityEnable(CONCURRENT_KERNEL)"},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "cuptiActivityEnable(MEMCPY)"},
    {CUPTI_ACTIVITY_KIND_MEMSET, "cuptiActivityEnable(MEMSET)"},
    {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, "cuptiActivityEnable(EXTERNAL_CORRELATION)"},
    {CUPTI_ACTIVITY_KIND_RUNTIME, "cuptiActivityEnable(RUNTIME)"},
    {CUPTI_ACTIVITY_KIND_DRIVER, "cuptiActivityEnable(DRIVER)"},
};

MemcpyKind memcpy_kind(std::uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return MemcpyKind::host_to_device;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return MemcpyKind::device_to_host;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return MemcpyKind::device_to_device;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return MemcpyKind::host_to_host;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return MemcpyKind::peer_to_peer;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return MemcpyKind::array;
    default: return MemcpyKind::unknown;
  }
}

MemoryKind memory_kind(std::uint16_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return MemoryKind::pageable;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return MemoryKind::pinned;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC: return MemoryKind::device;
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY: return MemoryKind::array;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC: return MemoryKind::managed;
    default: return MemoryKind::unknown;
  }
}

std::uint32_t dim(std::int32_t v) { return v > 0 ? static_cast<std::uint32_t>(v) : 0u; }

}  // namespace

std::string_view missing() { return {}; }

void translate(const void* raw, ActivityBatch& batch) {
  const auto* record = static_cast<const CUpti_Activity*>(raw);
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      // The record is the newest version the library writes; the header's is a prefix.
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      KernelRecord r;
      r.name = k->name != nullptr ? k->name : "";
      r.start_ns = k->start;
      r.end_ns = k->end;
      r.device = k->deviceId;
      r.stream = k->streamId;
      r.grid = {dim(k->gridX), dim(k->gridY), dim(k->gridZ)};
      r.block = {dim(k->blockX), dim(k->blockY), dim(k->blockZ)};
      r.correlation = k->correlationId;
      batch.kernels.push_back(std::move(r));
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      batch.memcpys.push_back({memcpy_kind(m->copyKind), m->bytes, m->start, m->end, m->deviceId,
                               m->streamId, m->correlationId});
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      batch.memsets.push_back({memory_kind(m->memoryKind), m->bytes, m->value, m->start, m->end,
                               m->deviceId, m->streamId, m->correlationId});
      return;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto* c = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
      if (c->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) {
        batch.correlations.push_back({c->externalId, c->correlationId});
        return;
      }
      break;  // another tool's ids
    }
    default: break;
  }
  ++batch.other;
}

std::string enable(BufferSink& sink) {
  State& s = state();
  bool register_now = false;
  {
    std::lock_guard lock(s.mutex);
    s.sink = &sink;
    register_now = !s.registered;
  }
  if (register_now) {
    if (std::string e = check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
                              "cuptiActivityRegisterCallbacks");
        !e.empty()) {
      release_sink();
      return e;
    }
    std::lock_guard lock(s.mutex);
    s.registered = true;
  }
  for (std::size_t i = 0; i < std::size(kKinds); ++i) {
    if (std::string e = check(cuptiActivityEnable(kKinds[i].kind), kKinds[i].call); !e.empty()) {
      for (std::size_t j = 0; j < i; ++j)
        (void)check(cuptiActivityDisable(kKinds[j].kind), "cuptiActivityDisable");
      release_sink();
      return e;
    }
  }
  return {};
}

std::string disable() {
  std::string first;
  for (const Kind& k : kKinds) {
    std::string e = check(cuptiActivityDisable(k.kind), "cuptiActivityDisable");
    if (first.empty()) first = std::move(e);
  }
  return first;
}

void release_sink() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.sink = nullptr;
}

std::string push(std::uint64_t external) {
  return check(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, external),
               "cuptiActivityPushExternalCorrelationId(CUSTOM0)");
}

std::string pop() {
  std::uint64_t last = 0;
  return check(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
               "cuptiActivityPopExternalCorrelationId(CUSTOM0)");
}

std::string flush(bool forced) {
  // Not under the mutex: CUPTI calls buffer_completed on this thread, inside the call.
  return check(cuptiActivityFlushAll(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0),
               forced ? "cuptiActivityFlushAll(FLUSH_FORCED)" : "cuptiActivityFlushAll");
}

ActivityBatch parse(std::uint8_t* buffer, std::size_t valid, std::vector<std::string>& errors) {
  ActivityBatch batch;
  if (buffer == nullptr || valid == 0) return batch;
  CUpti_Activity* record = nullptr;
  for (;;) {
    const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid, &record);
    g_calls.fetch_add(1, std::memory_order_relaxed);
    if (r == CUPTI_SUCCESS) {
      translate(record, batch);
    } else if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) {
      break;  // the end of the buffer
    } else if (r == CUPTI_ERROR_INVALID_KIND) {
      ++batch.invalid;  // an incomplete or unreadable record: the rest cannot be walked
      break;
    } else {
      ++batch.invalid;
      errors.push_back(check(r, "cuptiActivityGetNextRecord"));
      break;
    }
  }
  return batch;
}

std::uint64_t timestamp() {
  std::uint64_t t = 0;
  if (!check(cuptiGetTimestamp(&t), "cuptiGetTimestamp").empty()) return 0;
  return t;
}

std::uint64_t calls() { return g_calls.load(std::memory_order_relaxed); }

}  // namespace ampcheck::inspector::cupti
