// CUPTI's Activity API as the tracer (inspector/cupti_tracer.h) uses it: enable the
// activity kinds, push and pop external correlation ids, flush, and take the buffers
// CUPTI completed, already turned into host records (inspector/kernel_trace.h).
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

// Registers the buffer callbacks (once per process) and enables concurrent kernels,
// memcpy, memset and external correlation (with the runtime and driver API records that
// external correlation records are written for). On failure, what was enabled is
// disabled again.
std::string enable(const BufferSettings& settings);
std::string disable();
// The external id the API calls of this thread are correlated with from now on
// (CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0), and back to the one before.
std::string push(std::uint64_t external);
std::string pop();
// Hands back every buffer whose records are complete (forced: every buffer).
std::string flush(bool forced);

// The batches CUPTI completed since the last call, in completion order, and the errors
// its callbacks met meanwhile (they cannot throw into CUPTI).
std::vector<ActivityBatch> take_completed();
std::vector<std::string> take_errors();

// CUPTI's timestamp now (cuptiGetTimestamp, the clock of the records); 0 without CUPTI.
std::uint64_t timestamp();

// CUPTI calls made by this process through this file, for the tests' "costs nothing".
std::uint64_t calls();

// One activity record (a CUpti_Activity* from cuptiActivityGetNextRecord) into `batch`:
// kernels, memcpys, memsets and CUSTOM0 external correlations are kept, anything else
// is counted in batch.other. Calls nothing; a build without CUPTI counts it as other.
void translate(const void* record, ActivityBatch& batch);

}  // namespace ampcheck::inspector::cupti
