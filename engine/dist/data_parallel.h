// Data parallelism over a Communicator: each rank trains on its shard of every batch, the
// loss scaler's found_inf is reduced over the ranks (MAX) before the skip decision, and the
// gradients are averaged over the ranks before the update, so the parameters stay
// identical on every rank. The order, per step, is that of the frameworks' sharded
// scalers: backward on the shard; unscale and check this rank's gradients; reduce the
// finding; average the gradients; step or skip, on every rank alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/amp/grad_scaler.h"
#include "engine/dist/communicator.h"
#include "engine/hooks.h"
#include "engine/optim/optimizer.h"

namespace ampcheck::dist {

struct DataParallelOptions {
  // A debug switch that breaks what keeps replicas equal: each rank acts on its own
  // found_inf (the consensus check must catch the divergence that follows).
  bool reduce_found_inf = true;
  // Where the gradients are averaged: "float32" (the default), after the scaler unscaled
  // them into f32; or "grad", before, in the parameters' gradient dtype (float16 or
  // bfloat16 at O2), as DDP reduces a half model's gradients: the sum of the ranks' scaled
  // gradients is rounded to that dtype, and can overflow where no rank's own did, which
  // the scaler's check after the reduction then catches on every rank alike.
  std::string reduce_dtype = "float32";
  std::size_t bucket_bytes = std::size_t{25} << 20;  // per all-reduce, as DDP's bucket_cap_mb
};

// Averages the optimizer's gradients (the scaler's unscaled f32 ones, or f64) over the
// ranks: packed into buckets of up to bucket_bytes per dtype, all-reduced (sum), divided
// by the world size. The identity on one rank.
void average_gradients(optim::Optimizer& optimizer, Communicator& comm, std::size_t bucket_bytes);

// The same before the scaler unscales: each 16-bit gradient averaged and rounded back into
// its own dtype (f32 and f64 ones as average_gradients).
void average_gradients_in_dtype(optim::Optimizer& optimizer, Communicator& comm, std::size_t bucket_bytes);

// The first parameter, in the optimizer's order, whose gradient holds Inf or NaN ("" when none).
std::string first_nonfinite_gradient(const optim::Optimizer& optimizer);

// FNV-1a (64 bits) over every parameter's bytes, in the optimizer's order: equal on ranks
// whose replicas are equal.
std::uint64_t parameter_checksum(const optim::Optimizer& optimizer);

// One data-parallel update after backward(): unscale and check locally, reduce found_inf
// (unless options say not to), average the gradients, step or skip, update the scale. Emits
// the DataParallelStep hook with this rank's view, and returns it.
DataParallelStep data_parallel_update(amp::GradScaler& scaler, optim::Optimizer& optimizer, Communicator& comm,
                          const DataParallelOptions& options, std::int64_t step, double local_loss,
                          std::int64_t shard_rows);

}  // namespace ampcheck::dist
