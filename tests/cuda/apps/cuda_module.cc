// A shared module that calls the CUDA runtime through its own PLT, loaded
// with dlopen by app_local (RTLD_LOCAL, RTLD_LOCAL|RTLD_DEEPBIND) and app12
// (a libcudart.so.13 user inside a libcudart.so.12 program). Built once per
// use with MODULE_ALLOC / MODULE_FREE naming the planted functions, so each
// build's frames are told apart in the recorded stacks.
#include <cstddef>

#include "tests/cuda/fake/cuda_decls.h"

#define PLANTED extern "C" __attribute__((noinline, used, visibility("default")))

PLANTED int MODULE_ALLOC(void** p, size_t n) {
  int rc = cudaMalloc(p, n);
  return rc;
}

PLANTED int MODULE_FREE(void* p) {
  int rc = cudaFree(p);
  return rc;
}
