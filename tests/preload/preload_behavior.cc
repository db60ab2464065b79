// Behaviour tests of libmemstep.so, run under LD_PRELOAD by run_case.sh.
// Each subcommand exercises one area and exits 0 on success; a failed CHECK
// prints the line and exits 1. The library must be invisible: every return
// value, errno and out-parameter is what glibc alone would give.
//
//   basic     every hooked function, return values, errno, alignment,
//             malloc_usable_size, realloc contents (run at T = 1 and default)
//   threads   16 threads allocating, with step/stage markers
//   dlopen    dlopen/dlclose loop of a test library while 4 threads allocate
//   dlstress LIB SECONDS  soak: 16 dlopen/dlclose threads + 8 allocating
//   signal    signal handlers that allocate, delivered during allocation
//   fork      the child allocates and exits; prints "child PID"
//   exitrace  exit() while detached threads allocate
//   forkstorm 40 forks while 4 threads allocate
//   exec      execs itself ("basic") once: two traces for one pid
//   api       steps, nested stages and counters
//   spin      allocates until killed; prints "ready" once chunks are on disk
//   stall     150 steps of sampled churn with stages, epochs and counters, run
//             with the writer stalled (MEMSTEP_TEST_WRITER_STALL_MS): the
//             rings overflow, and no step, stage or epoch record may be lost

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include "memstep/memstep.h"

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

