/* A C program that is not Python calls memstep_pymem_install (the entry point
   memstep's sitecustomize calls): nothing happens, nothing is printed, 0. */
#include <stdio.h>

int memstep_pymem_install(void) __attribute__((weak));

int main(void) {
  if (memstep_pymem_install == NULL) {
    printf("libmemstep.so not loaded\n");
    return 1;
  }
  printf("install=%d\n", memstep_pymem_install());
  return 0;
}
