// CUPTI's Activity API as the tracer (inspector/cupti_tracer.h) uses it: enable the
// activity kinds, push and pop external correlation ids, flush, hand the buffers CUPTI
// completes to a sink (the tracer's worker, inspector/cupti_worker.h) and turn a
// buffer's records into host records (inspector/kernel_trace.h).
// inspector/cuda/cupti_activity.cpp is the CUPTI build; inspector/no_gpu/cupti_activity.cpp,
// what a build without CUDA links, answers that it has no CUPTI and calls nothing.
//
// CUPTI's activity state is per process, so this is too. Each function that calls CUPTI
// returns "" on success and otherwise the failed call with CUPTI's words
// ("cuptiActivityEnable(CONCURRENT_KERNEL) failed: CUPTI_ERROR_...").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "inspector/kernel_trace.h"

namespace ampcheck::inspector::cupti {

// "" in a build with CUPTI; otherwise why there is none.
std::string_view missing();

struct BufferSettings {
  std::size_t bytes = 4u << 20;  // each buffer handed to CUPTI (CUPTI suggests 1 to 10 MB)
  std::size_t max_buffers = 64;  // at once; past that CUPTI drops records, and says how many
};

// A buffer CUPTI is done with.
struct CompletedBuffer {
  std::uint8_t* data = nullptr;  // as BufferSink::lend gave it
  std::size_t valid = 0;         // bytes of records from the start
  std::uint64_t dropped = 0;     // records CUPTI dropped for lack of buffers meanwhile
  std::string error;             // the callback's failed CUPTI call, if one failed
};

// Where CUPTI's buffer callbacks get their buffers and put them back. They run on CUPTI's
// own thread or inside a cuptiActivityFlushAll, under this file's lock: a sink only
// hands buffers out and queues the ones that come back, and calls no CUPTI function.
class BufferSink {
 public:
  // A buffer for CUPTI to fill and its size in `bytes`: 8-byte aligned, from
  // std::aligned_alloc (a buffer that comes back when no sink is set is std::free'd).
  // nullptr when there is none to give (CUPTI then drops records and counts them).
  virtual std::uint8_t* lend(std::size_t& bytes) = 0;
  virtual void completed(CompletedBuffer buffer) = 0;

 protected:
  ~BufferSink() = default;
};

// Registers the buffer callbacks (once per process), makes `sink` the one they use, and
// enables concurrent kernels, memcpy, memset and external correlation (with the runtime
// and driver API records that external correlation records are written for). On
// failure, what was enabled is disabled again and the sink is let go.
std::string enable(BufferSink& sink);
std::string disable();
// Lets go of the sink (after the last forced flush, before the sink is destroyed): a
// buffer CUPTI hands back after this is freed, one it asks for is refused.
void release_sink();
// The external id the API calls of this thread are correlated with from now on
// (CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0), and back to the one before.
std::string push(std::uint64_t external);
std::string pop();
// Hands back every buffer whose records are complete (forced: every buffer), through
// the sink, on the calling thread. CUPTI allows it from any thread.
std::string flush(bool forced);

// The records of a completed buffer (its first `valid` bytes), walked with
// cuptiActivityGetNextRecord and translated; the failed calls of the walk go to `errors`.
// Without CUPTI: an empty batch.
ActivityBatch parse(std::uint8_t* buffer, std::size_t valid, std::vector<std::string>& errors);

// CUPTI's timestamp now (cuptiGetTimestamp, the clock of the records); 0 without CUPTI.
std::uint64_t timestamp();

// CUPTI calls made by this process through this file, for the tests' "costs nothing".
std::uint64_t calls();

// One activity record (a CUpti_Activity* from cuptiActivityGetNextRecord) into `batch`:
// kernels, memcpys, memsets and CUSTOM0 external correlations are kept, anything else
// is counted in batch.other. Calls nothing; a build without CUPTI counts it as other.
void translate(const void* record, ActivityBatch& batch);

}  // namespace ampcheck::inspector::cupti
