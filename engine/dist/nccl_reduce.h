// The gradient average on GPUs through NCCL (the CUDA toolkit's libnccl), in a CUDA build
// that finds it. The NCCL communicator is made on first use from an id rank 0 sends over
// the job's Communicator; every rank learns whether every rank succeeded, so all take the
// same path. When NCCL cannot serve the job (the ranks of one machine share the engine's
// GPU 0, which NCCL refuses; a failed init), the caller averages through host memory.
#pragma once

#include <string>
#include <vector>

#include "engine/dist/communicator.h"
#include "engine/tensor.h"

namespace ampcheck::dist {

// Averages the CUDA tensors `grads` (f32 or f64) over the ranks in place (ncclAvg, one
// grouped call on the engine's stream). False, with the reason, when NCCL is not usable.
bool nccl_average(std::vector<Tensor>& grads, Communicator& comm, std::string& why_not);

}  // namespace ampcheck::dist