namespace {

bool Aligned(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

void Fill(void* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(seed + i);
}
bool Verify(const void* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) {
    if (static_cast<const uint8_t*>(p)[i] != static_cast<uint8_t>(seed + i)) return false;
  }
  return true;
}

__attribute__((noinline)) void BasicOnce(size_t size) {
  // malloc / usable size / free
  void* p = malloc(size);
  CHECK(p != nullptr);
  CHECK(malloc_usable_size(p) >= size);
  Fill(p, size, 7);
  CHECK(Verify(p, size, 7));
  free(p);
  // calloc zeroes, also for reused blocks
  for (int k = 0; k < 3; ++k) {
    uint8_t* c = static_cast<uint8_t*>(calloc(size, 1));
    CHECK(c != nullptr);
    for (size_t i = 0; i < size; ++i) CHECK(c[i] == 0);
    memset(c, 0xAB, size);
    free(c);
  }
  // realloc keeps contents, both directions, across size classes
  void* r = malloc(size);
  Fill(r, size, 3);
  void* r2 = realloc(r, size * 3 + 100);
  CHECK(r2 != nullptr);
  CHECK(Verify(r2, size, 3));
  CHECK(malloc_usable_size(r2) >= size * 3 + 100);
  void* r3 = realloc(r2, size / 2 + 1);
  CHECK(r3 != nullptr);
  CHECK(Verify(r3, size / 2 + 1, 3));
  free(r3);
  // reallocarray
  void* ra = reallocarray(nullptr, 16, size);
  CHECK(ra != nullptr);
  Fill(ra, 16 * size, 9);
  void* ra2 = reallocarray(ra, 32, size);
  CHECK(ra2 != nullptr && Verify(ra2, 16 * size, 9));
  free(ra2);
  // aligned family
  for (size_t a = 16; a <= 8192; a *= 2) {
    void* m = nullptr;
    CHECK(posix_memalign(&m, a, size) == 0);
    CHECK(m != nullptr && Aligned(m, a));
    CHECK(malloc_usable_size(m) >= size);
    Fill(m, size, 1);
    free(m);
    void* aa = aligned_alloc(a, (size + a - 1) / a * a);
    CHECK(aa != nullptr && Aligned(aa, a));
    free(aa);
    void* ma = memalign(a, size);
    CHECK(ma != nullptr && Aligned(ma, a));
    free(ma);
  }
  void* v = valloc(size);
  CHECK(v != nullptr && Aligned(v, 4096));
  free(v);
  void* pv = pvalloc(size);
  CHECK(pv != nullptr && Aligned(pv, 4096));
  CHECK(malloc_usable_size(pv) >= ((size + 4095) & ~size_t{4095}));
  free(pv);
}

int Basic() {
  // Error paths pass through unchanged.
  void* m = reinterpret_cast<void*>(0x1234);
  errno = 0;
  CHECK(posix_memalign(&m, 3, 64) == EINVAL);
  CHECK(m == reinterpret_cast<void*>(0x1234));  // out-parameter untouched
  CHECK(posix_memalign(&m, 4, 64) == EINVAL);   // not a multiple of sizeof(void*)
  CHECK(errno == 0);                            // posix_memalign does not set errno
  volatile size_t huge = SIZE_MAX / 2;          // volatile: no compile-time size warnings
  errno = 0;
  CHECK(reallocarray(nullptr, huge, 3) == nullptr);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(calloc(huge, 3) == nullptr);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(malloc(huge * 2 - 4096) == nullptr);
  CHECK(errno == ENOMEM);
  // errno is preserved across successful calls.
  errno = 4242;
  void* keep = malloc(100);
  free(keep);
  void* big = malloc(3 << 20);
  free(big);
  CHECK(errno == 4242);
  free(nullptr);
  CHECK(malloc_usable_size(nullptr) == 0);
  // realloc(p, 0) frees and returns NULL under glibc; malloc(0) is unique.
  void* z = malloc(0);
  CHECK(z != nullptr);
  CHECK(realloc(z, 0) == nullptr);
  void* rn = realloc(nullptr, 10);
  CHECK(rn != nullptr);
  free(rn);
  // Sizes across the region classes and S_always (1 MiB), small and big.
  const size_t sizes[] = {1,       8,
                          16,      17,
                          24,      100,
                          1000,    4095,
                          4096,    65536,
                          100000,  (1 << 20) - 16,
                          1 << 20, (1 << 20) + 1,
                          3 << 20};
  for (int rep = 0; rep < 20; ++rep) {
    for (size_t s : sizes) {
      if (s < 65536 || rep < 2) BasicOnce(s);
    }
  }
  // Many live blocks, freed in another order.
  void* live[2000];
  for (int i = 0; i < 2000; ++i) {
    live[i] = malloc(static_cast<size_t>(i * 37 % 5000 + 1));
    Fill(live[i], static_cast<size_t>(i * 37 % 5000 + 1), static_cast<uint8_t>(i));
  }
  for (int i = 1999; i >= 0; i -= 2) {
    CHECK(Verify(live[i], static_cast<size_t>(i * 37 % 5000 + 1), static_cast<uint8_t>(i)));
    free(live[i]);
  }
  for (int i = 0; i < 2000; i += 2) free(live[i]);
  // mmap family
  void* mm = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(mm != MAP_FAILED);
  memset(mm, 1, 1 << 20);
  void* mr = mremap(mm, 1 << 20, 4 << 20, MREMAP_MAYMOVE);
  CHECK(mr != MAP_FAILED);
  CHECK(static_cast<uint8_t*>(mr)[100] == 1);
  CHECK(munmap(static_cast<char*>(mr) + 4096, 4096) == 0);  // partial
  CHECK(munmap(mr, 4 << 20) == 0);
  errno = 0;
  CHECK(mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, -1, 0) == MAP_FAILED);  // no fd
  CHECK(errno == EBADF);
  errno = 0;
  CHECK(munmap(reinterpret_cast<void*>(1), 4096) == -1);
  CHECK(errno == EINVAL);
  void* m64 = mmap64(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m64 != MAP_FAILED);
  CHECK(munmap(m64, 8192) == 0);
  // dlopen errors pass through.
  CHECK(dlopen("/nonexistent/libnothing.so", RTLD_NOW) == nullptr);
  CHECK(dlerror() != nullptr);
  printf("basic ok\n");
  return 0;
}

// ---- threads ----

std::atomic<int> g_ready{0};

void* ThreadWork(void* arg) {
  uintptr_t id = reinterpret_cast<uintptr_t>(arg);
  void* keep[64] = {};
  for (int i = 0; i < 200000; ++i) {
    size_t s = static_cast<size_t>((i * 131 + id * 17) % 2048 + 1);
    int slot = i & 63;
    free(keep[slot]);
    keep[slot] = malloc(s);
    CHECK(keep[slot] != nullptr);
    static_cast<char*>(keep[slot])[0] = 1;
    if (i % 50000 == 0) {
      void* big = malloc(2 << 20);
      CHECK(big != nullptr);
      free(big);
    }
  }
  for (void* p : keep) free(p);
  return nullptr;
}

