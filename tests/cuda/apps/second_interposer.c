/* A second, independent interposer of cudaMalloc, preloaded after memstep
 * (LD_PRELOAD=libmemstep.so:libsecond.so), the way tools such as
 * torch_memory_saver's preload mode do it: an unversioned cudaMalloc that
 * forwards to dlsym(RTLD_NEXT, "cudaMalloc"). If memstep's dlsym override
 * did not tail-call glibc's, RTLD_NEXT would be resolved relative to memstep
 * and return this library's own cudaMalloc: recursion (brief section 2.4,
 * experiment 7). The recursion is caught and reported as error 777. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>

typedef int (*MallocFn)(void**, size_t);

static atomic_int g_calls;
static __thread int t_depth;

__attribute__((visibility("default"))) int second_interposer_calls(void) { return g_calls; }

__attribute__((visibility("default"))) int cudaMalloc(void** p, size_t n) {
  static MallocFn next;
  if (next == NULL) next = (MallocFn)dlsym(RTLD_NEXT, "cudaMalloc");
  if (next == NULL || t_depth > 0) return 777;
  ++t_depth;
  atomic_fetch_add(&g_calls, 1);
  int rc = next(p, n);
  --t_depth;
  return rc;
}
