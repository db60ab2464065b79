// Programs that a profiler must not harm (issue 12, items 1-3), run by
// run_case.sh with and without libmemstep.so. Each prints "ok" and exits 0
// when the program behaved as it does without memstep.
//
//   pthread-exit          main ends with pthread_exit; a worker allocates and
//                         returns: the process must end (status 0), with its
//                         exit handlers run and its stdio buffers flushed into
//                         the program's descriptors (the worker's "ok" is
//                         still buffered when it returns).
//   fork-thread           a thread forks; in the child that thread returns
//                         (CPython's pattern in test_threading): the child
//                         must end with status 0 within 20 s.
//   fds                   closes what the environment passed in and re-execs
//                         itself; then it holds no descriptor but 0-2, and an
//                         exec'd child that is passed one pipe end holds only
//                         0-2 and that end (CPython's test_pass_fds fstat()s
//                         every number). memstep opens its files only for the
//                         moment of a write or read: a descriptor counts when
//                         two listings 50 ms apart (several flush periods)
//                         both show it.
//   closeall FILE         closes every descriptor >= 3, opens FILE (it gets a
//                         low number), allocates across several flush periods:
//                         FILE must stay empty.
//   closeall-exec         fork, close every descriptor >= 3 in the child, exec
//                         /bin/true (subprocess's close_fds).
//   dup2over FILE         dup2s FILE over every descriptor the program did not
//                         open, allocates across several flush periods: FILE
//                         must stay empty.
//   fdrace FILE           closes its stdout, then 4,000 times dup2s FILE onto
//                         1, checks after a pause that 1 is still FILE,
//                         allocates and closes 1 again, while memstep's writer
//                         flushes every 20 ms (CPython's test_subprocess
//                         swap_std_fds_with_one_closed): 1 must stay FILE and
//                         FILE must stay empty. A writer that opened the trace
//                         in the program's descriptor table would take number
//                         1 while it is free: the program's dup2 would point
//                         the trace write at FILE, and the writer's close
//                         would close the program's descriptor.
//   fdrace-fork FILE      the same in a fork child (the writer thread memstep
//                         starts there).
//   spawn                 vfork+exec, vfork+_exit, posix_spawn and
//                         posix_spawnp (with file actions) of /bin/sh
//                         children that exit with known statuses, 200 times,
//                         while two threads allocate (issue 12, item 6).
//   longjmp               setjmp/longjmp out of functions that allocate and
//                         free through the hooks, 200,000 times, sigsetjmp/
//                         siglongjmp out of a signal handler (not interrupting
//                         an allocation): no leak of memstep's state, the
//                         process goes on allocating.
//   thread-storm          4,000 threads created and exited (joinable and
//                         detached), each allocating, while the main thread
//                         allocates; then 8 threads each fork a child that
//                         allocates and exits.
//   signals               prints every signal's disposition, then raises
//                         SIGUSR1 and SIGUSR2 in fork children: the output
//                         must equal the run without memstep (memstep installs
//                         no handler unless MEMSTEP_SNAPSHOT_SIGNAL asks).

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void Fail(const char* what) {
  fprintf(stderr, "FAIL: %s (errno %d)\n", what, errno);
  exit(1);
}

static void* volatile g_sink;

// Allocates and frees `n` blocks; keeps every 16th.
static void Churn(int n) {
  for (int i = 0; i < n; ++i) {
    void* p = malloc((size_t)(64 + (i % 64) * 32));
    if (p == NULL) Fail("malloc");
    memset(p, 1, 64);
    g_sink = p;
    if (i % 16 != 0) free(p);
  }
}

static void SleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// ---- pthread-exit ----

static void* Worker(void* arg) {
  (void)arg;
  Churn(20000);
  SleepMs(100);
  Churn(20000);
  printf("ok\n");  // left in the buffer: the exit of the last thread flushes it
  return NULL;
}

static void AtExit(void) {
  static const char kLine[] = "atexit ok\n";
  if (write(1, kLine, sizeof(kLine) - 1) != (ssize_t)(sizeof(kLine) - 1)) _exit(3);
}

static int PthreadExit(void) {
  Churn(1000);
  atexit(AtExit);
  pthread_t t;
  if (pthread_create(&t, NULL, Worker, NULL) != 0) Fail("pthread_create");
  pthread_exit(NULL);
}

// ---- fork-thread ----

static void* Forker(void* arg) {
  int* status = (int*)arg;
  Churn(1000);
  pid_t pid = fork();
  if (pid < 0) Fail("fork");
  if (pid == 0) {
    Churn(1000);
    return NULL;  // the child's only thread returns: the child must end, status 0
  }
  for (int waited = 0; waited < 2000; ++waited) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return NULL;
    if (r < 0) Fail("waitpid");
    SleepMs(10);
  }
  kill(pid, SIGKILL);
  waitpid(pid, status, 0);
  fprintf(stderr, "FAIL: the forked child did not end within 20 s\n");
  exit(1);
}

