#include "cli/mpi_launch.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "cli/usage_error.h"

extern char** environ;

namespace ampcheck::cli {
namespace {

std::vector<std::string>& recorded() {
  static std::vector<std::string> args;
  return args;
}

}  // namespace

void set_command_line(int argc, const char* const* argv) {
  recorded().assign(argv, argv + argc);
}

int launch_under_mpi(int nproc, std::ostream& err) {
  std::vector<std::string> args = {"mpirun"};
  if (geteuid() == 0) args.push_back("--allow-run-as-root");  // containers and CI run as root
  // More ranks than cores is a test, not a speed-up: allowed, as on a 2-core CI machine.
  args.insert(args.end(), {"--quiet", "--oversubscribe", "-np", std::to_string(nproc)});
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  args.push_back(n > 0 ? std::string(self, static_cast<std::size_t>(n)) : recorded().at(0));
  const std::vector<std::string>& given = recorded();
  for (std::size_t i = 1; i < given.size(); ++i) {
    if (given[i] == "--nproc") {
      ++i;  // and its value
      continue;
    }
    if (given[i].rfind("--nproc=", 0) == 0) continue;
    args.push_back(given[i]);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "mpirun", nullptr, nullptr, argv.data(), environ);
  if (rc != 0)
    throw UsageError("--nproc " + std::to_string(nproc) + " starts OpenMPI's mpirun, which cannot be run (" +
                     std::strerror(rc) + "): apt-get install openmpi-bin, or start ampcheck with mpirun -np N yourself");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  err << "ampcheck: mpirun ended by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << "\n";
  return 3;
}

}  // namespace ampcheck::cli
