// refuse_syscalls NAME[,NAME...] PROGRAM [ARGS...]
//
// Runs PROGRAM under a seccomp filter that makes the named system calls fail
// with EPERM, as a container's seccomp profile does (older Docker and podman
// profiles refuse close_range; Docker's refuses unshare without
// CAP_SYS_ADMIN). Names: close_range, unshare, pidfd_open, pidfd_getfd.
// Used by run_case.sh to drive libmemstep.so's fallbacks (preload/core/fds.h).

#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define THIS_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define THIS_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "x86-64 and aarch64 only"
#endif

static int Number(const char* name, size_t n) {
  static const struct {
    const char* name;
    int nr;
  } kCalls[] = {
      {"close_range", 436}, {"unshare", SYS_unshare}, {"pidfd_open", 434}, {"pidfd_getfd", 438}};
  for (size_t i = 0; i < sizeof(kCalls) / sizeof(kCalls[0]); ++i) {
    if (strlen(kCalls[i].name) == n && strncmp(kCalls[i].name, name, n) == 0) return kCalls[i].nr;
  }
  return -1;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s NAME[,NAME...] PROGRAM [ARGS...]\n", argv[0]);
    return 2;
  }
  int nrs[8];
  int count = 0;
  for (const char* p = argv[1]; *p != '\0' && count < 8;) {
    const char* end = strchr(p, ',');
    size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
    int nr = Number(p, n);
    if (nr < 0) {
      fprintf(stderr, "refuse_syscalls: unknown system call '%.*s'\n", (int)n, p);
      return 2;
    }
    nrs[count++] = nr;
    p += n;
    if (*p == ',') ++p;
  }
  // Architecture check, then one compare per refused call.
  struct sock_filter prog[4 + 2 * 8 + 1];
  int i = 0;
  prog[i++] =
      (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  prog[i++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_AUDIT_ARCH, 1, 0);
  prog[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  prog[i++] =
      (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
  for (int k = 0; k < count; ++k) {
    prog[i++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nrs[k], 0, 1);
    prog[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
  }
  prog[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  struct sock_fprog fprog = {(unsigned short)i, prog};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0) {
    perror("refuse_syscalls: seccomp");
    return 2;
  }
  execvp(argv[2], argv + 2);
  perror("refuse_syscalls: exec");
  return 127;
}
