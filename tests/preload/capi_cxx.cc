// memstep::ScopedStep / ScopedStage from the public header (scoped.h): no-ops
// without libmemstep.so; under it, balanced STEP and STAGE records even when
// an exception leaves the scope (run_case.sh "scoped"). Prints "scoped ok".
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "memstep/scoped.h"

namespace {

void* volatile g_sink;

void Work(bool fail) {
  memstep::ScopedStage stage("forward");
  g_sink = malloc(1000);
  free(g_sink);
  if (fail) throw std::runtime_error("leaves the stage by unwinding");
}

}  // namespace

int main() {
  for (uint64_t step = 0; step < 2; ++step) {
    memstep::ScopedStep s(step);
    Work(false);
    try {
      Work(true);
    } catch (const std::runtime_error&) {
    }
  }
  { memstep::ScopedStage outer("eval"); }
  puts("scoped ok");
  return 0;
}
