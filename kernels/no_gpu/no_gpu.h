// What every entry point of a build without CUDA says (kernels/no_gpu/*.cpp).
#pragma once

#include <stdexcept>
#include <string>

namespace ampcheck::kernels::no_gpu {

[[noreturn]] inline void unavailable(const std::string& what) {
  throw std::runtime_error(what +
                           " has no GPU implementation in this build: reconfigure with "
                           "-DAMPCHECK_CUDA=ON on a machine with the CUDA toolkit");
}

}  // namespace ampcheck::kernels::no_gpu
