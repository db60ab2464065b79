// memstep_example_train: a simulated training loop with a planted leak.
//
//   memstep run -- build/bin/memstep_example_train [--steps N] [--leak-kib K]
//   memstep report <run directory>
// The report's top live site is RecordMetricsHistory() (K KiB per step, 64 by
// default); the weights, the optimizer state and a bounded cache are live too
// but do not grow. See training_sim.h for the memory shape of one step.

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "examples/training_sim.h"

namespace {

void Usage(const char* argv0) {
  fprintf(stderr, "usage: %s [--steps N] [--steps-per-epoch N] [--leak-kib K] [--compute N]\n",
          argv0);
}

}  // namespace

int main(int argc, char** argv) {
  memstep::example::Config config;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      Usage(argv[0]);
      return 0;
    }
    if (value == nullptr) {
      Usage(argv[0]);
      return 2;
    }
    if (strcmp(arg, "--steps") == 0) {
      config.steps = atoi(value);
    } else if (strcmp(arg, "--steps-per-epoch") == 0) {
      config.steps_per_epoch = atoi(value) > 0 ? atoi(value) : 1;
    } else if (strcmp(arg, "--leak-kib") == 0) {
      config.leak_bytes_per_step = static_cast<size_t>(atoi(value)) << 10;
    } else if (strcmp(arg, "--compute") == 0) {
      config.compute_passes = atoi(value) > 0 ? atoi(value) : 1;
    } else {
      Usage(argv[0]);
      return 2;
    }
    ++i;
  }
  if (config.steps < 0) config.steps = 0;
  double checksum = memstep::example::RunTraining(config);
  printf("done: %d steps, checksum %.3f\n", config.steps, checksum);
  return 0;
}
