// The allocator's own statistics, the resident split and memstep's own
// resident memory at step ends, written as COUNTER records (and one
// ARENA_STATS record) just before the STEP end record (docs/format.md
// "Step-end allocator statistics"; the analysis in src/analysis/rss_explain.h
// splits RSS growth with them).
//
// What is read:
//   - /proc/self/smaps_rollup: Rss and Anonymous (file-backed = Rss -
//     Anonymous: file pages and shmem). It walks every page table of the
//     process (milliseconds in a large process), so it has its own rate limit
//     (1000 times its measured cost); between two reads, /proc/self/statm
//     gives the same split from the kernel's counters in O(1) (resident -
//     shared = anonymous; shared = file-backed + shmem). `rss.source` says
//     which one a row has.
//   - glibc (the real malloc is libc's): malloc_info(), one XML element per
//     arena, written into a FILE of ours (fopencookie over a static buffer,
//     created once: the only allocation, ~500 bytes from the program's heap,
//     forwarded uncounted) and parsed as it streams, without allocating. Per
//     arena: the bytes it got from the system, its free chunks, its top
//     chunk (the `rest` total counts the top; the `<size>` and `<unsorted>`
//     rows do not, so top = fast + rest - rows). mallinfo2() is the fallback
//     when the XML cannot be read. Both walk each arena's bins under its lock:
//     the cost grows with the number of free chunks.
//   - jemalloc (detected at run time: the real malloc is not glibc's and
//     `mallctl` resolves): stats.allocated/active/resident/mapped/metadata
//     after an `epoch` refresh, and the dirty and muzzy pages of all arenas.
//   - memstep's own memory: mincore(2) over every mapping memstep made
//     (RawMmap's list; each scanned from its start until 4 MiB without a
//     resident page) and over the used parts of the sampled-block region,
//     reported apart (`memstep.region_bytes`) with the requested bytes of
//     its live blocks (`memstep.sampled_bytes`: the program's data, counted in
//     its live bytes).
//
// Two parts, two threads. The heap allocator's statistics (glibc, jemalloc)
// change within a step, as freed blocks are reused at once, so the thread that
// ends a step reads them there (AllocStatsCollectHeap): it measures its own
// cost and runs again only once 100 times that cost has passed (at most 1 %
// of wall time), so on a small heap it runs at every step end and on a heap
// with many free chunks less often. The resident split and memstep's own
// memory change slowly, so the writer thread reads them just after the step
// end (AllocStatsRequest wakes it; AllocStatsWriterPoll), on its own clocks
// (smaps_rollup 1000 times its cost on one, statm and the mincore scan 100
// times theirs on the other), and writes them after a `stats.step` COUNTER
// naming the step.
// The writer's parts are timed in the writer's CPU time: on a loaded machine
// a preemption inside a scan made it look ten times dearer and spaced the
// next one out as much, and a short run was left with too few rows of
// memstep's own memory to subtract (RssExplainE2E, 1 run in 8 beside two busy
// loops). Each part records its cost (`memstep.stats_ns`; `rss.smaps_ns`,
// `memstep.own_ns`, CPU ns). MEMSTEP_ALLOC_STATS=0 turns it off.
//
// Nothing here allocates from the hooked heap after the FILE above (the
// caller holds the guard; mallctl may allocate internally, forwarded
// uncounted). One heap collector at a time (g_collect_lock, never waited
// for). g_name_ids: the heap names are interned under g_api_lock, the
// resident ones by the writer thread (disjoint entries).

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "preload/core/fds.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "preload/steps/config.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

static_assert(kArenaStatsMax == fmt::kMaxArenaStats, "one limit for writer and reader");

