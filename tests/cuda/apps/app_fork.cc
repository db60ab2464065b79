// app_fork: the parent and a fork child both allocate. Each process has its
// own trace; the child's holds only what the child did (not the parent's
// blocks it inherited), the parent's only what the parent did.
//
// Planted facts:
//   parent: cudaMalloc A 1 MiB+1 before the fork; after the child exited,
//           in step 0, cudaMalloc D 3 MiB+7 and cudaFree A. Live: D.
//   child : cudaMalloc B 2 MiB+3, cudaMallocHost C 4 KiB+5, cudaFree B.
//           Live: C.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "tests/cuda/apps/app_common.h"
#include "tests/cuda/apps/rt_util.h"

using namespace cudatest;

namespace {
constexpr uint64_t KiB = 1024, MiB = 1024 * 1024;

void* Malloc(uint64_t size, const char* func) {
  void* p = nullptr;
  CheckRc(cudaMalloc(&p, size), 0, func);
  Alloc(kDevice, Lowest("cudaMalloc"), 0, (uint64_t)p, size, func);
  return p;
}

void FreeDevice(void* p) {
  CheckRc(cudaFree(p), 0, "cudaFree");
  Free(kDevice, Lowest("cudaFree"), (uint64_t)p);
}
}  // namespace

PLANTED void* planted_fork_parent_a() { return Malloc(MiB + 1, __func__); }
PLANTED void* planted_fork_parent_d() { return Malloc(3 * MiB + 7, __func__); }
PLANTED void* planted_fork_child_b() { return Malloc(2 * MiB + 3, __func__); }

PLANTED void planted_fork_child_c() {
  void* p = nullptr;
  CheckRc(cudaMallocHost(&p, 4 * KiB + 5), 0, "cudaMallocHost (child)");
  Alloc(kPinned, "cudaMallocHost", -1, (uint64_t)p, 4 * KiB + 5, __func__);
}

int main(int argc, char** argv) {
  Init(argc, argv, "app_fork");
  void* a = planted_fork_parent_a();
  pid_t pid = fork();
  Check(pid >= 0, "fork");
  if (pid == 0) {
    ForkChild();
    void* b = planted_fork_child_b();
    planted_fork_child_c();
    FreeDevice(b);
    Finish();
    exit(0);
  }
  int status = 0;
  Check(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the fork child failed (status 0x%x)", status);
  StepBegin(0);
  planted_fork_parent_d();
  FreeDevice(a);
  StepEnd(0);
  Finish();
  return 0;
}
