#include <iostream>

#include "cli/app.h"
#include "cli/exit_codes.h"
#include "cli/interrupt.h"

int main(int argc, char** argv) {
  const int code = ampcheck::cli::run(argc, argv, std::cout, std::cerr);
  // Interrupted: the reports are written; end by the signal, so that a shell script or
  // loop around ampcheck stops too (a shell shows 130 for Ctrl-C).
  if (code == ampcheck::cli::kInterrupted) ampcheck::cli::end_by_interrupting_signal();
  return code;
}
