// DeviceMemory on a CUDA GPU (kernels/cuda/device_memory.h): the only place the caching
// allocator's requests meet the CUDA runtime. Host code only: compiled by the C++
// compiler in a CUDA build; kernels/no_gpu/device_memory.cpp has the build without CUDA.
#include <cuda_runtime.h>  // cudaMalloc, cudaFree, cudaEvent*, cudaMemGetInfo, cudaSetDevice

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/device_memory.h"

namespace ampcheck::kernels::cuda {
namespace {

std::string describe(cudaError_t status) {
  return std::string(cudaGetErrorString(status)) + " (" + cudaGetErrorName(status) + ")";
}

// Every status is checked; the message names the call and the device.
void check(cudaError_t status, const std::string& call, int device) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // leave no error behind for the next caller
  throw std::runtime_error(call + " on cuda:" + std::to_string(device) + " failed: " + describe(status));
}

// Makes `device` current for the scope and restores the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice", device);
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice", device);
  }
  ~DeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

cudaStream_t to_cuda(Stream s) { return reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(s)); }
cudaEvent_t to_cuda(Event e) { return reinterpret_cast<cudaEvent_t>(static_cast<std::uintptr_t>(e)); }
Event from_cuda(cudaEvent_t e) { return Event{reinterpret_cast<std::uintptr_t>(e)}; }

class CudaDeviceMemory final : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(int device) : device_(device) {}
  ~CudaDeviceMemory() override {
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);  // at exit the runtime may be gone: ignored
  }

  void* raw_alloc(std::size_t bytes, std::string& why_not) override {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // out of memory is not sticky; clear it for the next caller
      why_not = "cudaMalloc(" + std::to_string(bytes) + ") " + describe(status);
      std::size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
        why_not += ", " + std::to_string(free_bytes) + " bytes free of " + std::to_string(total_bytes);
      } else {
        cudaGetLastError();
      }
      return nullptr;
    }
    check(status, "cudaMalloc(" + std::to_string(bytes) + ")", device_);
    return ptr;
  }

  void raw_free(void* ptr) override {
    DeviceGuard guard(device_);
    check(cudaFree(ptr), "cudaFree", device_);
  }

  Event record(Stream stream) override {
    DeviceGuard guard(device_);
    cudaEvent_t event = nullptr;
    if (!spare_events_.empty()) {
      event = spare_events_.back();
      spare_events_.pop_back();
    } else {
      check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags", device_);
    }
    const cudaError_t status = cudaEventRecord(event, to_cuda(stream));
    if (status != cudaSuccess) {
      spare_events_.push_back(event);
      check(status, "cudaEventRecord", device_);
    }
    return from_cuda(event);
  }

  bool done(Event event) override {
    DeviceGuard guard(device_);
    const cudaError_t status = cudaEventQuery(to_cuda(event));
    if (status == cudaErrorNotReady) {
      cudaGetLastError();  // "not ready" is an answer, not an error
      return false;
    }
    check(status, "cudaEventQuery", device_);
    return true;
  }

  void synchronize(Event event) override {
    DeviceGuard guard(device_);
    check(cudaEventSynchronize(to_cuda(event)), "cudaEventSynchronize", device_);
  }

  void release(Event event) override { spare_events_.push_back(to_cuda(event)); }

  std::string name() const override { return "cuda:" + std::to_string(device_); }

 private:
  int device_;
  std::vector<cudaEvent_t> spare_events_;  // recorded events cost a create; reuse them
};

}  // namespace

std::unique_ptr<DeviceMemory> cuda_device_memory(int device) {
  const Probe& p = probe();
  if (device < 0 || device >= p.device_count)
    throw std::runtime_error("cuda_device_memory: no GPU cuda:" + std::to_string(device) + " (" +
                             std::to_string(p.device_count) + " usable" +
                             (p.device_count == 0 ? ": " + p.why_none : std::string()) + ")");
  return std::make_unique<CudaDeviceMemory>(device);
}

}  // namespace ampcheck::kernels::cuda
