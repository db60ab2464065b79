// The allocator's own statistics and the resident split at step ends, written
// as COUNTER records just before the STEP end record (docs/format.md
// "Step-end allocator statistics"; the analysis in src/analysis/rss_explain.h
// splits RSS growth with them).
//
// What is read:
//   - /proc/self/statm: resident and shared pages (shared = file-backed +
//     shmem resident pages, the kernel's MM_FILEPAGES + MM_SHMEMPAGES
//     counters; resident - shared = anonymous). O(1): the kernel keeps these
//     counters, no page-table walk (smaps_rollup walks every page table: it
//     costs milliseconds on a large process and gives the same split).
//   - glibc: mallinfo2() (sums over arenas; walks each arena's bins under its
//     lock, so its cost grows with the number of free chunks).
//   - jemalloc (detected at run time: the real malloc is not glibc's and
//     `mallctl` resolves): stats.allocated/active/resident/mapped/metadata
//     after an `epoch` refresh, and the dirty and muzzy pages of all arenas.
//
// Rate limit: the collection measures its own cost and runs again only once
// 100 times that cost has passed (at most 1 % of wall time), so on a small
// heap it runs at every step end and on a heap with many free chunks less
// often. Each collection also records its cost (`memstep.stats_ns`).
// MEMSTEP_ALLOC_STATS=0 turns it off.
//
// Nothing here allocates from the hooked heap (the caller holds the guard;
// mallctl may allocate internally, forwarded uncounted).

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "preload/steps/config.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace {

// Names, in AllocStats::values order.
const char* const kNames[kAllocStatsMax] = {
    "memstep.stats_ns",      // cost of this collection
    "rss.anon_bytes",        // statm resident - shared
    "rss.file_bytes",        // statm shared (file-backed + shmem)
    "glibc.arena_bytes",     // mallinfo2.arena: bytes the arenas got from the system (sbrk + heaps)
    "glibc.mmap_bytes",      // mallinfo2.hblkhd: chunks served by their own mmap
    "glibc.in_use_bytes",    // mallinfo2.uordblks
    "glibc.free_bytes",      // mallinfo2.fordblks: free chunks, arena tops included
    "glibc.top_bytes",       // mallinfo2.keepcost: the main arena's top chunk (trimmable)
    "glibc.free_chunks",     // mallinfo2.ordblks
    "jemalloc.allocated",    // stats.allocated
    "jemalloc.active",       // stats.active
    "jemalloc.resident",     // stats.resident
    "jemalloc.mapped",       // stats.mapped
    "jemalloc.metadata",     // stats.metadata
    "jemalloc.dirty_bytes",  // stats.arenas.<all>.pdirty x page
    "jemalloc.muzzy_bytes",  // stats.arenas.<all>.pmuzzy x page
};
enum {
  kCost,
  kAnon,
  kFile,
  kArena,
  kMmap,
  kInUse,
  kFree,
  kTop,
  kChunks,
  kJeAllocated,
  kJeActive,
  kJeResident,
  kJeMapped,
  kJeMetadata,
  kJeDirty,
  kJeMuzzy,
};

using MallctlFn = int (*)(const char*, void*, size_t*, void*, size_t);

uint32_t g_name_ids[kAllocStatsMax];  // g_api_lock (Emit)
std::atomic<uint64_t> g_next_ns{0};   // earliest next collection
std::atomic<int> g_mallctl_state{0};  // 0 not looked up, 1 found, 2 absent
MallctlFn g_mallctl = nullptr;

bool ReadStatm(uint64_t* resident, uint64_t* shared) {
  int fd = static_cast<int>(
      syscall(SYS_openat, AT_FDCWD, "/proc/self/statm", O_RDONLY | O_CLOEXEC));
  if (fd < 0) return false;
  char buf[256];
  ssize_t r;
  do {
    r = read(fd, buf, sizeof(buf) - 1);
  } while (r < 0 && errno == EINTR);
  close(fd);
  if (r <= 0) return false;
  buf[r] = '\0';
  uint64_t v[3] = {0, 0, 0};
  int field = 0;
  bool digits = false;
  for (ssize_t i = 0; i < r && field < 3; ++i) {
    char c = buf[i];
    if (c >= '0' && c <= '9') {
      v[field] = v[field] * 10 + static_cast<uint64_t>(c - '0');
      digits = true;
    } else if (digits) {
      ++field;
      digits = false;
    }
  }
  if (field < 3 && !digits) return false;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  *resident = v[1] * page;
  *shared = v[2] * page;
  return true;
}

