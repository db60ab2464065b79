/* Lookups through a dlsym (or dlvsym) interposer preloaded with memstep
 * (dlsym_interposer.c; run by dlsym_chain.sh in both orders and without
 * memstep). Each lookup must reach the interposer, which answers
 * "memstep_test_interposed" itself, and real lookups must still work.
 * usage: dlsym_chain dlsym|dlvsym; prints "dlsym chain ok". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "CHECK failed at line %d: %s\n", __LINE__, #cond); \
      return 1;                                                          \
    }                                                                    \
  } while (0)

typedef int (*IntFn)(void);
typedef double (*CosFn)(double);
typedef size_t (*StrlenFn)(const char*);

/* glibc's first symbol version on this architecture. */
#if defined(__aarch64__)
#define BASE_VERSION "GLIBC_2.17"
#else
#define BASE_VERSION "GLIBC_2.2.5"
#endif

/* The lookup under test: dlsym, or dlvsym with a version. */
static void* Lookup(int versioned, void* h, const char* name, const char* version) {
  return versioned ? dlvsym(h, name, version) : dlsym(h, name);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const int v = strcmp(argv[1], "dlvsym") == 0;
  IntFn calls = (IntFn)dlsym(RTLD_DEFAULT, "ms_interposer_calls");
  IntFn forwarded = (IntFn)dlsym(RTLD_DEFAULT, "ms_interposer_forwarded");
  CHECK(calls != NULL && forwarded != NULL); /* the interposer is preloaded */
  void* libm = dlopen("libm.so.6", RTLD_NOW);
  CHECK(libm != NULL);
  const int calls0 = calls(), forwarded0 = forwarded();

  /* The interposer's own answer: no library exports this name. */
  IntFn mine = (IntFn)Lookup(v, RTLD_DEFAULT, "memstep_test_interposed", "MS_TEST_1");
  CHECK(mine != NULL);
  CHECK(mine() == 4242);
  mine = (IntFn)Lookup(v, libm, "memstep_test_interposed", "MS_TEST_1");
  CHECK(mine != NULL && mine() == 4242);
  /* Real lookups, forwarded by the interposer to the next definition. */
  CosFn c = (CosFn)Lookup(v, libm, "cos", BASE_VERSION);
  CHECK(c != NULL && c(0.0) == 1.0);
  StrlenFn len = (StrlenFn)Lookup(v, RTLD_DEFAULT, "strlen", BASE_VERSION);
  CHECK(len != NULL && len("memstep") == 7);
  CHECK(Lookup(v, libm, "memstep_no_such_symbol", BASE_VERSION) == NULL);
  /* Every lookup above went through the interposer, three were forwarded. */
  CHECK(calls() - calls0 == 5);
  CHECK(forwarded() - forwarded0 == 3);
  dlclose(libm);
  printf("dlsym chain ok\n");
  return 0;
}
