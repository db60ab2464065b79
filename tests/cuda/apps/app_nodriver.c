/* app_nodriver: the runtime with no libcuda.so.1 anywhere. Built twice: against
 * the fake libcudart.so.13 and, where the CUDA toolkit is installed, against
 * the real one. Every call but the version queries must return 35
 * (cudaErrorInsufficientDriver) and leave its out-parameters alone (brief
 * section 7, measured with the real runtime). The program writes each result
 * to FILE, so a run under memstep can be compared byte for byte with a plain
 * run: the profiler passes every error code through unchanged.
 * usage: app_nodriver FILE [--record-only]; exit 0 ok, 1 a result differs, 77
 * a libcuda.so.1 is installed (the case cannot be tested on this machine).
 * --record-only: a driver may be present (the fake one); results are written,
 * not checked. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "tests/cuda/fake/cuda_decls.h"

#define SENTINEL ((void*)0x5e5e5e5e)

static FILE* g_out;
static int g_bad;
static int g_record_only;

static void Expect(const char* what, int rc, int want, int untouched) {
  fprintf(g_out, "%s rc=%d out=%s\n", what, rc, untouched ? "untouched" : "written");
  if (!g_record_only && (rc != want || !untouched)) {
    fprintf(stderr, "FAIL: %s returned %d (expected %d), out-parameter %s\n", what, rc, want,
            untouched ? "untouched" : "written");
    g_bad = 1;
  }
}

static void Allocations(void) {
  void* p = SENTINEL;
  Expect("cudaMalloc", cudaMalloc(&p, 4096), 35, p == SENTINEL);
  Expect("cudaMallocManaged", cudaMallocManaged(&p, 4096, cudaMemAttachGlobal), 35, p == SENTINEL);
  Expect("cudaMallocHost", cudaMallocHost(&p, 4096), 35, p == SENTINEL);
  Expect("cudaHostAlloc", cudaHostAlloc(&p, 4096, 0), 35, p == SENTINEL);
  size_t pitch = 77;
  Expect("cudaMallocPitch", cudaMallocPitch(&p, &pitch, 1000, 10), 35,
         p == SENTINEL && pitch == 77);
  struct cudaPitchedPtr pp = {SENTINEL, 77, 77, 77};
  struct cudaExtent ext = {700, 20, 5};
  Expect("cudaMalloc3D", cudaMalloc3D(&pp, ext), 35, pp.ptr == SENTINEL && pp.pitch == 77);
  Expect("cudaMallocAsync", cudaMallocAsync(&p, 4096, NULL), 35, p == SENTINEL);
  Expect("cudaMallocAsync_ptsz", cudaMallocAsync_ptsz(&p, 4096, NULL), 35, p == SENTINEL);
  Expect("cudaMallocFromPoolAsync", cudaMallocFromPoolAsync(&p, 4096, NULL, NULL), 35,
         p == SENTINEL);
  Expect("cudaMallocFromPoolAsync_ptsz", cudaMallocFromPoolAsync_ptsz(&p, 4096, NULL, NULL), 35,
         p == SENTINEL);
}

static void Frees(void) {
  Expect("cudaFree(p)", cudaFree(SENTINEL), 35, 1);
  Expect("cudaFree(NULL)", cudaFree(NULL), 35, 1);
  Expect("cudaFreeHost", cudaFreeHost(SENTINEL), 35, 1);
  Expect("cudaFreeAsync", cudaFreeAsync(SENTINEL, NULL), 35, 1);
  Expect("cudaFreeAsync_ptsz", cudaFreeAsync_ptsz(SENTINEL, NULL), 35, 1);
}

static void Queries(void) {
  int n = 77;
  Expect("cudaGetDeviceCount", cudaGetDeviceCount(&n), 35, n == 77);
  size_t fr = 77, total = 77;
  Expect("cudaMemGetInfo", cudaMemGetInfo(&fr, &total), 35, fr == 77 && total == 77);
  cudaMemPool_t pool = (cudaMemPool_t)SENTINEL;
  Expect("cudaDeviceGetDefaultMemPool", cudaDeviceGetDefaultMemPool(&pool, 0), 35,
         pool == (cudaMemPool_t)SENTINEL);
  void* fn = SENTINEL;
  int q = 77;
  Expect("cudaGetDriverEntryPoint", cudaGetDriverEntryPoint("cuMemAlloc", &fn, 0, &q), 35,
         fn == SENTINEL);
  fprintf(g_out, "  q=%d\n", q);
  fn = SENTINEL;
  Expect("cudaGetDriverEntryPoint_ptsz", cudaGetDriverEntryPoint_ptsz("cuMemAlloc", &fn, 0, &q), 35,
         fn == SENTINEL);
  fn = SENTINEL;
  Expect("cudaGetDriverEntryPointByVersion",
         cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, 0, &q), 35, fn == SENTINEL);
  fn = SENTINEL;
  Expect("cudaGetDriverEntryPointByVersion_ptsz",
         cudaGetDriverEntryPointByVersion_ptsz("cuMemCreate", &fn, 12000, 0, &q), 35,
         fn == SENTINEL);
  Expect("cudaGetLastError", cudaGetLastError(), 35, 1);
  int v = 77;
  Expect("cudaRuntimeGetVersion", cudaRuntimeGetVersion(&v), 0, 1);
  fprintf(g_out, "  version=%d\n", v);
  if (v != 13000 && !g_record_only) g_bad = 1;
  Expect("cudaDriverGetVersion", cudaDriverGetVersion(&v), 0, 1);
  fprintf(g_out, "  version=%d\n", v);
  if (v != 0 && !g_record_only) g_bad = 1;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  g_record_only = argc > 2;
  void* drv = g_record_only ? NULL : dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (drv != NULL) {
    fprintf(stderr, "a libcuda.so.1 is installed: the no-driver case cannot be tested here\n");
    return 77;
  }
  g_out = fopen(argv[1], "w");
  if (g_out == NULL) return 2;
  Allocations();
  Frees();
  Queries();
  fclose(g_out);
  return g_bad;
}