int Threads() {
  pthread_t th[16];
  MEMSTEP_STEP_BEGIN(1);
  MEMSTEP_STAGE_BEGIN("threads");
  for (uintptr_t i = 0; i < 16; ++i)
    CHECK(pthread_create(&th[i], nullptr, ThreadWork, reinterpret_cast<void*>(i)) == 0);
  for (auto& t : th) CHECK(pthread_join(t, nullptr) == 0);
  MEMSTEP_STAGE_END("threads");
  MEMSTEP_STEP_END(1);
  printf("threads ok\n");
  return 0;
}

// ---- peakrace ----
// Threads allocate from ever new call stacks while the live bytes keep
// setting new run peaks: every writer cycle has a run-peak snapshot to write
// and stacks interned while it runs (a snapshot naming a stack the trace has
// not defined yet is the bug this case guards).

__attribute__((noinline)) void* PeakLeaf(size_t n) {
  void* p = malloc(n);
  asm volatile("" : : "r"(p) : "memory");
  return p;
}
__attribute__((noinline)) void* PeakA(unsigned bits, int depth, size_t n);
__attribute__((noinline)) void* PeakB(unsigned bits, int depth, size_t n);
// Each bit picks a function: 2^depth distinct return-address chains.
void* PeakA(unsigned bits, int depth, size_t n) {
  void* p = depth == 0   ? PeakLeaf(n)
            : (bits & 1) ? PeakB(bits >> 1, depth - 1, n)
                         : PeakA(bits >> 1, depth - 1, n);
  asm volatile("" : : "r"(p) : "memory");  // no tail call: the frame stays on the stack
  return p;
}
void* PeakB(unsigned bits, int depth, size_t n) {
  void* p = depth == 0   ? PeakLeaf(n)
            : (bits & 1) ? PeakA(bits >> 1, depth - 1, n)
                         : PeakB(bits >> 1, depth - 1, n);
  asm volatile("" : : "r"(p) : "memory");
  return p;
}

void* PeakWork(void* arg) {
  unsigned id = static_cast<unsigned>(reinterpret_cast<uintptr_t>(arg));
  for (unsigned i = 0; i < 4096; ++i) {
    void* p = PeakA(i * 8 + id, 15, 64 + (i & 255));  // kept: the live bytes only rise
    CHECK(p != nullptr);
  }
  return nullptr;
}

int PeakRace() {
  pthread_t th[8];
  MEMSTEP_STEP_BEGIN(1);
  for (uintptr_t i = 0; i < 8; ++i)
    CHECK(pthread_create(&th[i], nullptr, PeakWork, reinterpret_cast<void*>(i)) == 0);
  for (auto& t : th) CHECK(pthread_join(t, nullptr) == 0);
  MEMSTEP_STEP_END(1);
  printf("peakrace ok\n");
  return 0;
}

// ---- dlopen storm ----

std::atomic<bool> g_stop{false};

void* Allocator(void*) {
  while (!g_stop.load()) {
    for (int i = 0; i < 1000; ++i) {
      void* p = malloc(static_cast<size_t>(i % 700 + 1));
      CHECK(p != nullptr);
      free(p);
    }
  }
  return nullptr;
}

int DlopenStorm(const char* lib) {
  pthread_t th[4];
  for (auto& t : th) CHECK(pthread_create(&t, nullptr, Allocator, nullptr) == 0);
  for (int i = 0; i < 300; ++i) {
    void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != nullptr);
    auto fn = reinterpret_cast<size_t (*)(size_t)>(dlsym(h, "memstep_test_dso_work"));
    CHECK(fn != nullptr);
    CHECK(fn(100) == 100);
    CHECK(dlclose(h) == 0);
  }
  g_stop = true;
  for (auto& t : th) CHECK(pthread_join(t, nullptr) == 0);
  printf("dlopen ok\n");
  return 0;
}

