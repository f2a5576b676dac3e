// Writes the HTML report of the hand-made fixture report (tests/report_fixture.h) to a
// file, so that tests/e2e/html_chromium.sh can load a page in a browser without the CLI.
#include <cstdio>
#include <exception>

#include "reports/atomic_file.h"
#include "reports/html.h"
#include "tests/report_fixture.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT.html\n", argv[0]);
    return 2;
  }
  try {
    ampcheck::reports::write_file_atomically(argv[1], ampcheck::reports::to_html(ampcheck::testing::sample_report(true, true)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
