// Writes the export tests' trace (export_trace.h) to the path in argv[1],
// for the Python checks of the pprof and Chrome trace exports.
#include <cstdio>

#include "tests/unit/export_trace.h"
#include "tests/unit/test_util.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: export_trace_writer FILE\n");
    return 1;
  }
  return memstep::testing::WriteFile(argv[1], memstep::testing::ExportTrace()) ? 0 : 1;
}
