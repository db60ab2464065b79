// realistic_bench: the example training loop's shape (examples/training_sim.h)
// with more float math per step, so allocation is a small part of the time, as
// in a real CPU training loop.
//   realistic_bench [--steps N (default 100)] [--compute P (default 12)]
// Prints wall seconds for the loop and seconds per step.

#include <cstdio>

#include "examples/training_sim.h"
#include "tests/bench/bench_util.h"

int main(int argc, char** argv) {
  using namespace memstep::bench;  // NOLINT
  memstep::example::Config config;
  config.steps = static_cast<int>(FlagInt(argc, argv, "--steps", 100));
  config.compute_passes = static_cast<int>(FlagInt(argc, argv, "--compute", 12));
  config.print_every = 0;
  const double start = NowSeconds();
  double checksum = memstep::example::RunTraining(config);
  const double seconds = NowSeconds() - start;
  printf("RESULT name=realistic steps=%d seconds=%.4f s_per_step=%.5f checksum=%.1f\n",
         config.steps, seconds, seconds / config.steps, checksum);
  return 0;
}