static int ForkThread(void) {
  int status = -1;
  pthread_t t;
  if (pthread_create(&t, NULL, Forker, &status) != 0) Fail("pthread_create");
  pthread_join(t, NULL);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "FAIL: child status %#x\n", status);
    return 1;
  }
  printf("ok\n");
  return 0;
}

// ---- fds ----

static void CloseFrom(int lowest);

// Calls fn(fd, link target) for every open descriptor but the listing's own.
static void ForEachFd(void (*fn)(int, const char*, void*), void* ctx) {
  DIR* d = opendir("/proc/self/fd");
  if (d == NULL) Fail("opendir /proc/self/fd");
  int self = dirfd(d);
  int fds[4096];
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL && n < 4096) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int fd = atoi(e->d_name);
    if (fd != self) fds[n++] = fd;
  }
  closedir(d);
  for (int i = 0; i < n; ++i) {
    char path[64], target[4096];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[i]);
    ssize_t len = readlink(path, target, sizeof(target) - 1);
    if (len < 0) continue;  // closed meanwhile
    target[len] = '\0';
    fn(fds[i], target, ctx);
  }
}

// Descriptors but 0-2 and `allowed`, as (number, target) of one listing.
struct FdList {
  int allowed;
  int n;
  int fd[256];
  char target[256][128];
};

static void Collect(int fd, const char* target, void* ctx) {
  struct FdList* l = (struct FdList*)ctx;
  if (fd <= 2 || fd == l->allowed || l->n >= 256) return;
  l->fd[l->n] = fd;
  snprintf(l->target[l->n], sizeof(l->target[0]), "%s", target);
  l->n++;
}

// Descriptors the program does not own that two listings 50 ms apart both
// show.
static int UnexpectedFds(int allowed) {
  static struct FdList first, second;
  first.allowed = second.allowed = allowed;
  first.n = second.n = 0;
  ForEachFd(Collect, &first);
  SleepMs(50);
  ForEachFd(Collect, &second);
  int errors = 0;
  for (int i = 0; i < first.n; ++i) {
    for (int j = 0; j < second.n; ++j) {
      if (first.fd[i] == second.fd[j] && strcmp(first.target[i], second.target[j]) == 0) {
        fprintf(stderr, "FAIL: unexpected descriptor %d -> %s\n", first.fd[i], first.target[i]);
        errors++;
      }
    }
  }
  return errors;
}

static int FdsChild(int passed) {
  Churn(1000);
  int errors = UnexpectedFds(passed);
  if (fcntl(passed, F_GETFD) < 0) Fail("the passed descriptor is not open");
  if (errors == 0) printf("child ok\n");
  return errors == 0 ? 0 : 1;
}

static int Fds(const char* self) {
  Churn(1000);
  SleepMs(50);  // a writer cycle or two
  if (UnexpectedFds(-1) != 0) return 1;
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) Fail("pipe2");
  if (fcntl(p[1], F_SETFD, 0) != 0) Fail("F_SETFD");  // passed, as pass_fds does
  char fd_s[16];
  snprintf(fd_s, sizeof(fd_s), "%d", p[1]);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) Fail("fork");
  if (pid == 0) {
    execl(self, self, "fds-child", fd_s, (char*)NULL);
    _exit(127);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid) Fail("waitpid");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  printf("ok\n");
  return 0;
}

// ---- closeall, closeall-exec, dup2over ----

static void CloseFrom(int lowest) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, (unsigned)lowest, ~0u, 0) == 0) return;
#endif
  for (int fd = lowest; fd < 65536; ++fd) close(fd);
}

static int ExpectEmpty(const char* file) {
  struct stat st;
  if (stat(file, &st) != 0) Fail("stat FILE");
  if (st.st_size != 0) {
    fprintf(stderr, "FAIL: %s received %lld bytes it was never sent\n", file,
            (long long)st.st_size);
    return 1;
  }
  printf("ok\n");
  return 0;
}

static int CloseAll(const char* file) {
  Churn(5000);
  SleepMs(50);
  CloseFrom(3);
  int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);  // takes 3
  if (fd < 0) Fail("open FILE");
  for (int i = 0; i < 10; ++i) {
    Churn(5000);
    SleepMs(20);
  }
  close(fd);
  return ExpectEmpty(file);
}

