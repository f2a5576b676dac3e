#include "cli/interrupt.h"

#include <signal.h>  // sigaction, raise, sigprocmask
#include <unistd.h>  // write, _exit

#include <atomic>
#include <cerrno>
#include <cstdio>  // std::fflush
#include <iostream>
#include <stdexcept>
#include <string_view>

namespace ampcheck::cli {
namespace {

// What the handler touches: lock-free atomics only, so it is async-signal-safe.
static_assert(std::atomic<int>::is_always_lock_free);
std::atomic<int> g_first{0};    // the signal that asked to stop; 0 before one arrived
std::atomic<int> g_exit{0};     // a second signal, waiting for a report write to end
std::atomic<int> g_writing{0};  // report writes in progress (ReportWrite)
std::atomic<bool> g_active{false};

constexpr int kSignals[] = {SIGINT, SIGTERM};
struct sigaction g_previous[2];
bool g_installed[2] = {false, false};

constexpr std::string_view kStoppingInt =
    "\nampcheck: interrupted (SIGINT): stopping after the current step to report what was seen; "
    "press Ctrl-C again to quit at once\n";
constexpr std::string_view kStoppingTerm =
    "\nampcheck: interrupted (SIGTERM): stopping after the current step to report what was seen; "
    "send it again to quit at once\n";

// Ends the process by `sig` with its default action; async-signal-safe. The signal is
// blocked inside its own handler, so it is unblocked first; _exit is the fallback if it
// still returns.
[[noreturn]] void die(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
  _exit(128 + sig);
}

void on_signal(int sig) {
  const int saved_errno = errno;
  int none = 0;
  if (g_first.compare_exchange_strong(none, sig)) {
    const std::string_view text = sig == SIGINT ? kStoppingInt : kStoppingTerm;
    const ssize_t written = write(STDERR_FILENO, text.data(), text.size());
    static_cast<void>(written);  // nothing to do about a closed stderr here
    errno = saved_errno;
    return;
  }
  // The second one: at once, unless a report file is being written (~ReportWrite ends it
  // then). Stored before the check, as ~ReportWrite decrements before it looks: one of
  // the two sees the other.
  g_exit.store(sig);
  if (g_writing.load() == 0) die(sig);
  errno = saved_errno;  // deferred: back to the write
}

}  // namespace

InterruptScope::InterruptScope() {
  if (g_active.exchange(true)) throw std::logic_error("InterruptScope: one is already active in this process");
  g_first.store(0);
  g_exit.store(0);
  struct sigaction handler {};
  handler.sa_handler = on_signal;
  sigemptyset(&handler.sa_mask);
  for (int sig : kSignals) sigaddset(&handler.sa_mask, sig);  // never nested in each other
  handler.sa_flags = SA_RESTART;
  for (std::size_t i = 0; i < std::size(kSignals); ++i) {
    g_installed[i] = false;
    if (sigaction(kSignals[i], nullptr, &g_previous[i]) != 0) continue;
    const bool ignored = !(g_previous[i].sa_flags & SA_SIGINFO) && g_previous[i].sa_handler == SIG_IGN;
    if (ignored) continue;  // the shell made this job immune to the terminal's Ctrl-C: keep it so
    g_installed[i] = sigaction(kSignals[i], &handler, nullptr) == 0;
  }
}

InterruptScope::~InterruptScope() {
  for (std::size_t i = 0; i < std::size(kSignals); ++i)
    if (g_installed[i]) sigaction(kSignals[i], &g_previous[i], nullptr);
  g_active.store(false);
}

std::function<bool()> InterruptScope::stop_predicate() {
  return [] { return interrupt_requested(); };
}

bool interrupt_requested() { return g_first.load() != 0; }

std::string_view interrupt_signal_name() {
  switch (g_first.load()) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "";
  }
}

ReportWrite::ReportWrite() {
  g_writing.fetch_add(1);
  if (const int sig = g_exit.load(); sig != 0 && g_writing.load() == 1) die(sig);  // nothing written yet
}

ReportWrite::~ReportWrite() {
  if (g_writing.fetch_sub(1) == 1)
    if (const int sig = g_exit.load(); sig != 0) die(sig);
}

void end_by_interrupting_signal() {
  const int sig = g_first.load();
  if (sig == 0) return;
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  die(sig);
}

}  // namespace ampcheck::cli
