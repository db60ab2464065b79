/* libms_rpa.so / libms_rpb.so (issue 10, item 2): libraries that dlopen their
 * own dependencies by BARE NAME, found through their own RUNPATH
 * ($ORIGIN/a_deps, resp. $ORIGIN/b_deps), as cuDNN 9 and the pip-installed
 * NVIDIA libraries do. glibc searches the RUNPATH of the object that CALLS
 * dlopen, so this only works if an interposed dlopen keeps that caller.
 * Built twice: MS_RP_CTOR_DEP (libms_rpa only) also dlopens a dependency
 * from the library's constructor, i.e. inside the dlopen that loads it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

#define MS_EXPORT __attribute__((visibility("default")))

static int g_opened; /* counted after each dlopen: none is a tail call */
static void* g_ctor_handle;
static char g_ctor_error[512];

/* dlopen(name) called from this library. */
MS_EXPORT void* ms_rp_open(const char* name) {
  void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h != NULL) ++g_opened;
  return h;
}

MS_EXPORT int ms_rp_opened(void) { return g_opened; }

/* The handle the constructor got (NULL if none), and its error. */
MS_EXPORT void* ms_rp_ctor_handle(void) { return g_ctor_handle; }
MS_EXPORT const char* ms_rp_ctor_error(void) { return g_ctor_error; }

#ifdef MS_RP_CTOR_DEP
__attribute__((constructor)) static void Init(void) {
  g_ctor_handle = dlopen(MS_RP_CTOR_DEP, RTLD_NOW | RTLD_LOCAL);
  if (g_ctor_handle == NULL) {
    const char* e = dlerror();
    snprintf(g_ctor_error, sizeof(g_ctor_error), "%s", e != NULL ? e : "?");
  } else {
    ++g_opened;
  }
}
#endif
