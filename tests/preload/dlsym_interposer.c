/* An independent interposer of dlsym (or, built with MS_INTERPOSE_DLVSYM, of
 * dlvsym), the way GPU-sharing layers such as HAMi's libvgpu.so do it: an
 * UNVERSIONED definition, preloaded before or after memstep, that answers
 * some names itself and forwards every other lookup to the next definition.
 *
 * It answers "memstep_test_interposed" with a function that no library
 * exports (so only this interposer can produce it), counts every call it
 * sees (ms_interposer_calls) and forwards the rest with a plain call, not a
 * tail call (ms_interposer_forwarded counts after it returns): RTLD_NEXT in
 * a forwarded lookup is then relative to this library, as with most
 * interposers. A lookup that skips this library shows up as a wrong answer
 * or a missing count.
 *
 * The dlsym interposer finds the next dlsym with a versioned lookup
 * (GLIBC_2.34, then the base version: GLIBC_2.2.5, aarch64's GLIBC_2.17);
 * the dlvsym one finds the next dlvsym with dlsym(RTLD_NEXT), since its own dlvsym reference may
 * bind to itself. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#define MS_EXPORT __attribute__((visibility("default")))

static atomic_int g_calls;
static atomic_int g_forwarded; /* counted after the forwarded call returns */

static int Interposed(void) { return 4242; }

MS_EXPORT int ms_interposer_calls(void) { return atomic_load(&g_calls); }
MS_EXPORT int ms_interposer_forwarded(void) { return atomic_load(&g_forwarded); }

static int Ours(const char* name) {
  return name != NULL && strcmp(name, "memstep_test_interposed") == 0;
}

#ifndef MS_INTERPOSE_DLVSYM

typedef void* (*DlsymFn)(void*, const char*);
static _Atomic(DlsymFn) g_next;

static DlsymFn NextDlsym(void) {
  DlsymFn next = atomic_load(&g_next);
  if (next == NULL) {
    next = (DlsymFn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
#if defined(__aarch64__)
    if (next == NULL) next = (DlsymFn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.17");
#else
    if (next == NULL) next = (DlsymFn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
#endif
    atomic_store(&g_next, next);
  }
  return next;
}

MS_EXPORT void* dlsym(void* handle, const char* name) {
  atomic_fetch_add(&g_calls, 1);
  if (Ours(name)) return (void*)&Interposed;
  DlsymFn next = NextDlsym();
  if (next == NULL || next == &dlsym) return NULL; /* a broken chain: fail, never recurse */
  void* p = next(handle, name);
  atomic_fetch_add(&g_forwarded, 1);
  return p;
}

#else

typedef void* (*DlvsymFn)(void*, const char*, const char*);
static _Atomic(DlvsymFn) g_next;

MS_EXPORT void* dlvsym(void* handle, const char* name, const char* version) {
  atomic_fetch_add(&g_calls, 1);
  if (Ours(name)) return (void*)&Interposed;
  DlvsymFn next = atomic_load(&g_next);
  if (next == NULL) {
    next = (DlvsymFn)dlsym(RTLD_NEXT, "dlvsym");
    atomic_store(&g_next, next);
  }
  if (next == NULL || next == &dlvsym) return NULL;
  void* p = next(handle, name, version);
  atomic_fetch_add(&g_forwarded, 1);
  return p;
}

#endif
