// Where the engine computes: the CPU, or GPU 0 through CUDA.
#pragma once

#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ampcheck {

enum class Device { cpu, cuda };
enum class DeviceRequest { any, cpu, cuda };  // "auto", "cpu", "cuda" on the command line

std::string_view device_name(Device d);
std::optional<DeviceRequest> parse_device_request(std::string_view text);

class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `any` picks CUDA when a GPU is usable and otherwise the CPU, writing one line to
// `notices` when a CUDA-enabled build finds no GPU. `cuda` without a usable GPU throws
// DeviceError saying why and what to do.
Device resolve_device(DeviceRequest request, std::ostream& notices);

// What this build can run on: "CUDA 13.0, built for sm_75 sm_80 sm_90" or "no CUDA (...)".
std::string cuda_build_description();

}  // namespace ampcheck
