// Writes ampcheck's fp8 casts of every binary32 pattern to stdout, for
// bench/fp8/ml_dtypes_oracle.py to compare with ml_dtypes:
//
//   ampcheck_bench_fp8_codes FORMAT OVERFLOW PATH
//
// FORMAT e4m3|e5m2, OVERFLOW to_nonfinite|saturate, PATH a conversion path of
// kernels/cpu/convert.h (scalar, f16c, ...). Output: 2^32 bytes, the code of pattern p at
// offset p, written in chunks of 2^24 patterns. Exit 2 with a message on bad arguments.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/fp8.h"

int main(int argc, char** argv) {
  using namespace ampcheck::kernels;
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s e4m3|e5m2 to_nonfinite|saturate PATH > codes.bin\n", argv[0]);
    return 2;
  }
  const std::string f = argv[1], o = argv[2];
  if ((f != "e4m3" && f != "e5m2") || (o != "to_nonfinite" && o != "saturate")) {
    std::fprintf(stderr, "format must be e4m3 or e5m2, overflow to_nonfinite or saturate\n");
    return 2;
  }
  const auto isa = cpu::isa_from_name(argv[3]);
  if (!isa || !cpu::isa_supported(*isa)) {
    std::fprintf(stderr, "path %s is not one this CPU runs\n", argv[3]);
    return 2;
  }
  const Fp8Format format = f == "e4m3" ? Fp8Format::e4m3 : Fp8Format::e5m2;
  const Fp8Overflow overflow = o == "saturate" ? Fp8Overflow::saturate : Fp8Overflow::to_nonfinite;
  constexpr std::uint64_t kChunk = 1u << 24;
  std::vector<std::uint32_t> bits(kChunk);
  std::vector<float> values(kChunk);
  std::vector<std::uint8_t> codes(kChunk);
  for (std::uint64_t base = 0; base < (1ull << 32); base += kChunk) {
    for (std::uint64_t i = 0; i < kChunk; ++i) bits[i] = static_cast<std::uint32_t>(base + i);
    std::memcpy(values.data(), bits.data(), kChunk * sizeof(float));
    cpu::f32_to_fp8(values.data(), codes.data(), kChunk, format, overflow, *isa);
    if (std::fwrite(codes.data(), 1, kChunk, stdout) != kChunk) return 3;
  }
  return std::fflush(stdout) == 0 ? 0 : 3;
}
