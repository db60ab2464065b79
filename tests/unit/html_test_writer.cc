// Writes the HTML report tests' inputs (html_test_data.h) for
// html_browser_test.py:
//   html_test_writer hostile FILE        the hostile trace
//   html_test_writer empty FILE          the HTML report of a process that
//                                        recorded nothing (no steps, sites)
//   html_test_writer scale STEPS SITES FILE
//                                        the HTML report of ScaleReport
//                                        (prints the seconds FormatHtml took)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "src/report/formats.h"
#include "tests/unit/html_test_data.h"
#include "tests/unit/test_util.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "hostile" && argc == 3) {
    return memstep::testing::WriteFile(argv[2], memstep::testing::HostileTrace()) ? 0 : 1;
  }
  if (mode == "empty" && argc == 3) {
    memstep::analysis::Report r;
    r.path = "empty";
    r.processes.emplace_back();
    r.processes.back().pid = 1;
    return memstep::testing::WriteFile(argv[2], memstep::report::FormatHtml(r)) ? 0 : 1;
  }
  if (mode == "scale" && argc == 5) {
    const memstep::analysis::Report r =
        memstep::testing::ScaleReport(strtoul(argv[2], nullptr, 10), strtoul(argv[3], nullptr, 10));
    const auto t0 = std::chrono::steady_clock::now();
    const std::string html = memstep::report::FormatHtml(r);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("FormatHtml: %.3f s, %zu bytes\n", s, html.size());
    return memstep::testing::WriteFile(argv[4], html) ? 0 : 1;
  }
  fprintf(stderr, "usage: html_test_writer hostile FILE | empty FILE | scale STEPS SITES FILE\n");
  return 1;
}
