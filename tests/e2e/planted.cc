// e2e_planted: the planted-fact programs of the end-to-end tests, one binary
// with a mode per scenario (argv[1]). Every allocation the tests assert on is
// made by a NOINLINE function with a distinctive name and distinctive sizes,
// so its site is found by function name and its totals are known exactly.
// The expected numbers live in planted_facts.h, shared with the tests.
//
// Modes (output on stdout, written with write(2), one fact per line):
//   sites            every host and mmap hook, exact facts at interval 1
//   sampled          large churn and leak sites for the sampling tolerance test
//   steps            10 steps with known per-stage peaks (one thread)
//   fork             parent and a fork child, each with its own site
//   fork-exit        the same, the child ending with _exit
//   exec             execs itself in mode exec-target
//   exec-target      the exec'd program's site
//   threads          16 threads, each its own planted function
//   dlopen DSO_PATH  dlopen/dlclose loop of DSO_PATH beside 4 allocating threads
//   stripped DSO     dlopen DSO (libplanted_stripped.so) and call its
//                    PlantedStrippedEntry, whose hidden callee allocates
//   signal           allocating signal handlers (a 200 us ITIMER_REAL and raise)
//   progress         steps forever, writing "step N" lines; the test kills it
//   oom [MIB]        limits its address space to what it has mapped + MIB
//                    (default 1024), then steps keeping 4 MiB each (touched)
//                    until malloc fails, prints the step and CLOCK_MONOTONIC
//                    in ns, then abort()s: an out-of-memory death
//   exit CODE        allocates the leak site, then exits with CODE
//   progressive      kProgSteps steps, each keeping kProgLeakBlocks blocks and
//                    churning; calls memstep_boost(kProgBoostSteps) inside
//                    step kProgBoostAt
//   quiet-thread     kQuietSteps steps; a worker thread allocates a little
//                    in each (PlantedQuietWork); memstep_boost inside step
//                    kQuietBoostAt
//   hunt LEAK SIZE   kHuntSteps training-like steps keeping LEAK bytes per
//                    step in SIZE-byte objects (PlantedHuntLeak)
//   hunt LEAK SIZE LEAK2 SIZE2
//                    the same with a second leak of LEAK2 bytes per step in
//                    SIZE2-byte objects (PlantedHuntLeak2)
//   hunt LEAK SIZE LEAK2 SIZE2 STEPS FROM2
//                    the same for STEPS steps, the second leak from step FROM2
//   hunt-grow        the hunt's loop with a buffer reallocated larger every
//                    step (PlantedGrowBuffer) and blocks renewed every
//                    kRenewEvery steps (PlantedRenew)
//   churn LEAK       kHotSteps steps with a hot allocator (PlantedChurnHot)
//                    and LEAK bytes kept per step (PlantedChurnLeak)
//   rss-frag, rss-cache, rss-leak, rss-file
//                    kRssSteps steps whose RSS grows by heap fragmentation
//                    pinned by PlantedRssPin, by the top chunk (caching), or
//                    by a true leak (PlantedRssLeak)

#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "memstep/memstep.h"
#include "tests/e2e/planted_facts.h"

#define NOINLINE __attribute__((noinline))

