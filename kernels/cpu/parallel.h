// Threads for the CPU kernels. Work is split into fixed chunks whose results do not
// depend on which thread runs them, so every thread count gives bit-identical results.
#pragma once

#include <cstdint>
#include <functional>

namespace ampcheck::kernels::cpu {

// Threads the CPU kernels use (default: the machine's cores, or AMPCHECK_NUM_THREADS).
void set_num_threads(int n);
int num_threads();

// Calls body(begin, end) over [0, n) in chunks of at least `grain` items, in parallel.
// Chunk boundaries depend on n and grain only, never on the thread count.
void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

}  // namespace ampcheck::kernels::cpu
