/* A program that looks to libmemstep.so like a CPython it must not read: it
 * exports the symbols pyframes.cc looks for, with the values of one case
 * (chosen at build time: memstep reads them in its constructor, before main).
 *   FAKE_PY_VERSION    Py_Version (3.11+), or absent
 *   FAKE_GET_VERSION   what Py_GetVersion() says (3.10 and older)
 *   FAKE_FREE_THREADED _PyRuntime.debug_offsets of a free-threaded 3.13
 *   FAKE_CODE_SIZE     PyCode_Type.tp_basicsize
 * pyframes_test.py's UnsupportedTest runs each: memstep must say once why it
 * does not read Python frames, and the program must run as without it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default"), used))

#ifdef FAKE_PY_VERSION
EXPORT const unsigned long Py_Version = FAKE_PY_VERSION;
#endif
#ifdef FAKE_GET_VERSION
EXPORT const char* Py_GetVersion(void) { return FAKE_GET_VERSION; }
#endif

/* _Py_DebugOffsets of 3.13: cookie, version, free_threaded, the rest 0. */
EXPORT uint64_t _PyRuntime[128] = {
    0x7970677562656478ull, /* "xdebugpy" */
#ifdef FAKE_PY_VERSION
    FAKE_PY_VERSION,
#else
    0,
#endif
#ifdef FAKE_FREE_THREADED
    1,
#else
    0,
#endif
};

/* PyTypeObject: ob_refcnt, ob_type, ob_size, tp_name, tp_basicsize, ... */
EXPORT int64_t PyCode_Type[64] = {1, 0, 0, 0, FAKE_CODE_SIZE};

EXPORT void* PyGILState_GetThisThreadState(void) { return NULL; }
EXPORT int _Py_IsFinalizing(void) { return 0; }
EXPORT __attribute__((noinline)) long _PyEval_EvalFrameDefault(long* p, long n) {
  long s = 0;
  for (long i = 0; i < n; ++i) s += p[i];
  return s;
}

int main(void) {
  /* Work that memstep records: blocks kept and freed, a checksum printed. */
  long sum = 0;
  for (int i = 0; i < 200; ++i) {
    long* p = malloc(sizeof(long) * (size_t)(64 + i));
    for (int k = 0; k < 64 + i; ++k) p[k] = k;
    sum += _PyEval_EvalFrameDefault(p, 64 + i);
    free(p);
  }
  printf("sum=%ld\n", sum);
  return 0;
}
