#include "kernels/cpu/cpu_features.h"

#include <cstdint>
#include <cstring>  // std::memcpy: the brand string's registers

#if defined(__x86_64__)
#include <cpuid.h>  // __get_cpuid, __get_cpuid_count, __get_cpuid_max
#endif

namespace ampcheck::kernels::cpu {
namespace {

#if defined(__x86_64__)
// CPUID bits (Intel SDM vol. 2A, CPUID; AMX-FP16 is newer than GCC 12's <cpuid.h>).
constexpr unsigned kLeaf1EcxFma = 1u << 12, kLeaf1EcxOsxsave = 1u << 27, kLeaf1EcxAvx = 1u << 28, kLeaf1EcxF16c = 1u << 29;
constexpr unsigned kLeaf7EbxAvx2 = 1u << 5, kLeaf7EbxAvx512f = 1u << 16, kLeaf7EbxAvx512bw = 1u << 30;
constexpr unsigned kLeaf7EdxAmxBf16 = 1u << 22, kLeaf7EdxAvx512fp16 = 1u << 23,
                   kLeaf7EdxAmxTile = 1u << 24;
constexpr unsigned kLeaf7Sub1EaxAvx512bf16 = 1u << 5, kLeaf7Sub1EaxAmxFp16 = 1u << 21;
// XCR0 state components the OS must save for each register file.
constexpr std::uint64_t kXcr0Avx = 0x6;          // SSE + AVX (YMM)
constexpr std::uint64_t kXcr0Avx512 = 0xe6;      // + opmask, ZMM_Hi256, Hi16_ZMM
constexpr std::uint64_t kXcr0Amx = 0x60000;      // XTILECFG + XTILEDATA

std::uint64_t xcr0() {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

std::string brand() {
  unsigned regs[12] = {};
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000u, nullptr)) < 0x80000004u) return "";  // int in clang's cpuid.h
  for (unsigned i = 0; i < 3; ++i)
    __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
  char text[49] = {};
  std::memcpy(text, regs, 48);
  std::string s(text);
  const auto first = s.find_first_not_of(' ');
  const auto last = s.find_last_not_of(' ');
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

CpuFeatures detect() {
  CpuFeatures f;
  f.brand = brand();
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const std::uint64_t xcr = (c & kLeaf1EcxOsxsave) ? xcr0() : 0;
  const bool avx_state = (c & kLeaf1EcxAvx) && (xcr & kXcr0Avx) == kXcr0Avx;
  const bool avx512_state = avx_state && (xcr & kXcr0Avx512) == kXcr0Avx512;
  const bool amx_state = (xcr & kXcr0Amx) == kXcr0Amx;
  f.f16c = avx_state && (c & kLeaf1EcxF16c);
  f.fma = avx_state && (c & kLeaf1EcxFma);
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned max_sub = a;
  f.avx2 = avx_state && (b & kLeaf7EbxAvx2);
  f.avx512f = avx512_state && (b & kLeaf7EbxAvx512f);
  f.avx512bw = avx512_state && (b & kLeaf7EbxAvx512bw);
  f.avx512_fp16 = avx512_state && (d & kLeaf7EdxAvx512fp16);
  f.amx_tile = amx_state && (d & kLeaf7EdxAmxTile);
  f.amx_bf16 = amx_state && (d & kLeaf7EdxAmxBf16);
  if (max_sub >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = avx512_state && (a & kLeaf7Sub1EaxAvx512bf16);
    f.amx_fp16 = amx_state && (a & kLeaf7Sub1EaxAmxFp16);
  }
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace ampcheck::kernels::cpu
