// One kernel's name as different tools print it, reduced to a key that is the same for all
// of them, so that Nsight Compute's counters can be joined onto a timeline's kernels:
//   Kineto   void cutlass::Kernel2<cutlass_80_wmma_..._align8>(cutlass_80_wmma_..._align8::Params)
//   nsys     void cutlass::Kernel2<cutlass_80_wmma_..._align8>(T1::Params)
//   ncu      void Kernel2<cutlass_80_wmma_..._align8>(Params)
// The key keeps the words of the name up to its parameter list, without namespace
// qualifiers, casts of template literals ("(int)7", "(bool)1"), literal suffixes ("3ul")
// and anonymous-namespace markers; it is not meant for display.
#pragma once

#include <string>
#include <string_view>

namespace ampcheck::profiles {

std::string kernel_name_key(std::string_view name);

}  // namespace ampcheck::profiles
