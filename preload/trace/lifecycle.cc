// The library's lifecycle: configuration, constructor (resolve, load the
// unwinder, open the trace, start the writer), destructor (final flush),
// thread exit, and the fork handlers.

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "preload/core/fds.h"
#include "preload/core/loaded_range.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "preload/host/unwinder.h"
#include "preload/steps/config.h"
#include "preload/steps/env.h"
#include "preload/trace/modules.h"
#include "src/format/format.h"
#include "src/format/quantity.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

uint8_t g_self_build_id[64];
uint32_t g_self_build_id_len = 0;

void ReadConfig() {
  uint64_t v;
  if (EnvSize("MEMSTEP_SAMPLE_INTERVAL", &v)) g_config.sample_interval = v;
  if (EnvSize("MEMSTEP_ALWAYS_BYTES", &v)) {
    if (v > 0)
      g_config.always_bytes = v;
    else
      EnvReject("MEMSTEP_ALWAYS_BYTES", "0", "a positive size");
  }
  if (EnvCount("MEMSTEP_FLUSH_MS", &v)) {
    if (v > 0)
      g_config.flush_ms = v;
    else
      EnvReject("MEMSTEP_FLUSH_MS", "0", "a positive number of milliseconds");
  }
  if (EnvSize("MEMSTEP_SAMPLE_WARM", &v)) g_config.warm_interval = v;
  if (EnvCount("MEMSTEP_SEED", &v)) g_config.seed = v;
  // Tests only: the writer thread flushes nothing for this long after it starts
  // (a writer starved on a loaded machine, made deterministic).
  if (EnvCount("MEMSTEP_TEST_WRITER_STALL_MS", &v)) g_config.test_writer_stall_ms = v;
  if (const char* h = getenv("MEMSTEP_HUNT_BUDGET"); h != nullptr && h[0] != '\0') {
    namespace fmt = ::memstep::format;
    fmt::Quantity q;
    if (fmt::ParseQuantity(h, fmt::kAcceptPercent | fmt::kAcceptFraction, &q) == nullptr) {
      g_config.hunt_budget = q.value / 100;
    } else {
      EnvReject("MEMSTEP_HUNT_BUDGET", h, fmt::QuantityForms(fmt::kAcceptPercent));
    }
  }
  const char* screen = getenv("MEMSTEP_HUNT_SCREEN");
  if (screen != nullptr && screen[0] != '\0') g_config.hunt_screen = screen[0] != '0';
  const char* prog = getenv("MEMSTEP_PROGRESSIVE");
  if (prog != nullptr && prog[0] != '\0') g_config.progressive = prog[0] != '0';
  // Recording every allocation is a request for exact data: by default a full
  // ring then makes the allocating thread wait for the writer (bounded)
  // rather than drop records. MEMSTEP_LOSSLESS=0/1 overrides.
  g_config.lossless = g_config.sample_interval <= 1;
  const char* l = getenv("MEMSTEP_LOSSLESS");
  if (l != nullptr && l[0] != '\0') g_config.lossless = l[0] != '0';
  const char* d = getenv("MEMSTEP_DISABLE");
  g_config.disabled = d != nullptr && d[0] != '\0' && d[0] != '0';
  const char* q = getenv("MEMSTEP_QUIET");
  g_config.quiet = q != nullptr && q[0] != '\0' && q[0] != '0';
  const char* dir = getenv("MEMSTEP_DIR");
  if (dir != nullptr && dir[0] != '\0') {
    size_t n = StrLen(dir);
    if (n < sizeof(g_config.dir)) memcpy(g_config.dir, dir, n + 1);
  }
  ReadFeatureConfig();
  ProgressiveInit();
}

void ThreadExit(void*) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  FlushCounters(&t);
  if (t.ring != nullptr) {
    RetireRing(t.ring);
    t.ring = nullptr;
  }
  // If malloc runs in a later destructor round, the slow path re-arms us
  // (a fresh first gap is drawn: memoryless, so unbiased).
  t.key_armed = 0;
  t.seeded = 0;
  t.bytes_until_sample = 0;
}

