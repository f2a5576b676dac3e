// The processes of a data-parallel job, over an existing runtime: MPI (Debian's OpenMPI)
// when ampcheck was started by mpirun, else one process on its own, where every collective
// is the identity. MPI is initialised only under mpirun (its environment says so), so a
// plain `ampcheck run` never touches it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ampcheck::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string runtime() const = 0;  // "mpi", "single"
  // Element-wise sums over the ranks, in place, every rank getting the result (the order
  // of the additions is the runtime's and the same on every rank).
  virtual void all_reduce_sum(float* data, std::int64_t count) = 0;
  virtual void all_reduce_sum(double* data, std::int64_t count) = 0;
  // Element-wise maxima, in place, over the ranks of this one's group: the consecutive
  // ranks [g * group, (g + 1) * group) for group > 0, every rank for 0 (an fp8 recipe's
  // amax reduction; a group smaller than the world is the wrong group on purpose).
  virtual void all_reduce_max(float* data, std::int64_t count, int group = 0) = 0;
  // Whether `value` holds on any rank (a MAX reduction of 0/1).
  virtual bool all_reduce_or(bool value) = 0;
  // Every rank's `mine`, in rank order, on `root`; the others get an empty vector.
  virtual std::vector<std::string> gather(const std::string& mine, int root = 0) = 0;
  // Rank `root`'s `value` on every rank.
  virtual std::string broadcast(const std::string& value, int root = 0) = 0;
};

// This process's communicator: MPI's world under mpirun (and a build with MPI), else a
// single process. The first call initialises MPI; it is finalised at exit.
Communicator& world();
// Whether the environment says mpirun (or another PMI launcher) started this process.
bool launched_by_mpi();
// Whether this build can run under MPI.
bool built_with_mpi();

}  // namespace ampcheck::dist
