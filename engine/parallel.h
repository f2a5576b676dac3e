// The CPU kernels' threads as the engine's users set them (the pool itself is
// kernels/cpu/parallel.h, where the kernels that use it live).
#pragma once

#include "kernels/cpu/parallel.h"

namespace ampcheck {
using kernels::cpu::cpu_budget;
using kernels::cpu::CpuBudget;
using kernels::cpu::num_threads;
using kernels::cpu::parallel_for;
using kernels::cpu::set_num_threads;
}  // namespace ampcheck
