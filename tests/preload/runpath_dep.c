/* The dependencies runpath_lib.c opens by bare name (libms_depa/b/c/d.so);
 * each returns its own value and allocates from its constructor, so the
 * allocation hooks run inside the loader. */
#include <stdlib.h>

static char* g_buf;

__attribute__((constructor)) static void Init(void) { g_buf = malloc(3000); }
__attribute__((destructor)) static void Fini(void) { free(g_buf); }

__attribute__((visibility("default"))) int ms_dep_value(void) {
  return g_buf != NULL ? MS_DEP_VALUE : -1;
}
