// Runs an aarch64 program under qemu-user as if it were a native one, so that
// the preload test scripts, which start programs as `env LD_PRELOAD=LIB PROG`,
// run aarch64 programs unchanged (tests/aarch64/cross_check.sh).
//
// cross_check.sh installs this (host, static) program as PROG and the aarch64
// program beside it as PROG.aarch64. Static, so that the host's loader never
// tries to preload the aarch64 LIB into it. It moves LD_PRELOAD and
// LD_LIBRARY_PATH out of its environment into qemu's -E options, where only
// the guest's loader reads them (qemu itself is a dynamic host program), and
// execs `qemu-aarch64 PROG.aarch64 ARGS...` (no fork: the pid a script waits
// for or kills is the program's). qemu takes the aarch64 sysroot from
// QEMU_LD_PREFIX, which the script exports.

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
  static char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 16);
  if (n <= 0) {
    perror("qemu_exec: /proc/self/exe");
    return 127;
  }
  memcpy(self + n, ".aarch64", sizeof(".aarch64"));

  static const char* const kMoved[] = {"LD_PRELOAD", "LD_LIBRARY_PATH"};
  static char opts[2][8192];
  char** args = calloc((size_t)argc + 8, sizeof(char*));
  if (args == NULL) return 127;
  int k = 0;
  const char* qemu = getenv("MEMSTEP_QEMU");
  args[k++] = (char*)(qemu != NULL ? qemu : "qemu-aarch64");
  for (int i = 0; i < 2; ++i) {
    const char* v = getenv(kMoved[i]);
    if (v == NULL) continue;
    snprintf(opts[i], sizeof(opts[i]), "%s=%s", kMoved[i], v);
    args[k++] = (char*)"-E";
    args[k++] = opts[i];
    unsetenv(kMoved[i]);
  }
  args[k++] = self;
  for (int i = 1; i < argc; ++i) args[k++] = argv[i];
  args[k] = NULL;
  execvp(args[0], args);
  fprintf(stderr, "qemu_exec: cannot run %s: %s\n", args[0], strerror(errno));
  return 127;
}
