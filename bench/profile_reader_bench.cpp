// The profile reader's time and peak memory on one trace (bench/profile_reader/run.sh
// runs it beside HTA's own load of the same file): reading and attributing it
// (profiles::read_profile), then the whole check of `ampcheck kernels`
// (inspector::check_profiles), each timed on its own; the peak resident memory of the
// process after both. One JSON line, so that the script can put runs side by side.
#include <sys/resource.h>  // getrusage: the peak resident set

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "inspector/profile_check.h"
#include "profiles/profile_error.h"
#include "profiles/read.h"

int main(int argc, char** argv) {
  using namespace ampcheck;
  if (argc != 2) {
    std::fprintf(stderr, "usage: ampcheck_bench_profile_reader TRACE\n");
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<profiles::Profile> all;
  try {
    all = profiles::read_profiles(argv[1]);
  } catch (const profiles::ProfileError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const auto t1 = std::chrono::steady_clock::now();
  const reports::KernelsReport report = inspector::check_profiles(all, inspector::ProfileCheckOptions{}, argv[1]);
  const auto t2 = std::chrono::steady_clock::now();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::size_t events = 0;
  for (const profiles::Profile& p : all) events += p.ops.size() + p.kernels.size() + p.launches.size();
  std::printf("{\"read_seconds\": %.4f, \"check_seconds\": %.4f, \"peak_rss\": %lld, \"file_bytes\": %llu, "
              "\"kept_events\": %zu, \"verdict\": \"%s\"}\n",
              std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
              static_cast<long long>(usage.ru_maxrss) * 1024,
              static_cast<unsigned long long>(std::filesystem::file_size(argv[1])), events, report.verdict.c_str());
  return 0;
}