namespace {

uint8_t g_fork_saved_guard = 0;

void ForkPrepare() {
  ThreadState& t = t_state;
  g_fork_saved_guard = t.guard;
  t.guard = 1;
  ModulesForkPrepare();  // g_maps_mu (before the dictionary lock, as in RefreshMappings)
  WriterForkPrepare();   // flush_mu
  g_api_lock.Lock();
  SitesForkPrepare();
  RegistryLock();
  g_dict.Lock();
  g_big.LockAll();
  g_region.LockAll();
  g_mmaps.Lock();
  g_reserved.Lock();
}

void ForkParent() {
  g_reserved.Unlock();
  g_mmaps.Unlock();
  g_region.UnlockAll();
  g_big.UnlockAll();
  g_dict.Unlock();
  RegistryUnlock();
  SitesForkParent();
  g_api_lock.Unlock();
  WriterForkParent();
  ModulesForkParent();
  t_state.guard = g_fork_saved_guard;
}

void ForkChild() {
  OwnMappingsForkChild();  // first: any handler below may RawMmap
  g_mmaps.ResetLock();
  g_reserved.ResetLock();
  g_region.ResetLocks();
  g_big.ResetLocks();
  g_dict.ResetLock();
  g_api_lock.Reset();
  SitesForkChild();
  AlertsForkChild();
  ProgressiveForkChild();
  AllocStatsForkChild();
  ModulesForkChild();
  // The child's history starts here: the blocks it inherited count as
  // allocated once (alloc = inherited live, free = 0), so per-process totals
  // do not repeat the parent's allocations; live bytes and counts are kept.
  {
    uint64_t ab = g_counters.alloc_bytes.load(std::memory_order_relaxed);
    uint64_t fb = g_counters.free_bytes.load(std::memory_order_relaxed);
    uint64_t ac = g_counters.alloc_count.load(std::memory_order_relaxed);
    uint64_t fc = g_counters.free_count.load(std::memory_order_relaxed);
    uint64_t live = ab > fb ? ab - fb : 0;
    g_counters.alloc_bytes.store(live, std::memory_order_relaxed);
    g_counters.free_bytes.store(0, std::memory_order_relaxed);
    g_counters.alloc_count.store(ac > fc ? ac - fc : 0, std::memory_order_relaxed);
    g_counters.free_count.store(0, std::memory_order_relaxed);
    g_counters.run_max.store(live, std::memory_order_relaxed);
    g_counters.step_max.store(live, std::memory_order_relaxed);
  }
  ThreadState& t = t_state;
  t.tid = GetTid();
  t.seeded = 0;  // different random stream from the parent
  WriterForkChild();
  t.guard = g_fork_saved_guard;
}

int FindSelf(struct dl_phdr_info* info, size_t, void* data) {
  uintptr_t me = reinterpret_cast<uintptr_t>(data);
  uintptr_t lo, hi;
  if (LoadedRange(info, &lo, &hi) && me >= lo && me < hi) {
    g_self_lo = lo;
    g_self_hi = hi;
    g_self_build_id_len = ReadGnuBuildId(info, g_self_build_id, sizeof(g_self_build_id));
    return 1;
  }
  return 0;
}

}  // namespace

__attribute__((constructor(101))) static void MemstepInit() {
  ResolveReal();
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  if (g_state.load() != kNotYet) return;
  // Secure execution (setuid, setgid, file capabilities): never profiled.
  // glibc already ignores LD_PRELOAD paths there; this covers
  // /etc/ld.so.preload and libraries installed in trusted directories.
  if (g_config.disabled || getauxval(AT_SECURE) != 0) {
    g_state.store(kDisabled);
    return;
  }
  t.tid = GetTid();
  dl_iterate_phdr(FindSelf, reinterpret_cast<void*>(&FindSelf));
  if (!g_big.Init(13) || !g_dict.Init(size_t{1} << 30, size_t{1} << 20, size_t{1} << 16) ||
      !g_mmaps.Init(size_t{1} << 16) || !g_reserved.Init(size_t{1} << 16)) {
    Degrade("cannot reserve memory", nullptr, ENOMEM);
    g_state.store(kStopped);
    return;
  }
  g_key_ok = pthread_key_create(&g_key, ThreadExit) == 0;
  if (!WriterOpen(false, nullptr)) {
    g_state.store(kStopped);
    return;
  }
  const char* unwinder_note = LoadUnwinder();
  pthread_atfork(ForkPrepare, ForkParent, ForkChild);
  g_state.store(kRecording);
  if (unwinder_note != nullptr) SayNotice(t, unwinder_note, true);
  InitFeatures();
  // A python executable has CPython linked in: its frames are usable from
  // the first allocation after Py_Initialize (later loads: the writer polls).
  PyFramesPoll();
  WriterStartThread();
}

__attribute__((destructor)) static void MemstepFini() {
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  FlushCounters(&t);
  if (g_state.load() == kRecording) {
    SnapshotWriterPoll();  // a snapshot signal the writer had no cycle left to serve
    WriterCycle(true);
  }
  FlushQueuedStderr();  // what the writer thread could not write itself
}

}  // namespace memstep::preload
