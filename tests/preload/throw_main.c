/* C main that dlopens a throwing C++ library (see throw_dso.cc). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  int (*fn)(int) = (int (*)(int))dlsym(h, "memstep_test_throw");
  if (fn == NULL) return 1;
  int caught = fn(2000);
  printf("caught %d\n", caught);
  dlclose(h);
  return caught == 2000 ? 0 : 1;
}