static int CloseAllExec(void) {
  Churn(5000);
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) Fail("fork");
  if (pid == 0) {
    Churn(1000);
    CloseFrom(3);
    Churn(1000);
    execl("/bin/true", "true", (char*)NULL);
    _exit(127);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid) Fail("waitpid");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  printf("ok\n");
  return 0;
}

struct Dup2Ctx {
  int file_fd;
  int count;
};

static void Dup2Over(int fd, const char* target, void* ctx) {
  struct Dup2Ctx* c = (struct Dup2Ctx*)ctx;
  (void)target;
  if (fd <= 2 || fd == c->file_fd) return;
  if (dup2(c->file_fd, fd) != fd) Fail("dup2");
  c->count++;
}

static int Dup2OverAll(const char* file) {
  Churn(5000);
  SleepMs(50);
  int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) Fail("open FILE");
  struct Dup2Ctx c = {fd, 0};
  ForEachFd(Dup2Over, &c);
  for (int i = 0; i < 10; ++i) {
    Churn(5000);
    SleepMs(20);
  }
  fprintf(stderr, "dup2 over %d descriptors\n", c.count);
  return ExpectEmpty(file);
}

// ---- fdrace, fdrace-fork ----

static int FdRace(const char* file) {
  int out = dup(1);  // the report goes there
  int fd = open(file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out < 0 || fd < 0) Fail("open FILE");
  struct stat want;
  if (fstat(fd, &want) != 0) Fail("fstat FILE");
  close(1);
  int lost = 0, closed = 0;
  const struct timespec pause = {0, 100000};  // 100 us
  for (int i = 0; i < 4000; ++i) {
    if (dup2(fd, 1) != 1) Fail("dup2");
    nanosleep(&pause, NULL);
    struct stat st;
    if (fstat(1, &st) != 0 || st.st_ino != want.st_ino || st.st_dev != want.st_dev) ++lost;
    Churn(20);
    if (close(1) != 0) ++closed;  // somebody closed it already
    nanosleep(&pause, NULL);
    nanosleep(&pause, NULL);
  }
  if (dup2(out, 1) != 1) Fail("dup2 back");
  close(out);
  if (lost != 0 || closed != 0) {
    fprintf(stderr,
            "FAIL: descriptor 1 was not the program's file %d times, closed under it %d times\n",
            lost, closed);
    return 1;
  }
  close(fd);
  return ExpectEmpty(file);
}

static int FdRaceFork(const char* file) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) Fail("fork");
  if (pid == 0) _exit(FdRace(file));
  int status;
  if (waitpid(pid, &status, 0) != pid) Fail("waitpid");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// ---- spawn ----

static volatile int g_stop;

static void* Allocator(void* arg) {
  (void)arg;
  while (!g_stop) Churn(1000);
  return NULL;
}

static int ExitStatus(pid_t pid) {
  int st;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) Fail("waitpid");
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

extern char** environ;

static int Spawn(void) {
  pthread_t th[2];
  for (int i = 0; i < 2; ++i) {
    if (pthread_create(&th[i], NULL, Allocator, NULL) != 0) Fail("pthread_create");
  }
  for (int i = 0; i < 200; ++i) {
    int want = i % 7;
    char code[32];
    snprintf(code, sizeof code, "exit %d", want);
    char* argv[] = {"sh", "-c", code, NULL};
    pid_t pid = vfork();
    if (pid == 0) {
      execv("/bin/sh", argv);
      _exit(127);
    }
    if (pid < 0) Fail("vfork");
    if (ExitStatus(pid) != want) Fail("vfork+exec status");
    pid = vfork();
    if (pid == 0) _exit(want + 1);
    if (pid < 0) Fail("vfork");
    if (ExitStatus(pid) != want + 1) Fail("vfork+_exit status");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ) != 0) Fail("posix_spawn");
    if (ExitStatus(pid) != want) Fail("posix_spawn status");
    if (posix_spawnp(&pid, "sh", &fa, NULL, argv, environ) != 0) Fail("posix_spawnp");
    if (ExitStatus(pid) != want) Fail("posix_spawnp status");
    posix_spawn_file_actions_destroy(&fa);
    Churn(200);
  }
  g_stop = 1;
  for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
  printf("ok\n");
  return 0;
}

// ---- longjmp ----

static jmp_buf g_jmp;
static sigjmp_buf g_sigjmp;

static void __attribute__((noinline)) AllocAndJump(int i) {
  void* p = malloc((size_t)(32 + i % 2000));
  if (p == NULL) Fail("malloc");
  memset(p, 2, 16);
  char* q = strdup("a string that goes");
  free(q);
  if (i % 3 == 0) {
    free(p);
  } else {
    g_sink = p;  // leaked on purpose: the jump skips nothing of memstep's
    free(p);
  }
  longjmp(g_jmp, 1);
}