// dlstress: 16 threads dlopen/dlclose in a loop while 8 threads allocate
// (an allocation storm), for `seconds`: 30 in ctest (preload.dlstress), 600
// as the soak of docs/benchmarks-other.md (issue 12, item 6).
void* DlLoop(void* lib) {
  while (!g_stop.load()) {
    void* h = dlopen(static_cast<const char*>(lib), RTLD_NOW | RTLD_LOCAL);
    CHECK(h != nullptr);
    CHECK(dlclose(h) == 0);
  }
  return nullptr;
}

int DlStress(const char* lib, int seconds) {
  pthread_t th[24];
  for (int i = 0; i < 24; ++i) {
    CHECK(pthread_create(&th[i], nullptr, i < 16 ? DlLoop : Allocator, const_cast<char*>(lib)) ==
          0);
  }
  sleep(static_cast<unsigned>(seconds));  // duration of the soak, not synchronisation
  g_stop = true;
  for (auto& t : th) CHECK(pthread_join(t, nullptr) == 0);
  printf("dlstress ok\n");
  return 0;
}

// ---- signals ----

std::atomic<int> g_signals{0};

void Handler(int) {
  // Not async-signal-safe in general, but programs do it; memstep must not
  // deadlock or corrupt anything when it happens inside one of its hooks.
  int saved = errno;
  void* p = malloc(64);
  if (p != nullptr) static_cast<char*>(p)[0] = 1;
  free(p);
  g_signals.fetch_add(1);
  errno = saved;
}

int Signals() {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = Handler;
  sa.sa_flags = SA_RESTART;
  CHECK(sigaction(SIGPROF, &sa, nullptr) == 0);
  struct itimerval it = {{0, 200}, {0, 200}};
  CHECK(setitimer(ITIMER_PROF, &it, nullptr) == 0);
  int target = 200;
  for (long i = 0; g_signals.load() < target; ++i) {
    void* p = malloc(static_cast<size_t>(i % 5000 + 1));
    CHECK(p != nullptr);
    free(p);
    CHECK(i < 2000000000L);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_PROF, &off, nullptr);
  printf("signal ok %d\n", g_signals.load());
  return 0;
}

// exitrace: exit() while 4 detached threads keep allocating through the final
// flush and the static destructors.
int ExitRace() {
  for (int i = 0; i < 4; ++i) {
    pthread_t t;
    CHECK(pthread_create(&t, nullptr, Allocator, nullptr) == 0);
    CHECK(pthread_detach(t) == 0);
  }
  for (int i = 0; i < 200000; ++i) free(malloc(static_cast<size_t>(i % 1000 + 1)));
  printf("exitrace ok\n");
  fflush(stdout);
  exit(0);
}

// ---- fork / exec ----

int Fork() {
  void* before = malloc(5 << 20);  // live across fork
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    for (int i = 0; i < 1000; ++i) free(malloc(static_cast<size_t>(i + 1)));
    void* big = malloc(2 << 20);
    free(big);
    free(before);
    exit(0);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  free(before);
  printf("child %d\n", static_cast<int>(pid));
  return 0;
}

// forkstorm: 40 forks while 4 threads allocate (they may hold memstep locks
// at fork time); every child allocates, samples and exits.
int ForkStorm() {
  pthread_t th[4];
  for (auto& t : th) CHECK(pthread_create(&t, nullptr, Allocator, nullptr) == 0);
  for (int i = 0; i < 40; ++i) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      for (int k = 0; k < 20000; ++k) free(malloc(static_cast<size_t>(k % 4000 + 1)));
      free(malloc(2 << 20));
      exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  g_stop = true;
  for (auto& t : th) CHECK(pthread_join(t, nullptr) == 0);
  printf("forkstorm ok\n");
  return 0;
}

int Exec(const char* self) {
  void* p = malloc(3 << 20);
  free(p);
  fflush(stdout);
  execl(self, self, "basic", static_cast<char*>(nullptr));
  perror("execl");
  return 1;
}

