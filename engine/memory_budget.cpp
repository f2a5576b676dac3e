#include "engine/memory_budget.h"

#include <unistd.h>  // sysconf: the machine's memory where /proc/meminfo is missing

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

namespace ampcheck {
namespace {

struct MachineMemory {
  std::uint64_t available = 0, total = 0;  // bytes; 0: unknown
};

std::uint64_t read_number(const char* path) {
  std::ifstream f(path);
  std::uint64_t v = 0;
  return f >> v ? v : 0;  // "max" (no limit) reads as 0
}

// What can be allocated without swapping: Linux's MemAvailable (sysconf's free pages
// elsewhere), lowered by a cgroup v2 memory limit, as a container has.
MachineMemory machine_memory() {
  MachineMemory m;
  std::ifstream info("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (info >> key >> kib >> unit) {
    if (key == "MemTotal:") m.total = kib * 1024;
    if (key == "MemAvailable:") m.available = kib * 1024;
  }
  const long page = ::sysconf(_SC_PAGESIZE);
  if (m.total == 0 && page > 0 && ::sysconf(_SC_PHYS_PAGES) > 0)
    m.total = static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(page);
  if (m.available == 0 && page > 0 && ::sysconf(_SC_AVPHYS_PAGES) > 0)
    m.available = static_cast<std::uint64_t>(::sysconf(_SC_AVPHYS_PAGES)) * static_cast<std::uint64_t>(page);
  if (const std::uint64_t limit = read_number("/sys/fs/cgroup/memory.max"); limit > 0) {
    const std::uint64_t used = std::min(limit, read_number("/sys/fs/cgroup/memory.current"));
    m.total = m.total == 0 ? limit : std::min(m.total, limit);
    m.available = m.available == 0 ? limit - used : std::min(m.available, limit - used);
  }
  return m;
}

constexpr std::uint64_t kAskTheMachineFrom = std::uint64_t{256} << 20;

std::atomic<std::uint64_t> g_limit{0};
// AMPCHECK_MAX_MEMORY, read once; --max-memory replaces it.
std::atomic<bool> g_env_read{false};

void read_environment() {
  if (g_env_read.exchange(true)) return;
  if (const char* v = std::getenv("AMPCHECK_MAX_MEMORY"); v && *v && g_limit.load() == 0)
    if (const auto n = parse_size(v)) g_limit.store(*n);
}

}  // namespace

std::string human_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t unit = 0;
  while (bytes >= 1024 && unit + 1 < std::size(kUnits)) bytes /= 1024, ++unit;
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[unit]);
  return buf;
}

std::optional<std::uint64_t> parse_size(const std::string& text) {
  double value = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  const auto [rest, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || !(value >= 0) || !std::isfinite(value)) return std::nullopt;
  std::string unit(rest, end);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();  // "GB", "GIB" as "G", "GI"
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  static constexpr const char* kSuffixes = "KMGTP";
  double scale = 1;
  if (!unit.empty()) {
    if (unit.size() != 1) return std::nullopt;
    const char* at = std::char_traits<char>::find(kSuffixes, 5, unit[0]);
    if (at == nullptr) return std::nullopt;
    scale = std::ldexp(1.0, 10 * static_cast<int>(at - kSuffixes + 1));
  }
  const double bytes = value * scale;
  if (bytes > 1.8e19) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

void set_memory_limit(std::uint64_t bytes) {
  g_env_read.store(true);
  g_limit.store(bytes);
}

std::uint64_t memory_limit() {
  read_environment();
  return g_limit.load();
}

std::optional<std::string> over_budget(std::uint64_t bytes) {
  const std::uint64_t limit = memory_limit();
  if (limit > 0 && bytes > limit)
    return "needs " + human_bytes(static_cast<double>(bytes)) + ", and --max-memory is " +
           human_bytes(static_cast<double>(limit));
  if (bytes < kAskTheMachineFrom) return std::nullopt;
  const MachineMemory m = machine_memory();
  if (m.total > 0 && bytes > m.available)
    return "needs " + human_bytes(static_cast<double>(bytes)) + ", and this machine has " +
           human_bytes(static_cast<double>(m.available)) + " available (" + human_bytes(static_cast<double>(m.total)) +
           " in all)";
  return std::nullopt;
}

}  // namespace ampcheck
