// Elementwise loops compiled for the CPU's widest vector unit.
//
// The project is built for baseline x86-64 (SSE2), so a plain loop vectorizes 4 floats
// wide at most. vectorized(body) calls body() inside a copy compiled for AVX-512 or
// AVX2 (whichever active_gemm_isa() allows: the CPU's, capped by AMPCHECK_CPU_ISA);
// `flatten` inlines the body there, so the compiler vectorizes its loops for that unit.
//
// Only for loops whose lanes are independent IEEE operations (+ - * / sqrt, compares,
// selects, conversions, std::fma) or calls the compiler cannot vectorize (libm's expf
// stays a call): such a lane gives the same bits at every width. The build has
// -ffp-contract=off (no a*b+c turned into one fma where FMA is enabled) and no fast-math
// (no reassociated reductions), so vectorizing changes the speed only. Both vector paths
// enable FMA (the GEMM's AVX2 path needs it too), so an explicit std::fma is one vfmadd
// there and glibc's correctly rounded fma on the scalar path: the same bits.
// tests/kernels_vectorize_test.cpp checks that every path gives the same bits.
#pragma once

#include "kernels/cpu/gemm.h"  // active_gemm_isa: the same cap as the GEMM's

namespace ampcheck::kernels::cpu {

template <typename Body>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c"), flatten)) void run_avx512(Body& body) {
  body();
}

template <typename Body>
__attribute__((target("avx2,fma,f16c"), flatten)) void run_avx2(Body& body) {
  body();
}

// body() compiled for `isa` (a path this CPU runs; the tests try each).
template <typename Body>
void vectorized(GemmIsa isa, Body&& body) {
  switch (isa) {
    case GemmIsa::avx512: run_avx512(body); return;
    case GemmIsa::avx2: run_avx2(body); return;
    case GemmIsa::scalar: break;
  }
  body();
}

template <typename Body>
void vectorized(Body&& body) {
  vectorized(active_gemm_isa(), body);
}

}  // namespace ampcheck::kernels::cpu
