// The CPU statistics on a chosen path, for the tests that hold every path to the scalar
// one (the numerics family itself takes the active path: kernels/numerics_kernels.h).
#pragma once

#include "kernels/cpu/gemm.h"  // GemmIsa
#include "kernels/numerics_kernels.h"
#include "kernels/view.h"

namespace ampcheck::kernels::cpu {

// v's summary with the float tally and the narrow counts on `isa`'s path (AVX-512
// machines tally on the AVX2 path). The same bits on every path and thread count.
NumericsSummary stats(const View& v, GemmIsa isa);

}  // namespace ampcheck::kernels::cpu