static void OnUsr1(int sig) {
  (void)sig;
  siglongjmp(g_sigjmp, 1);
}

static int LongJmp(void) {
  for (volatile int i = 0; i < 200000; ++i) {
    if (setjmp(g_jmp) == 0) AllocAndJump(i);
  }
  signal(SIGUSR1, OnUsr1);
  for (volatile int i = 0; i < 2000; ++i) {
    if (sigsetjmp(g_sigjmp, 1) == 0) {
      Churn(10);
      raise(SIGUSR1);
      Fail("siglongjmp did not jump");
    }
  }
  Churn(20000);  // allocation goes on, sampled and counted
  printf("ok\n");
  return 0;
}

// ---- thread-storm ----

static void* Short(void* arg) {
  Churn((int)(intptr_t)arg);
  return NULL;
}

static void* ForkOnce(void* arg) {
  (void)arg;
  pid_t pid = fork();
  if (pid == 0) {
    Churn(2000);
    _exit(3);
  }
  if (pid < 0) Fail("fork");
  if (ExitStatus(pid) != 3) Fail("fork child status");
  return NULL;
}

static int ThreadStorm(void) {
  pthread_attr_t detached;
  pthread_attr_init(&detached);
  pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
  for (int round = 0; round < 500; ++round) {
    pthread_t th[4];
    for (int i = 0; i < 4; ++i) {
      if (pthread_create(&th[i], NULL, Short, (void*)(intptr_t)(50 + i * 20)) != 0) {
        Fail("pthread_create");
      }
    }
    for (int i = 0; i < 4; ++i) {
      pthread_t d;
      if (pthread_create(&d, &detached, Short, (void*)(intptr_t)20) != 0) Fail("detached");
    }
    Churn(100);
    for (int i = 0; i < 4; ++i) pthread_join(th[i], NULL);
  }
  pthread_t f[8];
  for (int i = 0; i < 8; ++i) {
    if (pthread_create(&f[i], NULL, ForkOnce, NULL) != 0) Fail("pthread_create");
  }
  for (int i = 0; i < 8; ++i) pthread_join(f[i], NULL);
  SleepMs(200);  // the last detached threads end
  printf("ok\n");
  return 0;
}

// Every signal's disposition, printed, then SIGUSR1 and SIGUSR2 raised in
// fork children: run_case.sh compares the output with the run without
// memstep, so a handler memstep installed, or a signal it swallows, fails.
static int Signals(void) {
  Churn(20);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction old;
    if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &old) != 0) continue;
    const int dfl = (old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_DFL;
    const int ign = (old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_IGN;
    printf("signal %d: %s\n", sig, dfl ? "default" : ign ? "ignored" : "handled");
  }
  const int raised[] = {SIGUSR1, SIGUSR2};
  for (int i = 0; i < 2; ++i) {
    fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) Fail("fork");
    if (pid == 0) {
      raise(raised[i]);
      _exit(0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) Fail("waitpid");
    printf("raise(%d): %s %d\n", raised[i], WIFSIGNALED(st) ? "killed by" : "exited",
           WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
  printf("ok\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s CASE [ARGS]\n", argv[0]);
    return 2;
  }
  const char* c = argv[1];
  if (strcmp(c, "pthread-exit") == 0) return PthreadExit();
  if (strcmp(c, "fork-thread") == 0) return ForkThread();
  if (strcmp(c, "fds") == 0) {  // start from 0-2 only
    CloseFrom(3);
    execl(argv[0], argv[0], "fds-clean", (char*)NULL);
    Fail("execl");
  }
  if (strcmp(c, "fds-clean") == 0) return Fds(argv[0]);
  if (strcmp(c, "fds-child") == 0 && argc > 2) return FdsChild(atoi(argv[2]));
  if (strcmp(c, "closeall") == 0 && argc > 2) return CloseAll(argv[2]);
  if (strcmp(c, "closeall-exec") == 0) return CloseAllExec();
  if (strcmp(c, "dup2over") == 0 && argc > 2) return Dup2OverAll(argv[2]);
  if (strcmp(c, "fdrace") == 0 && argc > 2) return FdRace(argv[2]);
  if (strcmp(c, "fdrace-fork") == 0 && argc > 2) return FdRaceFork(argv[2]);
  if (strcmp(c, "spawn") == 0) return Spawn();
  if (strcmp(c, "longjmp") == 0) return LongJmp();
  if (strcmp(c, "thread-storm") == 0) return ThreadStorm();
  if (strcmp(c, "signals") == 0) return Signals();
  fprintf(stderr, "unknown case %s\n", c);
  return 2;
}
