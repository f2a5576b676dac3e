#include "engine/dist/nccl_reduce.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

namespace ampcheck::dist {
namespace {

struct NcclState {
  bool tried = false;
  bool usable = false;
  ncclComm_t comm = nullptr;
  std::string why_not;
};

NcclState& state() {
  static NcclState s;
  return s;
}

void init(NcclState& s, Communicator& comm) {
  s.tried = true;
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  ncclResult_t rc = ncclSuccess;
  if (comm.rank() == 0) rc = ncclGetUniqueId(&id);
  const std::string sent = comm.broadcast(
      comm.rank() == 0 && rc == ncclSuccess ? std::string(reinterpret_cast<const char*>(&id), sizeof id) : std::string(), 0);
  if (sent.size() == sizeof id) {
    std::memcpy(&id, sent.data(), sizeof id);
    rc = ncclCommInitRank(&s.comm, comm.size(), id, comm.rank());
  } else {
    rc = ncclSystemError;
  }
  // All or none: a rank whose init failed sends every rank to the host path.
  const bool failed_somewhere = comm.all_reduce_or(rc != ncclSuccess);
  s.usable = !failed_somewhere;
  if (!s.usable) {
    if (rc == ncclSuccess && s.comm != nullptr) ncclCommDestroy(s.comm);
    s.comm = nullptr;
    s.why_not = rc != ncclSuccess ? std::string("NCCL: ") + ncclGetErrorString(rc) : "NCCL failed on another rank";
  }
}

}  // namespace

bool nccl_average(std::vector<Tensor>& grads, Communicator& comm, std::string& why_not) {
  NcclState& s = state();
  if (!s.tried) init(s, comm);
  if (!s.usable) {
    why_not = s.why_not;
    return false;
  }
  ncclResult_t rc = ncclGroupStart();
  for (Tensor& g : grads) {
    if (rc != ncclSuccess) break;
    rc = ncclAllReduce(g.raw(), g.raw(), static_cast<std::size_t>(g.numel()),
                       g.dtype() == DType::f64 ? ncclFloat64 : ncclFloat32, ncclAvg, s.comm, nullptr);
  }
  const ncclResult_t end = ncclGroupEnd();
  if (rc == ncclSuccess) rc = end;
  if (rc != ncclSuccess) throw std::runtime_error(std::string("NCCL all-reduce failed: ") + ncclGetErrorString(rc));
  const cudaError_t sync = cudaStreamSynchronize(nullptr);
  if (sync != cudaSuccess) throw std::runtime_error(std::string("NCCL all-reduce: ") + cudaGetErrorString(sync));
  return true;
}

}  // namespace ampcheck::dist
