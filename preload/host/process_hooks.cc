// Hooks on calls that end the process image without running atexit handlers
// or library destructors: _exit/_Exit (os._exit in Python, which every
// multiprocessing / DataLoader worker ends with) and the exec family
// (execve, execv, execvp, execvpe, and execl, execlp, execle).
// Without them, a process ending this way loses up to one flush period of
// records, and its trace has no trailer.
//
// Contract: each hook flushes the rings (the final cycle, with the trailer,
// for _exit/_Exit; a plain cycle for exec, which may fail and return) and then
// calls the real function. Nothing is flushed when:
//  - recording is not active;
//  - the calling thread is inside memstep (reentrancy guard set, e.g. a signal
//    handler interrupted our slow path): our locks may be held;
//  - the caller is a vfork child (its pid is not the trace's): it shares the
//    parent's memory, and flushing would consume the parent's rings.
// Real functions are found with glibc's own dlsym(RTLD_NEXT) on first use
// (OwnDlsym: a dlsym interposer preloaded before memstep would answer
// relative to itself and hand back our own hook).

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/core/fds.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"

namespace memstep::preload {
namespace {

void FlushBeforeImageEnds(bool final) {
  if (g_state.load(std::memory_order_acquire) != kRecording) return;
  ThreadState& t = t_state;
  if (t.guard) return;
  if (static_cast<int>(syscall(SYS_getpid)) != g_trace_pid.load(std::memory_order_relaxed)) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  FlushCounters(&t);
  WriterCycle(final);
  FlushQueuedStderr();
}

template <typename Fn>
Fn Next(const char* name) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  return reinterpret_cast<Fn>(OwnDlsym(RTLD_NEXT, name));
}

using ExitFn = void (*)(int);
using ExecveFn = int (*)(const char*, char* const[], char* const[]);
using ExecvFn = int (*)(const char*, char* const[]);

}  // namespace
}  // namespace memstep::preload

using namespace memstep::preload;  // NOLINT: the hooks are the C ABI

MEMSTEP_EXPORT void _exit(int status) {
  FlushBeforeImageEnds(true);
  static ExitFn real = nullptr;
  if (real == nullptr) real = Next<ExitFn>("_exit");
  if (real != nullptr) real(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

MEMSTEP_EXPORT void _Exit(int status) {
  FlushBeforeImageEnds(true);
  static ExitFn real = nullptr;
  if (real == nullptr) real = Next<ExitFn>("_Exit");
  if (real != nullptr) real(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

MEMSTEP_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  FlushBeforeImageEnds(false);
  static ExecveFn real = nullptr;
  if (real == nullptr) real = Next<ExecveFn>("execve");
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return real(path, argv, envp);
}

MEMSTEP_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  FlushBeforeImageEnds(false);
  static ExecveFn real = nullptr;
  if (real == nullptr) real = Next<ExecveFn>("execvpe");
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return real(file, argv, envp);
}

MEMSTEP_EXPORT int execv(const char* path, char* const argv[]) {
  FlushBeforeImageEnds(false);
  static ExecvFn real = nullptr;
  if (real == nullptr) real = Next<ExecvFn>("execv");
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return real(path, argv);
}

MEMSTEP_EXPORT int execvp(const char* file, char* const argv[]) {
  FlushBeforeImageEnds(false);
  static ExecvFn real = nullptr;
  if (real == nullptr) real = Next<ExecvFn>("execvp");
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  return real(file, argv);
}

// The variadic forms, as glibc implements them: collect the arguments into an
// argv array on the stack, then call the vector form (our hook above).
namespace {
constexpr size_t kMaxExecArgs = 1 << 16;

size_t CountArgs(va_list ap) {
  size_t n = 1;  // arg0 was passed separately
  while (n <= kMaxExecArgs && va_arg(ap, char*) != nullptr) ++n;
  return n;
}
}  // namespace

#define MEMSTEP_COLLECT_ARGS(arg0, last_named, argv, n) \
  va_list count_ap;                                     \
  va_start(count_ap, last_named);                       \
  size_t n = CountArgs(count_ap);                       \
  va_end(count_ap);                                     \
  if (n > kMaxExecArgs) {                               \
    errno = E2BIG;                                      \
    return -1;                                          \
  }                                                     \
  char* argv[n + 1];                                    \
  argv[0] = const_cast<char*>(arg0);                    \
  va_list ap;                                           \
  va_start(ap, last_named);                             \
  for (size_t i = 1; i <= n; ++i) argv[i] = va_arg(ap, char*);

MEMSTEP_EXPORT int execl(const char* path, const char* arg0, ...) {
  MEMSTEP_COLLECT_ARGS(arg0, arg0, argv, n)
  va_end(ap);
  argv[n] = nullptr;
  return execv(path, argv);
}

MEMSTEP_EXPORT int execlp(const char* file, const char* arg0, ...) {
  MEMSTEP_COLLECT_ARGS(arg0, arg0, argv, n)
  va_end(ap);
  argv[n] = nullptr;
  return execvp(file, argv);
}

MEMSTEP_EXPORT int execle(const char* path, const char* arg0, ...) {
  MEMSTEP_COLLECT_ARGS(arg0, arg0, argv, n)
  char* const* envp = va_arg(ap, char* const*);  // after the terminating NULL
  va_end(ap);
  argv[n] = nullptr;
  return execve(path, argv, envp);
}