// ---- kill -9 ----
// Allocates forever; prints "ready" once its trace (in $MEMSTEP_DIR) holds a
// few flushed chunks, so the test can kill -9 it at a known point.
size_t TraceBytes(const char* dir) {
  size_t total = 0;
  DIR* d = opendir(dir);
  if (d == nullptr) return 0;
  while (struct dirent* e = readdir(d)) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    struct stat st;
    if (strncmp(e->d_name, "memstep.", 8) == 0 && stat(path, &st) == 0) total += st.st_size;
  }
  closedir(d);
  return total;
}

int Spin() {
  const char* dir = getenv("MEMSTEP_DIR");
  CHECK(dir != nullptr);
  bool ready = false;
  void* keep[256] = {};
  for (uint64_t i = 0;; ++i) {
    int slot = static_cast<int>(i & 255);
    free(keep[slot]);
    keep[slot] = malloc(static_cast<size_t>(i % 3000 + 1));
    if (i % 100000 == 0) {
      MEMSTEP_STEP_BEGIN(i / 100000);
      if (!ready && TraceBytes(dir) > 8192) {
        printf("ready\n");
        fflush(stdout);
        ready = true;
      }
    }
  }
}

// ---- api ----

int Api() {
  for (uint64_t step = 0; step < 5; ++step) {
    MEMSTEP_STEP_BEGIN(step);
    MEMSTEP_STAGE_BEGIN("forward");
    void* act = malloc(4 << 20);
    MEMSTEP_STAGE_BEGIN("inner");
    void* tmp = malloc(2 << 20);
    free(tmp);
    MEMSTEP_STAGE_END("inner");
    MEMSTEP_STAGE_END("forward");
    MEMSTEP_STAGE_BEGIN("backward");
    free(act);
    MEMSTEP_STAGE_END("backward");
    MEMSTEP_COUNTER("torch.allocated", static_cast<int64_t>(step) * 100 - 7);
    MEMSTEP_STEP_END(step);
  }
  MEMSTEP_STEP_BEGIN(5);
  MEMSTEP_STEP_BEGIN(6);  // implicitly ends step 5
  MEMSTEP_STEP_END(6);
  printf("api ok\n");
  return 0;
}

// stall: every step churns ~1 MiB in 1 KiB blocks (at T = 4096 about 900
// sampled allocations and their frees: ~33 KB of records a step, so a 256 KiB
// ring fills within ~8 steps when the writer does not drain it).
int Stall() {
  constexpr uint64_t kSteps = 150;
  for (uint64_t step = 0; step < kSteps; ++step) {
    if (step % 50 == 0) MEMSTEP_EPOCH_BEGIN(step / 50);
    MEMSTEP_STEP_BEGIN(step);
    MEMSTEP_STAGE_BEGIN("churn");
    for (int i = 0; i < 1000; ++i) {
      void* p = malloc(static_cast<size_t>(1000 + i % 97));
      CHECK(p != nullptr);
      static_cast<volatile char*>(p)[0] = 1;
      free(p);
    }
    MEMSTEP_STAGE_END("churn");
    MEMSTEP_COUNTER("stall.step", step);
    MEMSTEP_STEP_END(step);
  }
  printf("stall ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s basic|threads|dlopen LIB|signal|fork|exec|api\n", argv[0]);
    return 2;
  }
  const char* cmd = argv[1];
  if (strcmp(cmd, "basic") == 0) return Basic();
  if (strcmp(cmd, "threads") == 0) return Threads();
  if (strcmp(cmd, "dlopen") == 0 && argc > 2) return DlopenStorm(argv[2]);
  if (strcmp(cmd, "dlstress") == 0 && argc > 3) return DlStress(argv[2], atoi(argv[3]));
  if (strcmp(cmd, "signal") == 0) return Signals();
  if (strcmp(cmd, "exitrace") == 0) return ExitRace();
  if (strcmp(cmd, "fork") == 0) return Fork();
  if (strcmp(cmd, "forkstorm") == 0) return ForkStorm();
  if (strcmp(cmd, "exec") == 0) return Exec(argv[0]);
  if (strcmp(cmd, "api") == 0) return Api();
  if (strcmp(cmd, "spin") == 0) return Spin();
  if (strcmp(cmd, "stall") == 0) return Stall();
  if (strcmp(cmd, "peakrace") == 0) return PeakRace();
  fprintf(stderr, "unknown command %s\n", cmd);
  return 2;
}