namespace {

// Names, in AllocStats::values order.
const char* const kNames[kAllocStatsMax] = {
    "memstep.stats_ns",       // cost of this collection
    "rss.anon_bytes",         // smaps_rollup Anonymous, or statm resident - shared
    "rss.file_bytes",         // smaps_rollup Rss - Anonymous, or statm shared
    "rss.source",             // 1 smaps_rollup, 2 statm
    "rss.smaps_ns",           // cost of the smaps_rollup read (when read)
    "memstep.own_bytes",      // memstep's resident memory but the sampled-block region
    "memstep.region_bytes",   // resident bytes of the region's used parts
    "memstep.sampled_bytes",  // requested bytes of the live sampled blocks in the region
    "memstep.own_ns",         // cost of measuring memstep's own memory
    "glibc.arena_bytes",      // sum of the arenas' system bytes (sbrk + heaps)
    "glibc.mmap_bytes",       // chunks served by their own mmap
    "glibc.in_use_bytes",     // arena bytes - free bytes
    "glibc.free_bytes",       // free chunks, arena tops included
    "glibc.top_bytes",        // the main arena's top chunk (trimmable)
    "glibc.free_chunks",      // free chunks other than tops
    "glibc.arenas",           // number of arenas
    "jemalloc.allocated",     // stats.allocated
    "jemalloc.active",        // stats.active
    "jemalloc.resident",      // stats.resident
    "jemalloc.mapped",        // stats.mapped
    "jemalloc.metadata",      // stats.metadata
    "jemalloc.dirty_bytes",   // stats.arenas.<all>.pdirty x page
    "jemalloc.muzzy_bytes",   // stats.arenas.<all>.pmuzzy x page
    nullptr,
};
enum {
  kCost,
  kAnon,
  kFile,
  kSource,
  kSmapsCost,
  kOwn,
  kRegion,
  kSampled,
  kOwnCost,
  kArena,
  kMmap,
  kInUse,
  kFree,
  kTop,
  kChunks,
  kArenas,
  kJeAllocated,
  kJeActive,
  kJeResident,
  kJeMapped,
  kJeMetadata,
  kJeDirty,
  kJeMuzzy,
};

using MallctlFn = int (*)(const char*, void*, size_t*, void*, size_t);

uint32_t g_name_ids[kAllocStatsMax];          // see the file comment
std::atomic<uint64_t> g_request{0};           // 1 + the step of the pending request; 0 none
std::atomic<uint64_t> g_next_ns{0};           // earliest next collection
std::atomic<uint64_t> g_next_smaps_ns{0};     // earliest next smaps_rollup read
std::atomic<uint64_t> g_next_resident_ns{0};  // earliest next resident split / own memory
std::atomic<int> g_mallctl_state{0};          // 0 not looked up, 1 found, 2 absent
MallctlFn g_mallctl = nullptr;
SpinLock g_collect_lock;  // one collector (TryLock only)

// ---- /proc ----------------------------------------------------------------

// Reads a small /proc file into buf (NUL-terminated); its length, or -1.
ssize_t ReadProc(const char* path, char* buf, size_t cap) {
  int fd = OpenOwn(path, O_RDONLY);
  if (fd < 0) return -1;
  size_t n = 0;
  while (n + 1 < cap) {
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  close(fd);
  buf[n] = '\0';
  return n > 0 ? static_cast<ssize_t>(n) : -1;
}

// The decimal number after the first occurrence of `key` at a line start in
// text, or -1.
int64_t FieldAfter(const char* text, const char* key) {
  const size_t klen = StrLen(key);
  for (const char* line = text; *line != '\0';) {
    size_t i = 0;
    while (i < klen && line[i] == key[i]) ++i;
    if (i == klen) {
      const char* p = line + klen;
      while (*p == ' ' || *p == '\t') ++p;
      if (*p < '0' || *p > '9') return -1;
      int64_t v = 0;
      while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
      return v;
    }
    while (*line != '\0' && *line != '\n') ++line;
    if (*line == '\n') ++line;
  }
  return -1;
}

bool ReadSmapsRollup(uint64_t* anon, uint64_t* file) {
  char buf[4096];
  if (ReadProc("/proc/self/smaps_rollup", buf, sizeof(buf)) < 0) return false;
  // The first line names the range ("00400000-ffffffffff600000 ---p ... [rollup]").
  const int64_t rss_kb = FieldAfter(buf, "Rss:"), anon_kb = FieldAfter(buf, "Anonymous:");
  if (rss_kb < 0 || anon_kb < 0) return false;
  *anon = static_cast<uint64_t>(anon_kb) * 1024;
  *file = static_cast<uint64_t>(rss_kb > anon_kb ? rss_kb - anon_kb : 0) * 1024;
  return true;
}

bool ReadStatm(uint64_t* resident, uint64_t* shared) {
  char buf[256];
  const ssize_t r = ReadProc("/proc/self/statm", buf, sizeof(buf));
  if (r < 0) return false;
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

// ---- glibc: malloc_info, parsed as it streams -------------------------------

// The parser's state; g_collect_lock.
struct InfoParse {
  char line[256] = {};
  size_t len = 0;
  bool long_line = false;  // the current line overflowed `line`: ignored
  bool in_heap = false;
  uint64_t fast = 0, fast_count = 0, rest = 0, rest_count = 0, system = 0, rows = 0;
  uint64_t mmap = 0;
  bool have_mmap = false;
  uint32_t heaps = 0;  // complete <heap> elements
  AllocStats* out = nullptr;
};
InfoParse g_parse;
char g_iobuf[4096];      // the FILE's buffer (g_collect_lock)
FILE* g_info = nullptr;  // g_collect_lock
bool g_info_failed = false;

// The number after `attr` (e.g. `size="`) in the line, or -1.
int64_t Attr(const char* line, size_t len, const char* attr) {
  const size_t alen = StrLen(attr);
  for (size_t i = 0; i + alen <= len; ++i) {
    size_t k = 0;
    while (k < alen && line[i + k] == attr[k]) ++k;
    if (k < alen) continue;
    size_t j = i + alen;
    if (j >= len || line[j] < '0' || line[j] > '9') return -1;
    int64_t v = 0;
    while (j < len && line[j] >= '0' && line[j] <= '9') v = v * 10 + (line[j++] - '0');
    return v;
  }
  return -1;
}

bool StartsWith(const char* line, size_t len, const char* prefix) {
  size_t i = 0;
  while (i < len && (line[i] == ' ' || line[i] == '\t')) ++i;
  for (size_t k = 0; prefix[k] != '\0'; ++k, ++i) {
    if (i >= len || line[i] != prefix[k]) return false;
  }
  return true;
}

void EndHeap(InfoParse& p) {
  AllocStats& s = *p.out;
  const uint64_t free = p.fast + p.rest;
  const uint64_t top = free > p.rows ? free - p.rows : 0;
  const uint64_t chunks = p.fast_count + (p.rest_count > 0 ? p.rest_count - 1 : 0);
  const uint32_t row = p.heaps < kArenaStatsMax ? p.heaps : kArenaStatsMax - 1;
  const uint64_t v[4] = {p.system, free, top, chunks};
  const bool summed = p.heaps >= kArenaStatsMax;  // the last row sums the rest
  for (int i = 0; i < 4; ++i) s.arena[row][i] = (summed ? s.arena[row][i] : 0) + v[i];
  ++p.heaps;
  s.arenas = p.heaps < kArenaStatsMax ? p.heaps : kArenaStatsMax;
}

void ParseLine(InfoParse& p, const char* l, size_t n) {
  if (StartsWith(l, n, "<heap ")) {
    p.in_heap = true;
    p.fast = p.fast_count = p.rest = p.rest_count = p.system = p.rows = 0;
  } else if (StartsWith(l, n, "</heap>")) {
    if (p.in_heap) EndHeap(p);
    p.in_heap = false;
  } else if (!p.in_heap) {
    if (StartsWith(l, n, "<total type=\"mmap\"")) {
      const int64_t v = Attr(l, n, "size=\"");
      p.have_mmap = v >= 0;
      p.mmap = v >= 0 ? static_cast<uint64_t>(v) : 0;
    }
  } else if (StartsWith(l, n, "<size ") || StartsWith(l, n, "<unsorted ")) {
    const int64_t v = Attr(l, n, "total=\"");
    if (v > 0) p.rows += static_cast<uint64_t>(v);
  } else if (StartsWith(l, n, "<total type=\"fast\"")) {
    p.fast = static_cast<uint64_t>(Attr(l, n, "size=\"") > 0 ? Attr(l, n, "size=\"") : 0);
    p.fast_count = static_cast<uint64_t>(Attr(l, n, "count=\"") > 0 ? Attr(l, n, "count=\"") : 0);
  } else if (StartsWith(l, n, "<total type=\"rest\"")) {
    p.rest = static_cast<uint64_t>(Attr(l, n, "size=\"") > 0 ? Attr(l, n, "size=\"") : 0);
    p.rest_count = static_cast<uint64_t>(Attr(l, n, "count=\"") > 0 ? Attr(l, n, "count=\"") : 0);
  } else if (StartsWith(l, n, "<system type=\"current\"")) {
    const int64_t v = Attr(l, n, "size=\"");
    p.system = v > 0 ? static_cast<uint64_t>(v) : 0;
  }
}

// fopencookie write: feeds the XML to the parser line by line.
ssize_t InfoWrite(void* cookie, const char* buf, size_t size) {
  InfoParse& p = *static_cast<InfoParse*>(cookie);
  for (size_t i = 0; i < size; ++i) {
    const char c = buf[i];
    if (c == '\n') {
      if (!p.long_line) ParseLine(p, p.line, p.len);
      p.len = 0;
      p.long_line = false;
    } else if (p.len < sizeof(p.line)) {
      p.line[p.len++] = c;
    } else {
      p.long_line = true;
    }
  }
  return static_cast<ssize_t>(size);
}

// The FILE malloc_info writes into, made once (g_collect_lock).
FILE* InfoFile() {
  if (g_info == nullptr && !g_info_failed) {
    cookie_io_functions_t io = {nullptr, InfoWrite, nullptr, nullptr};
    g_info = fopencookie(&g_parse, "w", io);
    if (g_info != nullptr && setvbuf(g_info, g_iobuf, _IOFBF, sizeof(g_iobuf)) != 0) {
      fclose(g_info);  // would allocate its own buffer on the first write
      g_info = nullptr;
    }
    g_info_failed = g_info == nullptr;
  }
  return g_info;
}

bool CollectMallocInfo(AllocStats* s) {
  FILE* f = InfoFile();
  if (f == nullptr) return false;
  InfoParse& p = g_parse;
  p.len = 0;
  p.long_line = false;
  p.in_heap = false;
  p.heaps = 0;
  p.have_mmap = false;
  p.out = s;
  s->arenas = 0;
  if (malloc_info(0, f) != 0 || fflush(f) != 0 || p.heaps == 0 || !p.have_mmap) {
    s->arenas = 0;
    return false;
  }
  uint64_t system = 0, free = 0, chunks = 0;
  for (uint32_t i = 0; i < s->arenas; ++i) {
    system += s->arena[i][0];
    free += s->arena[i][1];
    chunks += s->arena[i][3];
  }
  s->values[kArena] = static_cast<int64_t>(system);
  s->values[kMmap] = static_cast<int64_t>(p.mmap);
  s->values[kInUse] = static_cast<int64_t>(system > free ? system - free : 0);
  s->values[kFree] = static_cast<int64_t>(free);
  s->values[kTop] = static_cast<int64_t>(s->arena[0][2]);
  s->values[kChunks] = static_cast<int64_t>(chunks);
  s->values[kArenas] = static_cast<int64_t>(p.heaps);
  return true;
}

void CollectMallinfo2(AllocStats* s) {
  struct mallinfo2 mi = mallinfo2();
  s->values[kArena] = static_cast<int64_t>(mi.arena);
  s->values[kMmap] = static_cast<int64_t>(mi.hblkhd);
  s->values[kInUse] = static_cast<int64_t>(mi.uordblks);
  s->values[kFree] = static_cast<int64_t>(mi.fordblks);
  s->values[kTop] = static_cast<int64_t>(mi.keepcost);
  s->values[kChunks] = static_cast<int64_t>(mi.ordblks);
}

// ---- jemalloc ---------------------------------------------------------------

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

// ---- memstep's own memory ---------------------------------------------------

void CollectOwn(AllocStats* s) {
  const uint64_t start = ThreadCpuNs();
  const uintptr_t rb = g_region.base(), re = rb + g_region.size();
  uint64_t own = 0, region = 0;
  ForEachOwnMapping([&](uintptr_t a, size_t len) {
    if (a < re && a + len > rb) return;  // the region's reservation: its used parts below
    own += ResidentBytes(a, len, /*prefix=*/true);
  });
  g_region.ForEachUsedRange([&](uintptr_t a, size_t len) {
    if (len > 0) region += ResidentBytes(a, len);
  });
  s->values[kOwn] = static_cast<int64_t>(own);
  s->values[kRegion] = static_cast<int64_t>(region);
  s->values[kSampled] = static_cast<int64_t>(g_region.LiveBytes());
  const uint64_t end = ThreadCpuNs();
  s->values[kOwnCost] = static_cast<int64_t>(end > start ? end - start : 0);
}

}  // namespace

namespace {

// Rate limits: a part runs again only once this many times its measured cost
// has passed (1 / kBudget of wall time at most).
constexpr uint64_t kHeapBudget = 100;      // the program's thread: 1 %
constexpr uint64_t kResidentBudget = 100;  // the writer thread: 1 % of a core
// smaps_rollup only refines statm's split (exact where statm's per-CPU
// counters may lag by a few pages), so it gets a tenth of that: at 100 times
// its cost it alone took 0.9 % of the time of realistic_bench (0.44 ms a
// read, ~50 ms steps), the largest part of memstep's cost there.
constexpr uint64_t kSmapsBudget = 1000;

void Clear(AllocStats* s) {
  for (int i = 0; i < kAllocStatsMax; ++i) s->values[i] = -1;
  s->arenas = 0;
}

void EmitCounter(ThreadState& t, uint32_t name, int64_t value) {
  uint8_t buf[fmt::kMaxEncodedSize<fmt::CounterRecord>];
  fmt::CounterRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.name_str = name;
  rec.value = value;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

// The COUNTER records of the collected values, in kNames order.
void EmitValues(ThreadState& t, const AllocStats& s) {
  for (int i = 0; i < kAllocStatsMax; ++i) {
    if (s.values[i] < 0 || kNames[i] == nullptr) continue;
    if (g_name_ids[i] == 0) g_name_ids[i] = g_dict.InternString(kNames[i], StrLen(kNames[i]));
    if (g_name_ids[i] != 0) EmitCounter(t, g_name_ids[i], s.values[i]);
  }
}

}  // namespace

bool AllocStatsCollectHeap(AllocStats* s) {
  if (!g_features.alloc_stats) return false;
  const uint64_t start = MonoNs();
  uint64_t next = g_next_ns.load(std::memory_order_relaxed);
  if (start < next) return false;
  // One thread collects per due time.
  if (!g_next_ns.compare_exchange_strong(next, start + 1000000000, std::memory_order_relaxed)) {
    return false;
  }
  if (!g_collect_lock.TryLock()) return false;
  Clear(s);
  if (g_hot.glibc) {
    if (!CollectMallocInfo(s)) CollectMallinfo2(s);
  } else if (MallctlFn ctl = Mallctl()) {
    CollectJemalloc(ctl, s);
  }
  g_collect_lock.Unlock();
  const uint64_t end = MonoNs();
  const uint64_t cost = end > start ? end - start : 0;
  s->values[kCost] = static_cast<int64_t>(cost);
  g_next_ns.store(end + kHeapBudget * cost, std::memory_order_relaxed);
  return true;
}

void AllocStatsEmit(ThreadState& t, const AllocStats& s) {
  EmitValues(t, s);  // g_api_lock: g_name_ids
  if (s.arenas == 0) return;
  uint8_t big[32 + kArenaStatsMax * 4 * 10];
  fmt::ArenaStatsRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.arenas.values = &s.arena[0][0];
  rec.arenas.count = s.arenas;
  fmt::RecordEncoder e(big, sizeof(big));
  if (fmt::Encode(e, rec)) Push(t, big, e.size());
}

void AllocStatsRequest(uint64_t step) {
  if (!g_features.alloc_stats) return;
  if (MonoNs() < g_next_resident_ns.load(std::memory_order_relaxed)) return;
  g_request.store(step + 1, std::memory_order_relaxed);
  WakeWriterForStats();
}

void AllocStatsWriterPoll(ThreadState& t) {
  const uint64_t request = g_request.exchange(0, std::memory_order_relaxed);
  if (request == 0 || !Recording()) return;
  const uint64_t start = MonoNs();
  if (start < g_next_resident_ns.load(std::memory_order_relaxed)) return;
  AllocStats s;
  Clear(&s);
  uint64_t anon = 0, file = 0;
  const uint64_t cpu0 = ThreadCpuNs();
  if (start >= g_next_smaps_ns.load(std::memory_order_relaxed) && ReadSmapsRollup(&anon, &file)) {
    const uint64_t cpu1 = ThreadCpuNs();
    const uint64_t cost = cpu1 > cpu0 ? cpu1 - cpu0 : 0;
    g_next_smaps_ns.store(MonoNs() + kSmapsBudget * cost, std::memory_order_relaxed);
    s.values[kAnon] = static_cast<int64_t>(anon);
    s.values[kFile] = static_cast<int64_t>(file);
    s.values[kSource] = 1;
    s.values[kSmapsCost] = static_cast<int64_t>(cost);
  } else if (ReadStatm(&anon, &file)) {  // resident, shared
    s.values[kAnon] = static_cast<int64_t>(anon > file ? anon - file : 0);
    s.values[kFile] = static_cast<int64_t>(file);
    s.values[kSource] = 2;
  }
  CollectOwn(&s);
  // smaps_rollup has its own clock above; memstep's own memory and statm this one.
  const int64_t own = s.values[kOwnCost] > 0 ? s.values[kOwnCost] : 0;
  g_next_resident_ns.store(MonoNs() + kResidentBudget * static_cast<uint64_t>(own),
                           std::memory_order_relaxed);
  static uint32_t step_name = 0;  // the writer thread only
  if (step_name == 0) step_name = g_dict.InternString("stats.step", StrLen("stats.step"));
  if (step_name == 0) return;  // rows without their step would attach nowhere
  EmitCounter(t, step_name, static_cast<int64_t>(request - 1));
  EmitValues(t, s);
}

// The child's trace re-emits the parent's dictionary: the name ids stay valid.
void AllocStatsForkChild() {
  g_next_ns.store(0, std::memory_order_relaxed);
  g_next_smaps_ns.store(0, std::memory_order_relaxed);
  g_next_resident_ns.store(0, std::memory_order_relaxed);
  g_request.store(0, std::memory_order_relaxed);
  g_collect_lock.Reset();
}

}  // namespace memstep::preload
