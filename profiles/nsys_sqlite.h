// An Nsight Systems report exported as SQLite (`nsys export --type sqlite report.nsys-rep`):
//   CUPTI_ACTIVITY_KIND_KERNEL   each kernel: start, end, deviceId, streamId, correlationId,
//                                demangledName (a StringIds id), grid and block
//   CUPTI_ACTIVITY_KIND_RUNTIME  each runtime (and driver) API call: its thread (globalTid),
//                                time and correlationId: the launch of the kernel with that id
//   CUPTI_ACTIVITY_KIND_MEMCPY / _MEMSET   copies and memsets, joined the same way
//   NVTX_EVENTS                  push/pop and start/end ranges on each thread: the op names
//                                of torch.autograd.profiler.emit_nvtx ("aten::addmm, seq = 12,
//                                op_id = 40, sizes = [[64, 128], [128, 256]]", with record_shapes)
//                                and the user's own ranges
//   StringIds                    the strings the others name by id
// Tables are looked up by name and columns by name: exports of other versions add or drop
// columns. A SQLite database without the kernel table is not an Nsight Systems export of
// a GPU run, and is refused saying which tables it has.
#pragma once

#include <cstdint>
#include <string>

#include "profiles/profile.h"

namespace ampcheck::profiles {

// Throws ProfileError naming the file.
Profile read_nsys_sqlite(const std::string& path, std::uint64_t max_bytes);

// emit_nvtx's range text split: the op's name, its autograd sequence number (-1 when not
// written) and its input shapes ("sizes = [[...]]", empty when not recorded).
struct NvtxOp {
  std::string name;
  std::int64_t sequence = -1;
  std::vector<std::vector<std::int64_t>> sizes;
  bool framework_op = false;  // "aten::...", an autograd node: an op, not the user's own range
};
NvtxOp parse_nvtx_range(std::string_view text);

}  // namespace ampcheck::profiles
