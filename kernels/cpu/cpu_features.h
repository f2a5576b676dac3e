// What this x86 CPU can do for low-precision arithmetic, read once from CPUID (and from
// XCR0, so a feature counts only when the OS also saves its registers). The conversion
// dispatch (kernels/cpu/convert.h) and `ampcheck doctor` both read it from here.
#pragma once

#include <string>

namespace ampcheck::kernels::cpu {

struct CpuFeatures {
  std::string brand;         // "Intel(R) Xeon(R) Platinum 8480+", or empty where unknown
  bool f16c = false;         // f32 <-> f16 conversion instructions (needs AVX state)
  bool fma = false;          // fused multiply-add on XMM/YMM (FMA3; needs AVX state)
  bool avx2 = false;
  bool avx512f = false;      // AVX-512 Foundation (needs ZMM/opmask state)
  bool avx512bw = false;
  bool avx512_fp16 = false;  // fp16 arithmetic in ZMM registers (Sapphire Rapids)
  bool avx512_bf16 = false;  // vcvtne2ps2bf16 and bf16 dot products (Cooper Lake)
  bool amx_tile = false;     // AMX tile registers (needs XTILE state)
  bool amx_bf16 = false;     // AMX bf16 tile multiply
  bool amx_fp16 = false;     // AMX fp16 tile multiply (Granite Rapids)
};

// Every flag false on a CPU that is not x86-64.
const CpuFeatures& cpu_features();

}  // namespace ampcheck::kernels::cpu
