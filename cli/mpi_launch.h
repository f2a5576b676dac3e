// `--nproc N`: ampcheck starts itself under OpenMPI's mpirun with N ranks (the command line
// as given, less --nproc), waits, and returns the job's exit code; under mpirun already, or
// for N = 1, nothing to do.
#pragma once

#include <ostream>

namespace ampcheck::cli {

// The command line ampcheck was started with (app.cpp records it).
void set_command_line(int argc, const char* const* argv);
// Runs the recorded command line under `mpirun -np nproc`; returns its exit code.
int launch_under_mpi(int nproc, std::ostream& err);

}  // namespace ampcheck::cli
