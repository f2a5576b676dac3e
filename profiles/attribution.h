// Ties each kernel, copy and memset of a profile to the op that launched it, as HTA and
// Kineto join a trace (hta/common/trace.py): the kernel's correlation id names its launch
// (a runtime or driver API call, or a flow's start where the launch event is missing); the
// launch's thread and time name the innermost op or annotation open on that thread then.
// Where no launch is on record, the kernel's "External id" names its op if it matches
// one. A kernel with neither is unattributable, counted with its time under the reason:
// no launch in the profile (the previous step's kernels draining when the window
// opened), launched outside any op, or a format without links. Nothing is guessed.
//
// The same pass nests the ops (each op's parent on its thread), gives each its phase
// (backward under autograd's "evaluate_function: ...Backward0" nodes, a "...Backward"
// node or on the autograd engine's own thread; optimizer under "Optimizer.step#..."; else
// forward) and its module path (the nn.Module frames around it; a backward op takes the
// module of the forward op with its autograd sequence number).
#pragma once

#include "profiles/profile.h"

namespace ampcheck::profiles {

// Sorts the ops (by thread, then begin) and fills Op::parent, phase and module,
// Kernel::op, no_op, by_external_id and launch, and Profile::attribution.
void attribute(Profile& p);

}  // namespace ampcheck::profiles
