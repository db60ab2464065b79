/* Loads libms_rpa.so and libms_rpb.so by full path and has each dlopen its
 * dependencies by bare name through its own RUNPATH (runpath_lib.c); with
 * libmemstep.so preloaded this must work exactly as without it.
 * usage: runpath_main LIBMS_RPA LIBMS_RPB; prints "runpath ok". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      const char* e = dlerror();                                                      \
      fprintf(stderr, "CHECK failed at line %d: %s (dlerror: %s)\n", __LINE__, #cond, \
              e != NULL ? e : "none");                                                \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

typedef void* (*OpenFn)(const char*);
typedef void* (*HandleFn)(void);
typedef const char* (*ErrorFn)(void);
typedef int (*IntFn)(void);

/* The value of ms_dep_value in the library behind handle h. */
static int DepValue(void* h) {
  IntFn f = (IntFn)dlsym(h, "ms_dep_value");
  return f != NULL ? f() : -2;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  void* a = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  CHECK(a != NULL);
  void* b = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  CHECK(b != NULL);
  OpenFn open_a = (OpenFn)dlsym(a, "ms_rp_open");
  OpenFn open_b = (OpenFn)dlsym(b, "ms_rp_open");
  CHECK(open_a != NULL && open_b != NULL && open_a != open_b);

  /* Nested: libms_rpa's constructor opened libms_depc.so (in a_deps) while
     the dlopen of libms_rpa itself was running. */
  HandleFn ctor_handle = (HandleFn)dlsym(a, "ms_rp_ctor_handle");
  ErrorFn ctor_error = (ErrorFn)dlsym(a, "ms_rp_ctor_error");
  CHECK(ctor_handle != NULL && ctor_error != NULL);
  if (ctor_handle() == NULL) fprintf(stderr, "constructor's dlopen: %s\n", ctor_error());
  CHECK(ctor_handle() != NULL);
  CHECK(DepValue(ctor_handle()) == 'c');

  /* The caller decides: b's RUNPATH does not reach a_deps (checked before
     libms_depa.so is loaded, since a loaded one would match by name). */
  CHECK(open_b("libms_depa.so") == NULL);
  void* da = open_a("libms_depa.so");
  CHECK(da != NULL);
  CHECK(DepValue(da) == 'a');
  void* db = open_b("libms_depb.so");
  CHECK(db != NULL);
  CHECK(DepValue(db) == 'b');

  /* Loaded and unloaded at once (between two writer cycles under memstep). */
  void* dd = open_a("libms_depd.so");
  CHECK(dd != NULL);
  CHECK(DepValue(dd) == 'd');
  CHECK(dlclose(dd) == 0);
  /* The program has no RUNPATH: a bare name it opens itself is not found. */
  CHECK(dlopen("libms_depd.so", RTLD_NOW) == NULL);

  IntFn opened_a = (IntFn)dlsym(a, "ms_rp_opened");
  CHECK(opened_a != NULL && opened_a() == 3);
  CHECK(dlclose(db) == 0 && dlclose(da) == 0 && dlclose(b) == 0 && dlclose(a) == 0);
  printf("runpath ok\n");
  return 0;
}