namespace {

using namespace memstep::e2e::facts;  // NOLINT: the facts are this file's subject
inline void StageBegin(const char* name) { MEMSTEP_STAGE_BEGIN(name); }
inline void StageEnd(const char* name) { MEMSTEP_STAGE_END(name); }
inline void StepBegin(uint64_t step) { MEMSTEP_STEP_BEGIN(step); }
inline void StepEnd(uint64_t step) { MEMSTEP_STEP_END(step); }

// Keeps the compiler from eliding allocations whose results look unused.
inline void Escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

void Say(const char* fmt, long a, long b = 0) {
  char line[128];
  int n = snprintf(line, sizeof(line), fmt, a, b);
  if (n > 0) (void)!write(1, line, static_cast<size_t>(n));
}

std::vector<void*>& Kept() {
  static auto* kept = new std::vector<void*>();
  return *kept;
}

// ---- mode "sites" ---------------------------------------------------------

NOINLINE void PlantedLeak3000x1000() {
  for (int i = 0; i < kLeakCount; ++i) {
    void* p = malloc(kLeakSize);
    Escape(p);
    Kept().push_back(p);
  }
}

NOINLINE void PlantedChurn1000x777() {
  for (int i = 0; i < kChurnCount; ++i) {
    void* p = malloc(kChurnSize);
    Escape(p);
    free(p);
  }
}

NOINLINE void PlantedCalloc500x48x10() {
  for (int i = 0; i < kCallocCount; ++i) {
    void* p = calloc(kCallocN, kCallocElem);
    Escape(p);
    Kept().push_back(p);
  }
}

NOINLINE std::vector<void*> PlantedReallocSeed300x111() {
  std::vector<void*> blocks;
  blocks.reserve(kReallocCount);
  for (int i = 0; i < kReallocCount; ++i) {
    void* p = malloc(kReallocSeedSize);
    Escape(p);
    blocks.push_back(p);
  }
  return blocks;
}

NOINLINE void PlantedReallocGrow300x4321(std::vector<void*>* blocks) {
  for (void*& p : *blocks) {
    p = realloc(p, kReallocGrowSize);
    Escape(p);
    Kept().push_back(p);
  }
}

NOINLINE void PlantedPosixMemalign200x2048() {
  for (int i = 0; i < kMemalignCount; ++i) {
    void* p = nullptr;
    if (posix_memalign(&p, 64, kMemalignSize) != 0) abort();
    Escape(p);
    Kept().push_back(p);
  }
}

NOINLINE void PlantedAlignedAlloc150x4096() {
  for (int i = 0; i < kAlignedCount; ++i) {
    void* p = aligned_alloc(256, kAlignedSize);
    Escape(p);
    if (i < kAlignedFreed) {
      free(p);
    } else {
      Kept().push_back(p);
    }
  }
}

NOINLINE void PlantedNewArray200x1284() {
  for (int i = 0; i < kNewArrayCount; ++i) {
    auto* p = new uint32_t[kNewArrayElems];
    Escape(p);
    Kept().push_back(p);
  }
}

NOINLINE void PlantedMmapPartial10x64K() {
  for (int i = 0; i < kMmapPartialCount; ++i) {
    void* p =
        mmap(nullptr, kMmapPartialLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
    // Unmap the head: the mapping stays, smaller.
    if (munmap(p, kMmapPartialCut) != 0) abort();
  }
}

NOINLINE void PlantedMmapFull4x32K() {
  for (int i = 0; i < kMmapFullCount; ++i) {
    void* p =
        mmap(nullptr, kMmapFullLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
    if (munmap(p, kMmapFullLen) != 0) abort();
  }
}

NOINLINE char* PlantedReserve1G() {
  void* p =
      mmap(nullptr, kReserveLen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) abort();
  return static_cast<char*>(p);
}

NOINLINE void PlantedCommit8x256K(char* reserved) {
  for (int i = 0; i < kCommitCount; ++i) {
    char* part = reserved + 2 * i * kCommitLen;  // every other 256 KiB
    if (mprotect(part, kCommitLen, PROT_READ | PROT_WRITE) != 0) abort();
    part[0] = 1;
  }
}

NOINLINE void PlantedDecommit2(char* reserved) {
  for (int i = kCommitCount - kDecommitCount; i < kCommitCount; ++i) {
    if (mprotect(reserved + 2 * i * kCommitLen, kCommitLen, PROT_NONE) != 0) abort();
  }
}

int ModeSites() {
  PlantedLeak3000x1000();
  PlantedChurn1000x777();
  PlantedCalloc500x48x10();
  std::vector<void*> blocks = PlantedReallocSeed300x111();
  PlantedReallocGrow300x4321(&blocks);
  PlantedPosixMemalign200x2048();
  PlantedAlignedAlloc150x4096();
  PlantedNewArray200x1284();
  PlantedMmapPartial10x64K();
  PlantedMmapFull4x32K();
  char* reserved = PlantedReserve1G();  // kept: the reservation is live at exit
  PlantedCommit8x256K(reserved);
  PlantedDecommit2(reserved);
  // A file mapping's protection changes nothing memstep counts.
  if (mprotect(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(&ModeSites) & ~uintptr_t{4095}),
               4096, PROT_READ | PROT_EXEC) != 0) {
    abort();
  }
  Say("sites done %ld\n", static_cast<long>(Kept().size()));
  return 0;
}

// ---- mode "sampled" -------------------------------------------------------

NOINLINE void PlantedSampledChurn400MiB() {
  for (long i = 0; i < kSampledChurnCount; ++i) {
    void* p = malloc(kSampledChurnSize);
    Escape(p);
    free(p);
  }
}

NOINLINE void PlantedSampledLeak96MiB() {
  for (long i = 0; i < kSampledLeakCount; ++i) {
    void* p = malloc(kSampledLeakSize);
    Escape(p);
    Kept().push_back(p);
  }
}

NOINLINE void PlantedBigExact() {
  for (int i = 0; i < kBigCount; ++i) {
    void* p = malloc(kBigSize);
    Escape(p);
    if (i % 2 == 0) {
      free(p);
    } else {
      Kept().push_back(p);
    }
  }
}

int ModeSampled() {
  PlantedSampledChurn400MiB();
  PlantedSampledLeak96MiB();
  PlantedBigExact();
  return 0;
}

// ---- mode "steps" ---------------------------------------------------------

// Allocates n blocks of kStepBlock bytes (usable size == request size).
NOINLINE std::vector<void*> PlantedStepBlocks(int n) {
  std::vector<void*> v;
  v.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    void* p = malloc(kStepBlock);
    Escape(p);
    v.push_back(p);
  }
  return v;
}

NOINLINE void PlantedStepLeak(std::vector<void*>* kept) {
  std::vector<void*> v = PlantedStepBlocks(kStepLeakBlocks);
  kept->insert(kept->end(), v.begin(), v.end());
}

void FreeAll(std::vector<void*>* v) {
  for (void* p : *v) free(p);
  v->clear();
  v->shrink_to_fit();
}

int ModeSteps() {
  std::vector<void*> kept;
  kept.reserve(kSteps * kStepLeakBlocks);
  for (int step = 0; step < kSteps; ++step) {
    StepBegin(step);
    StageBegin("data");
    std::vector<void*> batch = PlantedStepBlocks(kStepBatchBlocks);
    StageEnd("data");
    StageBegin("forward");
    std::vector<void*> acts = PlantedStepBlocks(kStepActBlocks);
    StageEnd("forward");
    StageBegin("backward");
    std::vector<void*> grads = PlantedStepBlocks(kStepGradBlocks);
    FreeAll(&acts);
    StageEnd("backward");
    StageBegin("optimizer");
    PlantedStepLeak(&kept);
    StageEnd("optimizer");
    FreeAll(&grads);
    FreeAll(&batch);
    StepEnd(step);
  }
  Say("steps done %ld\n", kSteps);
  return 0;
}

// ---- mode "progressive" --------------------------------------------------

NOINLINE void PlantedProgLeak(std::vector<void*>* kept) {
  for (int i = 0; i < kProgLeakBlocks; ++i) {
    void* p = malloc(kProgLeakSize);
    memset(p, 1, 64);
    kept->push_back(p);
  }
}

NOINLINE void PlantedProgChurn() {
  for (int i = 0; i < kProgChurnBlocks; ++i) {
    void* p = malloc(kProgChurnSize);
    Escape(p);
    free(p);
  }
}

int ModeProgressive() {
  auto boost = reinterpret_cast<void (*)(uint32_t)>(dlsym(RTLD_DEFAULT, "memstep_boost"));
  std::vector<void*> kept;
  kept.reserve(kProgSteps * kProgLeakBlocks);
  for (int step = 0; step < kProgSteps; ++step) {
    StepBegin(step);
    if (step == kProgBoostAt && boost != nullptr) boost(kProgBoostSteps);
    PlantedProgChurn();
    PlantedProgLeak(&kept);
    StepEnd(step);
  }
  Say("progressive done %ld\n", kProgSteps);
  return 0;
}

// ---- mode "quiet-thread" -------------------------------------------------

NOINLINE void PlantedQuietWork() {
  void* blocks[kQuietBlocks];
  for (int i = 0; i < kQuietBlocks; ++i) {
    blocks[i] = malloc(kQuietSize);
    Escape(blocks[i]);
  }
  for (int i = 0; i < kQuietBlocks; ++i) free(blocks[i]);
}

int ModeQuietThread() {
  auto boost = reinterpret_cast<void (*)(uint32_t)>(dlsym(RTLD_DEFAULT, "memstep_boost"));
  std::atomic<long> go{-1}, done{-1};
  std::thread worker([&] {
    for (long s = 0; s < kQuietSteps; ++s) {
      while (go.load(std::memory_order_acquire) < s) sched_yield();
      PlantedQuietWork();
      done.store(s, std::memory_order_release);
    }
  });
  for (long step = 0; step < kQuietSteps; ++step) {
    StepBegin(step);
    if (step == kQuietBoostAt && boost != nullptr) boost(kQuietBoostSteps);
    go.store(step, std::memory_order_release);
    while (done.load(std::memory_order_acquire) < step) sched_yield();
    StepEnd(step);
  }
  worker.join();
  Say("quiet-thread done %ld\n", kQuietSteps);
  return 0;
}

// ---- mode "hunt" ---------------------------------------------------------
// A training-like loop for the leak hunt: kHuntSteps steps of about
// kHuntStepMs each (the hunt's CPU budget is a share of wall time); every
// step churns ~2.3 MiB of 16 B..4 KiB objects freed in the step, keeps 64
// buffers of 8 KiB for two steps (long-lived churn), and, when LEAK > 0,
// keeps LEAK bytes in objects of SIZE bytes (PlantedHuntLeak).

NOINLINE void PlantedHuntLeak(std::vector<void*>* kept, long bytes, long size) {
  for (long done = 0; done < bytes; done += size) {
    void* p = malloc(static_cast<size_t>(size));
    memset(p, 1, 16);
    kept->push_back(p);
  }
}

NOINLINE void PlantedHuntChurn(int step) {
  static void* pool[2][64];
  std::vector<void*> tmp;
  tmp.reserve(kHuntChurnBlocks);
  for (int i = 0; i < kHuntChurnBlocks; ++i) {
    void* p = malloc(16 + static_cast<size_t>((i * 131 + step * 17) % 4080));
    Escape(p);
    tmp.push_back(p);
  }
  for (void* p : tmp) free(p);
  for (void*& p : pool[step % 2]) {
    free(p);
    p = malloc(8192);
    Escape(p);
  }
}

// A second, smaller leak beside the first (a residual hunt's work).
NOINLINE void PlantedHuntLeak2(std::vector<void*>* kept, long bytes, long size) {
  for (long done = 0; done < bytes; done += size) {
    void* p = malloc(static_cast<size_t>(size));
    memset(p, 2, 16);
    kept->push_back(p);
  }
}

int ModeHunt(long leak, long size, long leak2 = 0, long size2 = 1, long steps = kHuntSteps,
             long from2 = 0) {
  std::vector<void*> kept;
  kept.reserve(static_cast<size_t>(steps * (leak / (size > 0 ? size : 1) + 1) +
                                   steps * (leak2 / (size2 > 0 ? size2 : 1) + 1)));
  for (int step = 0; step < steps; ++step) {
    StepBegin(step);
    StageBegin("forward");
    PlantedHuntChurn(step);
    if (leak > 0) PlantedHuntLeak(&kept, leak, size);
    if (leak2 > 0 && step >= from2) PlantedHuntLeak2(&kept, leak2, size2);
    StageEnd("forward");
    usleep(kHuntStepMs * 1000);
    StepEnd(step);
  }
  Say("hunt done %ld\n", steps);
  return 0;
}

// ---- mode "hunt-grow" ----------------------------------------------------

NOINLINE void* PlantedGrowBuffer(void* buf, int step) {
  const size_t n = static_cast<size_t>(step + 1) * kGrowPerStep;
  void* q = realloc(buf, n);
  if (q == nullptr) return buf;
  memset(static_cast<char*>(q) + n - kGrowPerStep, 2, kGrowPerStep);
  return q;
}

NOINLINE void PlantedRenew(void** blocks) {
  for (int i = 0; i < kRenewBlocks; ++i) {
    free(blocks[i]);
    blocks[i] = malloc(kRenewSize);
    memset(blocks[i], 4, 16);
  }
}

int ModeHuntGrow() {
  void* buf = nullptr;
  static void* renewed[kRenewBlocks];
  for (int step = 0; step < kHuntSteps; ++step) {
    StepBegin(step);
    StageBegin("forward");
    PlantedHuntChurn(step);
    buf = PlantedGrowBuffer(buf, step);
    if (step % kRenewEvery == 0) PlantedRenew(renewed);
    StageEnd("forward");
    usleep(kHuntStepMs * 1000);
    StepEnd(step);
  }
  Escape(buf);
  Say("hunt-grow done %ld\n", kHuntSteps);
  return 0;
}

// ---- modes "rss-frag", "rss-cache", "rss-leak" ----------------------------
// RSS growth explained (planted_facts.h has the shapes).

// A medium block (allocated earlier, touched), shrunk in place to its first
// kRssPinSize bytes, which are kept: glibc splits the chunk and frees the rest
// behind it, a hole between this kept block and the next block.
NOINLINE void* PlantedRssPin(void* medium) {
  void* q = realloc(medium, kRssPinSize);
  return q != nullptr ? q : medium;
}

NOINLINE void* PlantedRssLeak() {
  void* p = malloc(kRssLeakSize);
  memset(p, 3, kRssLeakSize);
  return p;
}

// Mode rss-file: the next kRssFileUnit bytes of a shared file mapping
// written per step.
int ModeRssFile() {
  const char* dir = getenv("TMPDIR");
  char path[512];
  snprintf(path, sizeof(path), "%s/memstep-rss-file-XXXXXX", dir != nullptr ? dir : "/tmp");
  const int fd = mkstemp(path);
  if (fd < 0) return 41;
  unlink(path);
  const size_t len = static_cast<size_t>(kRssSteps) * kRssFileUnit;
  if (ftruncate(fd, static_cast<off_t>(len)) != 0) return 42;
  char* map = static_cast<char*>(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (map == MAP_FAILED) return 43;
  for (long step = 0; step < kRssSteps; ++step) {
    StepBegin(step);
    memset(map + static_cast<size_t>(step) * kRssFileUnit, 1, kRssFileUnit);
    usleep(kRssStepMs * 1000);
    StepEnd(step);
  }
  munmap(map, len);
  close(fd);
  Say("rss done %ld\n", kRssSteps);
  return 0;
}

int ModeRss(const char* kind) {
  if (strcmp(kind, "file") == 0) return ModeRssFile();
  const bool frag = strcmp(kind, "frag") == 0, cache = strcmp(kind, "cache") == 0;
  if (!frag && !cache && strcmp(kind, "leak") != 0) return 40;
  if (cache) {
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
  }
  std::vector<void*>& kept = Kept();
  kept.reserve(static_cast<size_t>(kRssSteps) * (kRssFragBlocks + kRssLeakBlocks));
  for (long step = 0; step < kRssSteps; ++step) {
    StepBegin(step);
    if (frag) {
      const size_t size = kRssFragBase + static_cast<size_t>(step) * kRssFragGrow;
      void* medium[kRssFragBlocks];
      for (int i = 0; i < kRssFragBlocks; ++i) {
        medium[i] = malloc(size);
        memset(medium[i], 1, size);
      }
      for (int i = 0; i < kRssFragBlocks; ++i) kept.push_back(PlantedRssPin(medium[i]));
    } else if (cache) {
      const size_t size = static_cast<size_t>(step + 1) * kRssCacheUnit;
      void* p = malloc(size);
      memset(p, 1, size);
      Escape(p);
      free(p);
    } else {
      for (int i = 0; i < kRssLeakBlocks; ++i) kept.push_back(PlantedRssLeak());
    }
    usleep(kRssStepMs * 1000);
    StepEnd(step);
  }
  Say("rss done %ld\n", kRssSteps);
  return 0;
}

// ---- modes "fork", "exec", "exit" ---------------------------------------

NOINLINE void PlantedParent6666x3() {
  for (int i = 0; i < 3; ++i) Kept().push_back(malloc(kParentSize));
}

NOINLINE void PlantedForkChild4444x10() {
  for (int i = 0; i < kForkChildCount; ++i) {
    void* p = malloc(kForkChildSize);
    Escape(p);
    Kept().push_back(p);
  }
}

int ModeFork(bool underscore_exit) {
  PlantedParent6666x3();
  pid_t child = fork();
  if (child < 0) return 10;
  if (child == 0) {
    PlantedForkChild4444x10();
    // exit runs atexit handlers and destructors; _exit (how Python's
    // multiprocessing and DataLoader workers end) runs neither, and memstep's
    // _exit hook must flush the trace itself.
    if (underscore_exit) _exit(0);
    exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return 11;
  Say("child %ld status %ld\n", child, status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 12;
}

NOINLINE void PlantedBeforeExec() { Kept().push_back(malloc(kParentSize)); }

NOINLINE void PlantedAfterExec5555x7() {
  for (int i = 0; i < kExecCount; ++i) {
    void* p = malloc(kExecSize);
    Escape(p);
    Kept().push_back(p);
  }
}

int ModeExec(const char* self) {
  PlantedBeforeExec();
  execl(self, self, "exec-target", static_cast<char*>(nullptr));
  return 20;
}

int ModeExecTarget() {
  PlantedAfterExec5555x7();
  return 0;
}

// ---- mode "churn" ---------------------------------------------------------

NOINLINE void PlantedChurnHot() {
  for (long i = 0; i < kHotPerStep; ++i) {
    void* p = malloc(kHotSize);
    Escape(p);
    free(p);
  }
}

NOINLINE void PlantedChurnLeak(long bytes) {
  for (long done = 0; done < bytes; done += static_cast<long>(kHotLeakBlock)) {
    void* p = malloc(kHotLeakBlock);
    memset(p, 1, kHotLeakBlock);
    Kept().push_back(p);
  }
}

int ModeChurn(long leak) {
  for (long step = 0; step < kHotSteps; ++step) {
    StepBegin(static_cast<uint64_t>(step));
    StageBegin("forward");
    PlantedChurnHot();
    PlantedChurnLeak(leak);
    StageEnd("forward");
    StepEnd(static_cast<uint64_t>(step));
  }
  Say("churn steps %ld leak %ld\n", kHotSteps, leak);
  return 0;
}

int ModeExit(int code) {
  PlantedLeak3000x1000();
  return code;
}

// ---- mode "threads" -------------------------------------------------------

pthread_barrier_t g_barrier;

template <int N>
NOINLINE void PlantedThreadWorker() {
  std::vector<void*> v;
  v.reserve(ThreadCount(N));
  for (int i = 0; i < ThreadCount(N); ++i) {
    void* p = malloc(ThreadSize(N));
    Escape(p);
    v.push_back(p);
  }
  // Free the first half: live = the second half.
  for (int i = 0; i < ThreadCount(N) / 2; ++i) free(v[i]);
  // The second half is leaked on purpose (the vector's own buffer is freed).
}

template <int N>
void ThreadMain() {
  pthread_barrier_wait(&g_barrier);
  PlantedThreadWorker<N>();
}

template <int... Ns>
void StartThreads(std::vector<std::thread>* threads, std::integer_sequence<int, Ns...>) {
  (threads->emplace_back(ThreadMain<Ns>), ...);
}

int ModeThreads() {
  pthread_barrier_init(&g_barrier, nullptr, kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  StartThreads(&threads, std::make_integer_sequence<int, kThreads>());
  for (auto& t : threads) t.join();
  Say("threads done %ld\n", kThreads);
  return 0;
}

// ---- mode "dlopen" --------------------------------------------------------

NOINLINE void PlantedDlopenNeighbour(const std::atomic<bool>* done) {
  std::vector<void*> ring(64, nullptr);
  size_t i = 0;
  while (!done->load(std::memory_order_relaxed)) {
    free(ring[i % ring.size()]);
    ring[i % ring.size()] = malloc(16 + (i * 37) % 2000);
    ++i;
  }
  for (void* p : ring) free(p);
}

int ModeDlopen(const char* dso) {
  std::atomic<bool> done{false};
  std::vector<std::thread> neighbours;
  for (int t = 0; t < kDlopenNeighbours; ++t)
    neighbours.emplace_back(PlantedDlopenNeighbour, &done);
  int rc = 0;
  for (int i = 0; i < kDlopenIterations; ++i) {
    void* h = dlopen(dso, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      fprintf(stderr, "dlopen: %s\n", dlerror());
      rc = 30;
      break;
    }
    auto fn = reinterpret_cast<void (*)()>(dlsym(h, "PlantedDsoAlloc"));
    if (fn == nullptr) {
      rc = 31;
      break;
    }
    fn();
    dlclose(h);
  }
  done.store(true);
  for (auto& t : neighbours) t.join();
  Say("dlopen done %ld\n", kDlopenIterations);
  return rc;
}

// ---- mode "stripped" ------------------------------------------------------

int ModeStripped(const char* dso) {
  void* h = dlopen(dso, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 30;
  }
  auto fn = reinterpret_cast<void (*)()>(dlsym(h, "PlantedStrippedEntry"));
  if (fn == nullptr) return 31;
  fn();  // the blocks stay allocated; the library stays loaded
  Say("stripped done %d\n", kStrippedCount);
  return 0;
}

// ---- mode "signal" --------------------------------------------------------

volatile sig_atomic_t g_handler_runs = 0;

NOINLINE void PlantedSignalHandler(int) {
  void* p = malloc(kSignalHandlerSize);
  Escape(p);
  free(p);
  g_handler_runs = g_handler_runs + 1;
}

NOINLINE void PlantedSignalMain() {
  for (int i = 0; i < kSignalMainCount; ++i) {
    void* p = malloc(kSignalMainSize);
    Escape(p);
    memset(p, i, kSignalMainSize);
    // Some work between allocations, so the timer also lands outside malloc.
    for (int j = 0; j < 20000; ++j) static_cast<volatile char*>(p)[j % kSignalMainSize] += 1;
    free(p);
    if (i % 10 == 0) raise(SIGUSR1);
  }
}

int ModeSignal() {
  struct sigaction sa {};
  sa.sa_handler = PlantedSignalHandler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGALRM, &sa, nullptr);
  // Prime the handler's tcache bin: glibc malloc itself is not async-signal-
  // safe, but a tcache hit takes no lock, so the handler cannot deadlock in
  // glibc; what is left to test is memstep's own hook.
  free(malloc(kSignalHandlerSize));
  struct itimerval it {};
  it.it_interval.tv_usec = 200;
  it.it_value.tv_usec = 200;
  setitimer(ITIMER_REAL, &it, nullptr);
  PlantedSignalMain();
  struct itimerval off {};
  setitimer(ITIMER_REAL, &off, nullptr);
  Say("handler runs %ld\n", static_cast<long>(g_handler_runs));
  return 0;
}

// ---- mode "progress" ------------------------------------------------------

// Keeps the last 256 blocks, so memory stays bounded however long it runs.
NOINLINE void PlantedProgressAlloc(long step) {
  static void* ring[256];
  void*& slot = ring[step % 256];
  free(slot);
  slot = malloc(kProgressSize);
  Escape(slot);
}

NOINLINE void* PlantedOomBlock() {
  void* p = malloc(4 << 20);
  if (p != nullptr) memset(p, 1, 4 << 20);
  return p;
}

int ModeOom(unsigned long headroom_mib) {
  unsigned long pages = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f == nullptr || fscanf(f, "%lu", &pages) != 1) return 3;
  fclose(f);
  struct rlimit rl;
  rl.rlim_cur = rl.rlim_max = pages * 4096ul + (headroom_mib << 20);
  if (setrlimit(RLIMIT_AS, &rl) != 0) return 4;
  for (long step = 0;; ++step) {
    StepBegin(step);
    void* p = PlantedOomBlock();
    if (p == nullptr) {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      Say("out of memory at step %ld mono %ld\n", step, ts.tv_sec * 1000000000L + ts.tv_nsec);
      abort();
    }
    Escape(p);
    StepEnd(step);
  }
}

int ModeProgress() {
  for (long step = 0; step < 10000000; ++step) {
    StepBegin(step);
    PlantedProgressAlloc(step);
    StepEnd(step);
    Say("step %ld\n", step);
  }
  return 0;
}

}  // namespace

// "usable": for each size of a spread up to 64 MiB, "size usable" on stdout,
// as the real allocator answers: nallocx (jemalloc's size class, without
// allocating) when the process has it, else malloc_usable_size of a block.
int ModeUsable() {
  using NallocxFn = size_t (*)(size_t, int);
  auto nallocx = reinterpret_cast<NallocxFn>(dlsym(RTLD_DEFAULT, "nallocx"));
  std::vector<size_t> sizes;
  for (size_t s = 1; s < 20000; ++s) sizes.push_back(s);
  for (size_t s = 20000; s < (size_t{64} << 20); s = s * 9 / 8 + 1) {
    sizes.insert(sizes.end(), {s - 1, s, s + 1});
  }
  for (int k = 14; k <= 26; ++k) {
    const size_t b = size_t{1} << k;
    sizes.insert(sizes.end(), {b - 1, b, b + 1, b + b / 4, b + b / 4 + 1});
  }
  for (size_t s : sizes) {
    size_t usable = 0;
    if (nallocx != nullptr) {
      usable = nallocx(s, 0);
    } else {
      void* p = malloc(s);
      usable = malloc_usable_size(p);
      free(p);
    }
    printf("%zu %zu\n", s, usable);
  }
  return nallocx != nullptr ? 0 : 3;  // 3: no nallocx (not jemalloc)
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODE [ARG]\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  Kept().reserve(100000);  // no vector growth inside the planted functions
  if (strcmp(mode, "sites") == 0) return ModeSites();
  if (strcmp(mode, "sampled") == 0) return ModeSampled();
  if (strcmp(mode, "steps") == 0) return ModeSteps();
  if (strcmp(mode, "fork") == 0) return ModeFork(false);
  if (strcmp(mode, "fork-exit") == 0) return ModeFork(true);
  if (strcmp(mode, "exec") == 0) return ModeExec(argv[0]);
  if (strcmp(mode, "exec-target") == 0) return ModeExecTarget();
  if (strcmp(mode, "threads") == 0) return ModeThreads();
  if (strcmp(mode, "dlopen") == 0 && argc > 2) return ModeDlopen(argv[2]);
  if (strcmp(mode, "stripped") == 0 && argc > 2) return ModeStripped(argv[2]);
  if (strcmp(mode, "signal") == 0) return ModeSignal();
  if (strcmp(mode, "progress") == 0) return ModeProgress();
  if (strcmp(mode, "oom") == 0) return ModeOom(argc > 2 ? strtoul(argv[2], nullptr, 10) : 1024);
  if (strcmp(mode, "progressive") == 0) return ModeProgressive();
  if (strcmp(mode, "quiet-thread") == 0) return ModeQuietThread();
  if (strncmp(mode, "rss-", 4) == 0) return ModeRss(mode + 4);
  if (strcmp(mode, "hunt") == 0 && argc > 7) {
    return ModeHunt(atol(argv[2]), atol(argv[3]), atol(argv[4]), atol(argv[5]), atol(argv[6]),
                    atol(argv[7]));
  }
  if (strcmp(mode, "hunt") == 0 && argc > 5) {
    return ModeHunt(atol(argv[2]), atol(argv[3]), atol(argv[4]), atol(argv[5]));
  }
  if (strcmp(mode, "hunt") == 0 && argc > 3) return ModeHunt(atol(argv[2]), atol(argv[3]));
  if (strcmp(mode, "hunt-grow") == 0) return ModeHuntGrow();
  if (strcmp(mode, "exit") == 0 && argc > 2) return ModeExit(atoi(argv[2]));
  if (strcmp(mode, "churn") == 0 && argc > 2) return ModeChurn(atol(argv[2]));
  if (strcmp(mode, "usable") == 0) return ModeUsable();
  fprintf(stderr, "unknown mode %s\n", mode);
  return 2;
}
