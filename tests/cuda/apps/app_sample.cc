// Device sampling and the out-of-memory snapshot (docs/gpu.md "Sampling",
// "Out of memory"), driven by tests/cuda/sampling_test.py against the fake
// runtime. Planted facts (sizes in bytes, all through cudaMalloc on device 0):
//   step 0, before the loop: planted_sample_weights  32 MiB, live to the end
//   each of kSteps steps, stage "forward":
//     planted_sample_small   kSmall blocks of 256 KiB, each written, freed
//                            at the step's end (churn: few are sampled)
//     planted_sample_leak    one 2 MiB block per step, never freed (a leak)
//   after the last step, in step kSteps, stage "forward":
//     planted_sample_oom     a request beyond FAKECUDA_MEM_LIMIT: fails with 2
// It prints "ready <pid>" and waits for one line on stdin before the
// out-of-memory call (the test sends the snapshot signal meanwhile), then
// prints its totals: "facts alloc_bytes=N alloc_count=N live_bytes=N".
// Exit status 0 when every call returned what was planted.

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "memstep/memstep.h"
#include "tests/cuda/fake/cuda_decls.h"

namespace {

constexpr int kSteps = 60;
constexpr int kSmall = 64;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kSmallBytes = 256 << 10;
constexpr uint64_t kLeakBytes = 2 * kMiB;
constexpr uint64_t kWeightsBytes = 32 * kMiB;

uint64_t g_alloc_bytes = 0, g_alloc_count = 0, g_live = 0;

void* Alloc(size_t n) {
  void* p = nullptr;
  if (cudaMalloc(&p, n) != 0 || p == nullptr) {
    std::fprintf(stderr, "FAIL: cudaMalloc(%zu)\n", n);
    _exit(1);
  }
  g_alloc_bytes += n;
  ++g_alloc_count;
  g_live += n;
  return p;
}

void Free(void* p, size_t n) {
  if (cudaFree(p) != 0) {
    std::fprintf(stderr, "FAIL: cudaFree\n");
    _exit(1);
  }
  g_live -= n;
}

}  // namespace

extern "C" __attribute__((noinline, used)) void* planted_sample_weights() {
  return Alloc(kWeightsBytes);
}
extern "C" __attribute__((noinline, used)) void* planted_sample_small() {
  void* p = Alloc(kSmallBytes);
  std::memset(p, 1, kSmallBytes);  // the step's work: the fake's memory is real
  return p;
}
extern "C" __attribute__((noinline, used)) void* planted_sample_leak() { return Alloc(kLeakBytes); }
extern "C" __attribute__((noinline, used)) int planted_sample_oom(size_t n) {
  void* p = nullptr;
  return cudaMalloc(&p, n);
}

int main() {
  if (cudaSetDevice(0) != 0) return 1;
  planted_sample_weights();
  void* small[kSmall];
  for (int s = 0; s < kSteps; ++s) {
    if (&memstep_step_begin != nullptr) memstep_step_begin(static_cast<uint64_t>(s));
    if (&memstep_stage_begin != nullptr) memstep_stage_begin("forward");
    for (int i = 0; i < kSmall; ++i) small[i] = planted_sample_small();
    planted_sample_leak();
    if (&memstep_stage_end != nullptr) memstep_stage_end("forward");
    for (int i = 0; i < kSmall; ++i) Free(small[i], kSmallBytes);
    if (&memstep_step_end != nullptr) memstep_step_end(static_cast<uint64_t>(s));
  }
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  char line[64];
  if (std::fgets(line, sizeof(line), stdin) == nullptr) return 1;
  if (&memstep_step_begin != nullptr) memstep_step_begin(kSteps);
  if (&memstep_stage_begin != nullptr) memstep_stage_begin("forward");
  const int rc = planted_sample_oom(size_t{1} << 40);
  if (rc != 2) {
    std::fprintf(stderr, "FAIL: the planted out-of-memory call returned %d, not 2\n", rc);
    return 1;
  }
  if (&memstep_stage_end != nullptr) memstep_stage_end("forward");
  if (&memstep_step_end != nullptr) memstep_step_end(kSteps);
  std::printf("facts alloc_bytes=%llu alloc_count=%llu live_bytes=%llu\n",
              static_cast<unsigned long long>(g_alloc_bytes),
              static_cast<unsigned long long>(g_alloc_count),
              static_cast<unsigned long long>(g_live));
  return 0;
}
