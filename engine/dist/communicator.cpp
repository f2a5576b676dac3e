#include "engine/dist/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <stdexcept>

#ifdef AMPCHECK_HAVE_MPI
#include <mpi.h>
#endif

namespace ampcheck::dist {
namespace {

class Single final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string runtime() const override { return "single"; }
  void all_reduce_sum(float*, std::int64_t) override {}
  void all_reduce_sum(double*, std::int64_t) override {}
  void all_reduce_max(float*, std::int64_t, int) override {}
  bool all_reduce_or(bool value) override { return value; }
  std::vector<std::string> gather(const std::string& mine, int) override { return {mine}; }
  std::string broadcast(const std::string& value, int) override { return value; }
};

#ifdef AMPCHECK_HAVE_MPI
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + what + " failed (error " + std::to_string(rc) + ")");
}

class Mpi final : public Communicator {
 public:
  Mpi() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string runtime() const override { return "mpi"; }
  void all_reduce_sum(float* data, std::int64_t count) override { reduce(data, count, MPI_FLOAT); }
  void all_reduce_sum(double* data, std::int64_t count) override { reduce(data, count, MPI_DOUBLE); }
  void all_reduce_max(float* data, std::int64_t count, int group) override {
    MPI_Comm comm = MPI_COMM_WORLD;
    if (group > 0 && group < size_) {
      auto it = groups_.find(group);
      if (it == groups_.end()) {
        MPI_Comm split = MPI_COMM_NULL;
        check(MPI_Comm_split(MPI_COMM_WORLD, rank_ / group, rank_, &split), "MPI_Comm_split");
        it = groups_.emplace(group, split).first;
      }
      comm = it->second;
    }
    constexpr std::int64_t kPiece = std::int64_t{1} << 30;
    for (std::int64_t at = 0; at < count; at += kPiece)
      check(MPI_Allreduce(MPI_IN_PLACE, data + at, static_cast<int>(std::min(kPiece, count - at)), MPI_FLOAT, MPI_MAX,
                          comm),
            "MPI_Allreduce (MAX)");
  }
  bool all_reduce_or(bool value) override {
    int in = value ? 1 : 0, out = 0;
    check(MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce (MAX)");
    return out != 0;
  }
  std::vector<std::string> gather(const std::string& mine, int root) override {
    const int n = static_cast<int>(mine.size());
    std::vector<int> sizes(static_cast<std::size_t>(size_));
    check(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, root, MPI_COMM_WORLD), "MPI_Gather");
    std::vector<int> offsets(static_cast<std::size_t>(size_), 0);
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[static_cast<std::size_t>(r)] = total;
      total += sizes[static_cast<std::size_t>(r)];
    }
    std::string all(static_cast<std::size_t>(rank_ == root ? total : 0), '\0');
    check(MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, root, MPI_COMM_WORLD),
          "MPI_Gatherv");
    if (rank_ != root) return {};
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r)
      out.push_back(all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                               static_cast<std::size_t>(sizes[static_cast<std::size_t>(r)])));
    return out;
  }
  std::string broadcast(const std::string& value, int root) override {
    int n = static_cast<int>(value.size());
    check(MPI_Bcast(&n, 1, MPI_INT, root, MPI_COMM_WORLD), "MPI_Bcast");
    std::string out = rank_ == root ? value : std::string(static_cast<std::size_t>(n), '\0');
    check(MPI_Bcast(out.data(), n, MPI_CHAR, root, MPI_COMM_WORLD), "MPI_Bcast");
    return out;
  }

 private:
  void reduce(void* data, std::int64_t count, MPI_Datatype type) {
    // MPI counts are int: large buffers go in pieces.
    constexpr std::int64_t kPiece = std::int64_t{1} << 30;
    const std::size_t bytes = type == MPI_FLOAT ? 4 : 8;
    for (std::int64_t at = 0; at < count; at += kPiece) {
      const int n = static_cast<int>(std::min(kPiece, count - at));
      check(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(data) + static_cast<std::size_t>(at) * bytes, n, type, MPI_SUM,
                          MPI_COMM_WORLD),
            "MPI_Allreduce (SUM)");
    }
  }
  int rank_ = 0, size_ = 1;
  std::map<int, MPI_Comm> groups_;  // split once per group size, kept until MPI_Finalize
};
#endif

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

bool built_with_mpi() {
#ifdef AMPCHECK_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Communicator& world() {
#ifdef AMPCHECK_HAVE_MPI
  if (launched_by_mpi()) {
    static Mpi mpi;
    return mpi;
  }
#endif
  static Single single;
  return single;
}

}  // namespace ampcheck::dist