MallctlFn Mallctl() {
  int s = g_mallctl_state.load(std::memory_order_acquire);
  if (s == 0) {
    if (!g_hot.glibc) {
      g_mallctl = reinterpret_cast<MallctlFn>(OwnDlsym(RTLD_DEFAULT, "mallctl"));
    }
    g_mallctl_state.store(g_mallctl != nullptr ? 1 : 2, std::memory_order_release);
    s = g_mallctl != nullptr ? 1 : 2;
  }
  return s == 1 ? g_mallctl : nullptr;
}

bool CtlSize(MallctlFn ctl, const char* name, uint64_t* out) {
  size_t v = 0, len = sizeof(v);
  if (ctl(name, &v, &len, nullptr, 0) != 0 || len != sizeof(v)) return false;
  *out = v;
  return true;
}

void CollectJemalloc(MallctlFn ctl, AllocStats* s) {
  uint64_t epoch = 1;
  size_t len = sizeof(epoch);
  if (ctl("epoch", &epoch, &len, &epoch, sizeof(epoch)) != 0) return;
  static const char* const kCtl[] = {"stats.allocated", "stats.active", "stats.resident",
                                     "stats.mapped", "stats.metadata"};
  for (int i = 0; i < 5; ++i) {
    uint64_t v;
    if (CtlSize(ctl, kCtl[i], &v)) s->values[kJeAllocated + i] = static_cast<int64_t>(v);
  }
  uint64_t page = 0, pdirty = 0, pmuzzy = 0;
  // 4096 is MALLCTL_ARENAS_ALL: the sum over all arenas.
  if (CtlSize(ctl, "arenas.page", &page) && CtlSize(ctl, "stats.arenas.4096.pdirty", &pdirty) &&
      CtlSize(ctl, "stats.arenas.4096.pmuzzy", &pmuzzy)) {
    s->values[kJeDirty] = static_cast<int64_t>(pdirty * page);
    s->values[kJeMuzzy] = static_cast<int64_t>(pmuzzy * page);
  }
}

}  // namespace

bool AllocStatsCollect(AllocStats* s) {
  if (!g_features.alloc_stats) return false;
  const uint64_t start = MonoNs();
  uint64_t next = g_next_ns.load(std::memory_order_relaxed);
  if (start < next) return false;
  // One thread collects per due time.
  if (!g_next_ns.compare_exchange_strong(next, start + 1000000000, std::memory_order_relaxed)) {
    return false;
  }
  for (int i = 0; i < kAllocStatsMax; ++i) s->values[i] = -1;
  uint64_t resident = 0, shared = 0;
  if (ReadStatm(&resident, &shared)) {
    s->values[kAnon] = static_cast<int64_t>(resident > shared ? resident - shared : 0);
    s->values[kFile] = static_cast<int64_t>(shared);
  }
  if (g_hot.glibc) {
    struct mallinfo2 mi = mallinfo2();
    s->values[kArena] = static_cast<int64_t>(mi.arena);
    s->values[kMmap] = static_cast<int64_t>(mi.hblkhd);
    s->values[kInUse] = static_cast<int64_t>(mi.uordblks);
    s->values[kFree] = static_cast<int64_t>(mi.fordblks);
    s->values[kTop] = static_cast<int64_t>(mi.keepcost);
    s->values[kChunks] = static_cast<int64_t>(mi.ordblks);
  } else if (MallctlFn ctl = Mallctl()) {
    CollectJemalloc(ctl, s);
  }
  const uint64_t end = MonoNs();
  const uint64_t cost = end > start ? end - start : 0;
  s->values[kCost] = static_cast<int64_t>(cost);
  g_next_ns.store(end + 100 * cost, std::memory_order_relaxed);
  return true;
}

void AllocStatsEmit(ThreadState& t, const AllocStats& s) {
  uint8_t buf[64];
  for (int i = 0; i < kAllocStatsMax; ++i) {
    if (s.values[i] < 0) continue;
    if (g_name_ids[i] == 0) g_name_ids[i] = g_dict.InternString(kNames[i], StrLen(kNames[i]));
    if (g_name_ids[i] == 0) continue;
    fmt::CounterRecord rec;
    rec.ts = NowRel();
    rec.seq = NextSeq();
    rec.tid = t.tid;
    rec.name_str = g_name_ids[i];
    rec.value = s.values[i];
    fmt::RecordEncoder e(buf, sizeof(buf));
    if (fmt::Encode(e, rec)) Push(t, buf, e.size());
  }
}

// The child's trace re-emits the parent's dictionary: the name ids stay valid.
void AllocStatsForkChild() { g_next_ns.store(0, std::memory_order_relaxed); }

}  // namespace memstep::preload
