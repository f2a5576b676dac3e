// The CSV reports of NVIDIA's Nsight tools, told apart by their header row:
//   `nsys stats --report cuda_gpu_kern_sum --format csv` (gpukernsum before 2022): one row
//       per kernel name with its total time and launch count. It says nothing of which op
//       launched what: the Profile has no links, and says so;
//   `ncu --csv` in its details form (one row per kernel and metric: "ID", "Kernel Name",
//       "Section Name", "Metric Name", "Metric Unit", "Metric Value") or its raw page form
//       (`--page raw`: one row per kernel, one column per metric, units in the second row):
//       each kernel with its tensor-pipe counters (sm__ops_path_tensor_*,
//       sm__inst_executed_pipe_tensor_*, sm__pipe_tensor_*), the ground truth of whether it
//       used tensor cores, and its measured duration.
// Rows before the header (nsys prints "Processing ..." lines, ncu "==PROF==" lines when
// its output is captured whole) are skipped.
#pragma once

#include "profiles/byte_source.h"
#include "profiles/profile.h"

namespace ampcheck::profiles {

// Throws ProfileError when the CSV is neither.
Profile read_nsight_csv(ByteSource& source);

}  // namespace ampcheck::profiles
