// Python's own allocator (pymalloc): its blocks counted and sampled like malloc's.
//
// CPython serves requests of up to 512 bytes from pymalloc: pools of one size
// class inside 1 MiB arenas that it takes with mmap. The malloc hooks never see
// those blocks, and the arenas show up as anonymous mmaps. memstep_pymem_install
// (called from memstep's sitecustomize through ctypes.PyDLL, so with the GIL
// held, before the user's program runs) wraps, as tracemalloc does:
//
//  - the object and mem domains (PyMem_SetAllocator): every block the previous
//    allocator returns that lies in an arena known to memstep is counted in the
//    exact counters (its size class, read back from the pool header, at
//    allocation and at free: the same number both times) and goes through the
//    same Poisson countdown as malloc (requested size + 1), so a sampled block
//    gets an ALLOC record of kind kKindPymalloc with its stack (Python frames
//    from pyframes.cc) and its FREE record. Anything else the previous
//    allocator returns (requests above 512 bytes, zero-size requests, a failed
//    pool allocation: pymalloc passes them on to PyMem_RawMalloc, so to malloc)
//    is the malloc hooks' and is not counted here. The raw domain is not
//    wrapped: all it serves is malloc's.
//  - the arena allocator (PyObject_SetArenaAllocator): each arena mapped after
//    the install is entered in an address table (and its mmap, made under the
//    reentrancy guard, is not recorded as an anonymous mapping). The arenas
//    mapped before the install are found by their pools' headers and adopted
//    (AdoptArenas): entered too, their blocks in use counted as allocated at
//    once, their mapping taken out of the anonymous mappings. What is counted
//    is counted symmetrically and exactly.
//
// Block sizes come from the pool header at the pool's start (address & ~(POOL
// SIZE - 1)): szidx (u32 at offset 36) gives the block size (szidx + 1) * 16.
// The install validates that layout against blocks it allocates itself (every
// header field must match for each of 34 requests; the pool size, 16 KiB or 4
// KiB, is found the same way; headers are read with process_vm_readv, which
// cannot fault) and does not hook anything when it fails: PYTHONMALLOC=malloc
// or debug, a free-threaded build (mimalloc), an unknown layout.
//
// Free-listed objects (CPython 3.13+): CPython keeps freed objects of some
// types (floats, tuples, lists, dicts, ...) on free lists and hands them out
// again without calling the allocator, so a sampled block's stack is the line
// that allocated it, not the line that created the object living in it now.
// While a host leak hunt runs, a reference tracer (PyRefTracer_SetTracer,
// called at every object creation with the GIL held) re-stamps a sampled
// block of a free-listed type (float, tuple, list, dict, slice) when an
// object is created in it at another Python place (two frames): FREE and
// ALLOC records with the block's size and T (its weight does not change),
// and the new stack; a screen moves to the new line's tally (or becomes a
// sample when that line is a hunt target, drawn at the same T). Installed
// only when no other tracer is (tracemalloc's), removed when the hunt ends;
// 3.10-3.12 have no such hook. MEMSTEP_PY_RESTAMP=0 turns it off.
//
// Sampled blocks are marked in a bitmap per arena (one bit per 16 bytes), read
// at every free of a counted block. The object and mem domains are called with
// the GIL held (one GIL per obmalloc state, also with 3.12's per-interpreter
// GILs), so a block and its arena's bits change under one GIL; the arena table
// is shared by all interpreters and changes under a spinlock, read lock-free.

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>

#include "preload/core/fds.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "preload/python/freelists.h"
#include "preload/python/pymem_layout.h"
#include "preload/steps/config.h"
#include "src/format/format.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

bool SafeRead(uintptr_t addr, void* out, size_t n, bool* denied);  // below

namespace {

struct PyMemAllocatorEx {
  void* ctx;
  void* (*malloc)(void* ctx, size_t size);
  void* (*calloc)(void* ctx, size_t nelem, size_t elsize);
  void* (*realloc)(void* ctx, void* ptr, size_t new_size);
  void (*free)(void* ctx, void* ptr);
};
struct PyObjectArenaAllocator {
  void* ctx;
  void* (*alloc)(void* ctx, size_t size);
  void (*free)(void* ctx, void* ptr, size_t size);
};
enum { kDomainRaw = 0, kDomainMem = 1, kDomainObj = 2 };

using GetAllocatorFn = void (*)(int, PyMemAllocatorEx*);
using SetAllocatorFn = void (*)(int, PyMemAllocatorEx*);
using GetArenaFn = void (*)(PyObjectArenaAllocator*);
using SetArenaFn = void (*)(PyObjectArenaAllocator*);
using NameFn = const char* (*)();

// ---- the arena table ----
//
// Two levels: addr >> 32 selects a leaf (allocated on first use), then the
// 256 KiB granule within those 4 GiB. An arena of size S >= 256 KiB overlaps
// at most two arenas per granule, so each granule has two slots.
constexpr int kGranuleShift = 18;
constexpr size_t kLeafEntries = size_t{1} << (32 - kGranuleShift);
constexpr size_t kTopEntries = size_t{1} << 16;  // 48-bit user addresses

struct Arena {
  uintptr_t base;
  size_t size;
  uint64_t* bits;  // one bit per 16 bytes: sampled blocks
  size_t bits_len;
  Arena* next_free;
  bool adopted;  // mapped before the install (AdoptArenas): base is its first pool
};
struct Granule {
  std::atomic<Arena*> slot[2];
};
struct Leaf {
  Granule g[kLeafEntries];
};

std::atomic<Leaf*>* g_top = nullptr;  // kTopEntries
SpinLock g_arena_lock;                // registration and removal
Arena* g_arena_free = nullptr;        // free list of records (under the lock)
Arena* g_arena_pool = nullptr;        // bump allocation of records
size_t g_arena_pool_left = 0;

PyMemAllocatorEx g_prev[3];
PyObjectArenaAllocator g_prev_arena;
size_t g_pool_size = 0;           // validated POOL_SIZE
size_t g_arena_size = 0;          // of the first arena seen; others are not entered
std::atomic<int> g_installed{0};  // 0 not tried, 1 hooked, 2 refused

MEMSTEP_ALWAYS_INLINE Arena* FindArena(uintptr_t a) {
  Leaf* leaf = g_top[(a >> 32) & (kTopEntries - 1)].load(std::memory_order_acquire);
  if (leaf == nullptr) return nullptr;
  Granule& g = leaf->g[(a >> kGranuleShift) & (kLeafEntries - 1)];
  for (auto& s : g.slot) {
    Arena* ar = s.load(std::memory_order_acquire);
    if (ar != nullptr && a - ar->base < ar->size) return ar;
  }
  return nullptr;
}

// Under g_arena_lock.
Granule* GranuleFor(uintptr_t a, bool create) {
  std::atomic<Leaf*>& top = g_top[(a >> 32) & (kTopEntries - 1)];
  Leaf* leaf = top.load(std::memory_order_acquire);
  if (leaf == nullptr) {
    if (!create) return nullptr;
    leaf = static_cast<Leaf*>(RawMmap(sizeof(Leaf)));
    if (leaf == nullptr) return nullptr;
    top.store(leaf, std::memory_order_release);
  }
  return &leaf->g[(a >> kGranuleShift) & (kLeafEntries - 1)];
}

bool RegisterArena(uintptr_t base, size_t size) {
  size_t bits_len = ((size >> 4) + 63) / 64 * 8;
  auto* bits = static_cast<uint64_t*>(RawMmap(bits_len));
  if (bits == nullptr) return false;
  SpinLockHolder lock(&g_arena_lock);
  Arena* ar = g_arena_free;
  if (ar != nullptr) {
    g_arena_free = ar->next_free;
  } else {
    if (g_arena_pool_left == 0) {
      g_arena_pool = static_cast<Arena*>(RawMmap(size_t{1} << 16));
      if (g_arena_pool == nullptr) {
        RawMunmap(bits, bits_len);
        return false;
      }
      g_arena_pool_left = (size_t{1} << 16) / sizeof(Arena);
    }
    ar = g_arena_pool++;
    --g_arena_pool_left;
  }
  ar->base = base;
  ar->size = size;
  ar->bits = bits;
  ar->bits_len = bits_len;
  ar->next_free = nullptr;
  ar->adopted = false;
  // Every granule the arena overlaps needs a free slot (at most two arenas of
  // size >= 256 KiB overlap one granule, but be defensive).
  uintptr_t first = base >> kGranuleShift, last = (base + size - 1) >> kGranuleShift;
  for (uintptr_t gi = first; gi <= last; ++gi) {
    Granule* g = GranuleFor(gi << kGranuleShift, true);
    if (g == nullptr || (g->slot[0].load(std::memory_order_relaxed) != nullptr &&
                         g->slot[1].load(std::memory_order_relaxed) != nullptr)) {
      for (uintptr_t gj = first; gj < gi; ++gj) {  // undo
        Granule* h = GranuleFor(gj << kGranuleShift, false);
        for (auto& s : h->slot) {
          if (s.load(std::memory_order_relaxed) == ar) s.store(nullptr, std::memory_order_release);
        }
      }
      RawMunmap(bits, bits_len);
      ar->next_free = g_arena_free;
      g_arena_free = ar;
      return false;
    }
    auto& s = g->slot[0].load(std::memory_order_relaxed) == nullptr ? g->slot[0] : g->slot[1];
    s.store(ar, std::memory_order_release);
  }
  return true;
}

// Removes the arena at `base` (true) or finds none (false).
bool UnregisterArena(uintptr_t base) {
  Arena* ar = FindArena(base);
  if (ar == nullptr || ar->base != base) return false;
  SpinLockHolder lock(&g_arena_lock);
  uintptr_t first = base >> kGranuleShift, last = (base + ar->size - 1) >> kGranuleShift;
  for (uintptr_t gi = first; gi <= last; ++gi) {
    Granule* g = GranuleFor(gi << kGranuleShift, false);
    if (g == nullptr) continue;
    for (auto& s : g->slot) {
      if (s.load(std::memory_order_relaxed) == ar) s.store(nullptr, std::memory_order_release);
    }
  }
  // No block of an arena being freed is live, so no reader holds `ar`.
  RawMunmap(ar->bits, ar->bits_len);
  ar->bits = nullptr;
  ar->next_free = g_arena_free;
  g_arena_free = ar;
  return true;
}

// ---- blocks ----

struct Block {
  Arena* arena;  // null: not counted here
  size_t size;   // size class (bytes)
  size_t bit;    // index in arena->bits
};

MEMSTEP_ALWAYS_INLINE Block Classify(const void* p) {
  Block b{nullptr, 0, 0};
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  Arena* ar = FindArena(a);
  if (ar == nullptr) return b;
  uintptr_t pool = a & ~(uintptr_t{g_pool_size} - 1);
  if (pool < ar->base) return b;  // never for a block of pymalloc
  uint32_t szidx;
  memcpy(&szidx, reinterpret_cast<const char*>(pool) + pymem::kPoolSzidx, sizeof(szidx));
  b.arena = ar;
  b.size = pymem::BlockSize(szidx);
  b.bit = (a - ar->base) >> 4;
  return b;
}

MEMSTEP_ALWAYS_INLINE bool BitTest(const Block& b) {
  return (b.arena->bits[b.bit >> 6] >> (b.bit & 63)) & 1;
}
MEMSTEP_ALWAYS_INLINE void BitSet(const Block& b, bool on) {
  uint64_t m = uint64_t{1} << (b.bit & 63);
  if (on) {
    b.arena->bits[b.bit >> 6] |= m;
  } else {
    b.arena->bits[b.bit >> 6] &= ~m;
  }
}

// ---- free-listed objects: re-stamping (3.13+) ----

using RefTracerFn = int (*)(void* op, int event, void* data);
using SetTracerFn = int (*)(RefTracerFn, void*);
using GetTracerFn = RefTracerFn (*)(void**);
SetTracerFn g_set_tracer = nullptr;  // null: no re-stamping
GetTracerFn g_get_tracer = nullptr;
std::atomic<bool> g_tracer_on{false};

// The types CPython 3.13 keeps on free lists that Python code creates often,
// and the size of their pre-header (a PyGC_Head of 16 bytes for the GC'd
// ones): other objects were just allocated, and sampled (or not) at the
// line that creates them.
constexpr int kFreeListTypes = 5;
const void* g_fl_type[kFreeListTypes];
uint8_t g_fl_pre[kFreeListTypes];

// The stamps, re-stamps and pending re-stamps below change under the GIL
// (the tracer and the pymalloc hooks' slow paths); with 3.12+'s per-
// interpreter GILs two interpreters may race on a slot, which only costs a
// stack or a record, or leaves one block with its previous owner.

// Each recently re-stamped block, direct-mapped: the Python place (first two
// frames) of its last object's creation, and its re-stamps in the current
// step. An object created again at the same place costs no stack and no
// record; a collision only costs a lookup.
struct Stamp {
  uintptr_t block;
  uint64_t where;
  uint64_t step;
  uint32_t restamps;
};
constexpr int kStampBits = 12;
Stamp g_stamp[size_t{1} << kStampBits];
MEMSTEP_ALWAYS_INLINE Stamp& StampOf(uintptr_t block) {
  return g_stamp[((block >> 4) * 0x9E3779B97F4A7C15ull) >> (64 - kStampBits)];
}

// The stack last captured at each Python place, direct-mapped: a block that
// objects created at a few places take in turn (a churning free list) costs
// no stack after the first at each place.
struct StackMemo {
  uint64_t where;
  uint32_t stack;
};
constexpr int kMemoBits = 10;
StackMemo g_memo[size_t{1} << kMemoBits];

uint32_t StackAt(ThreadState& t, uint64_t where) {
  StackMemo& m = g_memo[(where * 0x9E3779B97F4A7C15ull) >> (64 - kMemoBits)];
  if (m.where == where) return m.stack;
  m.stack = CaptureStackUntimed(t);
  m.where = where;
  return m.stack;
}

// Re-stamps deferred to the step's end: a block re-stamped again in the same
// step (a float that two lines create in turn, thousands of times a step)
// gets the records of its last owner only, once the step is over (at the
// next slow path of a later step: FlushPending). Full: re-stamped at once.
struct Pending {
  uintptr_t block;
  uint32_t stack;
};
constexpr int kPendingCap = 64;
Pending g_pending[kPendingCap];
int g_npending = 0;
uint64_t g_pending_step = 0;

void ForgetStamps() {
  memset(g_stamp, 0, sizeof(g_stamp));
  memset(g_memo, 0, sizeof(g_memo));
  g_npending = 0;
}

// The tracked sampled block `block` now belongs to `stack`: FREE and ALLOC
// records with its size and T (its weight unchanged), nothing if it already
// does or is not tracked (any more).
void Restamp(ThreadState& t, uintptr_t block, uint32_t stack) {
  const Block b = Classify(reinterpret_cast<void*>(block));
  if (b.arena == nullptr || !BitTest(b)) return;  // freed since (a pending one)
  TrackedBlock old;
  if (stack == 0 || !SitesPeekBlock(block, &old) || (old.stack & kScreenKeyBit) != 0 ||
      old.stack == stack || !SitesTakeBlock(block, &old)) {
    return;
  }
  EmitFree(t, reinterpret_cast<void*>(block), NextSeq());
  EmitAlloc(t, reinterpret_cast<void*>(block), old.size, old.interval, fmt::kKindPymalloc, stack);
}

// Guard held. Runs the pending re-stamps of an earlier step.
void FlushPending(ThreadState& t) {
  if (g_npending == 0 || g_pending_step == g_cur_step.load(std::memory_order_relaxed)) return;
  const int n = g_npending;
  g_npending = 0;
  if (!Recording()) return;
  for (int i = 0; i < n; ++i) Restamp(t, g_pending[i].block, g_pending[i].stack);
}

// A sampled block was freed (its FREE record written): no pending re-stamp.
void ForgetPending(uintptr_t block) {
  for (int i = 0; i < g_npending; ++i) {
    if (g_pending[i].block == block) {
      g_pending[i] = g_pending[--g_npending];
      return;
    }
  }
}

bool Defer(uintptr_t block, uint32_t stack, uint64_t step) {
  for (int i = 0; i < g_npending; ++i) {
    if (g_pending[i].block == block) {
      g_pending[i].stack = stack;
      return true;
    }
  }
  if (g_npending == kPendingCap) return false;
  g_pending[g_npending++] = {block, stack};
  g_pending_step = step;
  return true;
}

// An object was created in a sampled block (the tracer, GIL held).
MEMSTEP_NOINLINE void RestampSlow(ThreadState& t, uintptr_t block) {
  if (block == t.pymem_fresh) {
    t.pymem_fresh = 0;  // its own allocation sampled it a moment ago
    return;
  }
  t.pymem_fresh = 0;
  if (t.guard) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  if (!Recording()) return;
  const uint64_t where = PyFramesKey(2);
  if (where == 0) return;
  Stamp& st = StampOf(block);
  if (st.block == block && st.where == where) return;
  const uint64_t step = g_cur_step.load(std::memory_order_relaxed);
  if (st.block != block || st.step != step) {
    st.block = block;
    st.step = step;
    st.restamps = 0;
  }
  st.where = where;
  FlushPending(t);
  TrackedBlock old;
  if (!SitesPeekBlock(block, &old)) return;
  SampleCost cost(false);
  if ((old.stack & kScreenKeyBit) != 0) {
    const uint32_t ctx = PyFramesContext();
    if (ctx == 0 || old.stack == ctx || !SitesTakeBlock(block, &old)) return;
    if (!SitesIsTarget(ctx)) {
      cost.set_screen();
      SitesOnAlloc(block, old.size, old.slack, old.interval, ctx);
      return;
    }
    // A target's draws are samples with stacks at the T they were drawn with.
    EmitAlloc(t, reinterpret_cast<void*>(block), old.size, old.interval, fmt::kKindPymalloc,
              StackAt(t, where));
    return;
  }
  const uint32_t stack = StackAt(t, where);
  if (st.restamps++ > 0 && Defer(block, stack, step)) return;
  Restamp(t, block, stack);
}

int RefTrace(void* op, int event, void*) {
  if (event != 0) return 0;  // PyRefTracer_CREATE only
  const void* type;
  memcpy(&type, static_cast<const char*>(op) + 8, sizeof(type));  // ob_type
  int i = 0;
  while (i < kFreeListTypes && g_fl_type[i] != type) ++i;
  if (i == kFreeListTypes) return 0;
  const uintptr_t block = reinterpret_cast<uintptr_t>(op) - g_fl_pre[i];
  // Classify without reading the pool header: only the sampled bit counts.
  Arena* ar = FindArena(block);
  if (ar == nullptr || !BitTest({ar, 0, (block - ar->base) >> 4})) return 0;
  RestampSlow(t_state, block);
  return 0;
}

// The tracer follows the hunt (GIL held: the pymalloc hooks' slow paths),
// while memstep records.
void SyncRefTracer() {
  if (g_set_tracer == nullptr) return;
  const bool want = SitesHunting() && PyFramesActive() && Recording();
  if (want == g_tracer_on.load(std::memory_order_relaxed)) return;
  void* data = nullptr;
  const RefTracerFn cur = g_get_tracer(&data);
  if (want) {
    if (cur != nullptr) return;  // another's (tracemalloc's): left alone
    if (g_set_tracer(RefTrace, nullptr) == 0) g_tracer_on.store(true, std::memory_order_relaxed);
  } else {
    if (cur == RefTrace) g_set_tracer(nullptr, nullptr);
    g_tracer_on.store(false, std::memory_order_relaxed);
  }
}

// A sampled block: stack, bit, ALLOC record. Countdown already ran out.
MEMSTEP_NOINLINE void SampleSlow(ThreadState& t, const void* p, size_t req, const Block& b,
                                 uint8_t kind) {
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  SyncRefTracer();
  FlushPending(t);
  uint64_t interval = 0;
  if (!DecideSample(t, &interval)) return;
  uint32_t key = 0;
  const SampleKind what = ChooseSample(t, req, true, &interval, &key);
  if (what == kSampleNone) return;
  t.pymem_fresh = reinterpret_cast<uintptr_t>(p);
  SampleCost cost(true);  // the whole sample (recorder.h)
  if (what == kSampleScreen) {
    // No stack and no record: tallied under its Python context.
    cost.set_screen();
    if (Recording() &&
        SitesOnAlloc(reinterpret_cast<uintptr_t>(p), req, SampleSlack(req, true), interval, key)) {
      BitSet(b, true);
    }
    return;
  }
  uint32_t stack = CaptureStackUntimed(t);
  BitSet(b, true);
  EmitAlloc(t, p, req, interval, kind, stack);
}

MEMSTEP_NOINLINE void FreeSampledSlow(ThreadState& t, const void* p, const Block& b) {
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  SyncRefTracer();
  ForgetPending(reinterpret_cast<uintptr_t>(p));
  FlushPending(t);
  SampleCost cost(false);
  BitSet(b, false);
  if (SitesOnFree(reinterpret_cast<uintptr_t>(p))) {
    EmitFree(t, p, NextSeq());
  } else {
    cost.set_screen();
  }
}

// The accounting of a new block p of `req` requested bytes.
MEMSTEP_ALWAYS_INLINE void OnAlloc(void* p, size_t req, uint8_t kind) {
  if (p == nullptr) return;
  Block b = Classify(p);
  if (b.arena == nullptr) return;  // malloc's (seen by the malloc hooks) or uncounted
  ThreadState& t = t_state;
  CountAlloc(t, b.size);
  if (t.guard) return;
  const uint64_t fl = g_fl_step;  // 0 but for one step as a hunt begins (freelists.h)
  if (MEMSTEP_UNLIKELY(fl != 0 && fl != g_cur_step.load(std::memory_order_relaxed) + 1)) {
    FreeListsStep();
  }
  t.bytes_until_sample -= static_cast<int64_t>(req + 1);
  if (MEMSTEP_UNLIKELY(t.bytes_until_sample < 0)) {
    SampleSlow(t, p, req, b, kind);
    FreeListsSync();  // 3.10-3.12, outside the guard
  }
}

// The accounting of freeing p (before the previous allocator frees it: the
// FREE record's sequence number comes before the block can be reused).
MEMSTEP_ALWAYS_INLINE void OnFree(void* p) {
  if (p == nullptr) return;
  Block b = Classify(p);
  if (b.arena == nullptr) return;
  ThreadState& t = t_state;
  if (MEMSTEP_UNLIKELY(BitTest(b))) {
    if (t.guard) {
      BitSet(b, false);  // nested in memstep (not expected): count only
    } else {
      FreeSampledSlow(t, p, b);
    }
  }
  CountFree(t, b.size);
}

template <int D>
void* WrapMalloc(void*, size_t n) {
  void* p = g_prev[D].malloc(g_prev[D].ctx, n);
  OnAlloc(p, n, fmt::kKindPymalloc);
  return p;
}

template <int D>
void* WrapCalloc(void*, size_t m, size_t n) {
  void* p = g_prev[D].calloc(g_prev[D].ctx, m, n);
  OnAlloc(p, m * n, fmt::kKindPymalloc);  // no overflow when p != NULL
  return p;
}

template <int D>
void* WrapRealloc(void*, void* p, size_t n) {
  if (p == nullptr) {
    void* q = g_prev[D].realloc(g_prev[D].ctx, nullptr, n);
    OnAlloc(q, n, fmt::kKindPymalloc);
    return q;
  }
  Block old = Classify(p);
  if (old.arena == nullptr) {
    // A malloc block (or an uncounted one) stays where it is or moves to
    // malloc: pymalloc never moves a block it does not own into a pool.
    void* q = g_prev[D].realloc(g_prev[D].ctx, p, n);
    if (q != p) OnAlloc(q, n, fmt::kKindPymalloc);
    return q;
  }
  ThreadState& t = t_state;
  const bool sampled = BitTest(old);
  uint64_t free_seq = sampled && !t.guard ? NextSeq() : 0;
  void* q = g_prev[D].realloc(g_prev[D].ctx, p, n);
  if (q == nullptr) return nullptr;  // p is untouched (and still sampled)
  // p was released (or reused in place) under the GIL this thread holds: no
  // one else can have taken it yet.
  if (sampled) {
    if (t.guard) {
      BitSet(old, false);
    } else {
      GuardScope guard(t);
      ErrnoSaver errno_saver;
      EnsureThread(t);
      BitSet(old, false);
      ForgetPending(reinterpret_cast<uintptr_t>(p));
      if (SitesOnFree(reinterpret_cast<uintptr_t>(p))) EmitFree(t, p, free_seq);
    }
  }
  CountFree(t, old.size);
  OnAlloc(q, n, fmt::kKindPymalloc);  // a pool block again, or malloc's (> 512 B)
  return q;
}

template <int D>
void WrapFree(void*, void* p) {
  OnFree(p);
  g_prev[D].free(g_prev[D].ctx, p);
}

void* WrapArenaAlloc(void*, size_t size) {
  ThreadState& t = t_state;
  if (t.guard) return g_prev_arena.alloc(g_prev_arena.ctx, size);
  void* a;
  {
    GuardScope guard(t);
    t.guarded_mmap = 0;
    a = g_prev_arena.alloc(g_prev_arena.ctx, size);
  }
  // Entered only when the arena is the anonymous mapping just made under the
  // guard (so not recorded as one); an arena from malloc or a mapping that
  // was recorded stays what it is, and its blocks are not counted.
  const bool mapped = a != nullptr && reinterpret_cast<uintptr_t>(a) == t.guarded_mmap;
  if (!mapped) return a;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  if ((g_arena_size == 0 || size == g_arena_size) && size >= (size_t{1} << kGranuleShift) &&
      RegisterArena(reinterpret_cast<uintptr_t>(a), size)) {
    if (g_arena_size == 0) g_arena_size = size;
  } else if (Recording()) {
    // Not entered (no memory for the table, an unexpected size): the mapping
    // is counted as the anonymous mmap it is, and its blocks are not.
    RecordMmap(a, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
  }
  return a;
}

void WrapArenaFree(void*, void* p, size_t size) {
  ThreadState& t = t_state;
  bool ours;
  {
    GuardScope guard(t);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    ours = UnregisterArena(a);
    if (!ours) {
      // An adopted arena: its first pool is where it is entered. Its munmap
      // is recorded (the slivers outside its pools are still mappings).
      const uintptr_t first = (a + g_pool_size - 1) & ~(uintptr_t{g_pool_size} - 1);
      Arena* ar = FindArena(first);
      if (ar != nullptr && ar->adopted && ar->base == first) UnregisterArena(first);
    }
  }
  if (ours) {
    GuardScope guard(t);  // its munmap is not an anonymous mapping's
    g_prev_arena.free(g_prev_arena.ctx, p, size);
  } else {
    g_prev_arena.free(g_prev_arena.ctx, p, size);
  }
}

// ---- validation ----

// The pool size for which every block of `ptrs` (requested sizes `sizes`) has
// a consistent pool header, or 0.
size_t ValidateLayout(void* const* ptrs, const size_t* sizes, int n, bool* denied) {
  static const size_t kCandidates[] = {size_t{1} << 14, size_t{1} << 12};
  for (size_t ps : kCandidates) {
    bool ok = true;
    for (int i = 0; i < n && ok; ++i) {
      uintptr_t a = reinterpret_cast<uintptr_t>(ptrs[i]);
      uintptr_t pool = a & ~(uintptr_t{ps} - 1);
      uint8_t hdr[pymem::kPoolHeaderSize];
      ok = ptrs[i] != nullptr && SafeRead(pool, hdr, sizeof(hdr), denied) &&
           pymem::HeaderMatches(hdr, ps, a - pool, sizes[i]);
    }
    if (ok) return ps;
  }
  return 0;
}

// A switch that is off when its variable is exactly "0" (MEMSTEP_PYMEM,
// MEMSTEP_PY_RESTAMP, MEMSTEP_PY_ADOPT).
bool SwitchedOff(const char* name) {
  const char* env = getenv(name);
  return env != nullptr && env[0] == '0' && env[1] == '\0';
}

void Say(const char* msg) {
  if (!g_config.quiet) SayOnStderr(msg, strlen(msg));
}

void NoticeOnce(const char* text) {
  if (!Recording()) return;
  ThreadState& t = t_state;
  GuardScope guard(t);
  EnsureThread(t);
  EmitNoticeRecord(t, text);
}

void AtforkPrepare() { g_arena_lock.Lock(); }
void AtforkParent() { g_arena_lock.Unlock(); }
void AtforkChild() {
  g_arena_lock.Reset();
  ForgetStamps();  // a child's stacks may be numbered anew
}

void Refuse(const char* why) {
  g_installed.store(2, std::memory_order_release);
  char line[512];
  size_t n = 0;
  auto put = [&](const char* s) {
    while (*s != '\0' && n + 2 < sizeof(line)) line[n++] = *s++;
  };
  put("memstep: Python's allocator not hooked: ");
  put(why);
  put("; Python objects of up to 512 bytes are not counted");
  line[n] = '\0';
  // In the trace only (the report lists it): memstep still records, so the
  // program's stderr stays its own (CPython's test_cmd_line compares the
  // stderr of `python -X dev`, where pymalloc runs with its debug hooks).
  NoticeOnce(line);
}

// CPython's allocator API, looked up in the process (all null: not Python).
struct PyAllocatorApi {
  GetAllocatorFn get = nullptr;
  SetAllocatorFn set = nullptr;
  GetArenaFn get_arena = nullptr;
  SetArenaFn set_arena = nullptr;
  int (*gil_check)() = nullptr;
};

// True when every function of the API is there.
bool FindPyAllocatorApi(PyAllocatorApi* api) {
  api->get = reinterpret_cast<GetAllocatorFn>(OwnDlsym(RTLD_DEFAULT, "PyMem_GetAllocator"));
  api->set = reinterpret_cast<SetAllocatorFn>(OwnDlsym(RTLD_DEFAULT, "PyMem_SetAllocator"));
  api->get_arena =
      reinterpret_cast<GetArenaFn>(OwnDlsym(RTLD_DEFAULT, "PyObject_GetArenaAllocator"));
  api->set_arena =
      reinterpret_cast<SetArenaFn>(OwnDlsym(RTLD_DEFAULT, "PyObject_SetArenaAllocator"));
  api->gil_check = reinterpret_cast<int (*)()>(OwnDlsym(RTLD_DEFAULT, "PyGILState_Check"));
  return api->get != nullptr && api->set != nullptr && api->get_arena != nullptr &&
         api->set_arena != nullptr && api->gil_check != nullptr;
}

// Validation: blocks of every kind of size, from the current object
// allocator, checked against pymalloc's pool layout (ValidateLayout) and
// freed. Returns the validated POOL_SIZE, or 0 (*denied: the process may not
// read its own memory with process_vm_readv).
size_t ProbePoolSize(const PyAllocatorApi& api, bool* denied) {
  PyMemAllocatorEx obj;
  api.get(kDomainObj, &obj);
  static const size_t kSizes[] = {1,   8,   15,  16,  17,  24,  31,  32,  33,  48,  63,  64,
                                  65,  96,  100, 128, 129, 160, 200, 255, 256, 257, 300, 320,
                                  384, 385, 400, 448, 480, 500, 504, 510, 511, 512};
  constexpr int kN = sizeof(kSizes) / sizeof(kSizes[0]);
  void* ptrs[kN];
  for (int i = 0; i < kN; ++i) ptrs[i] = obj.malloc(obj.ctx, kSizes[i]);
  size_t ps;
  {
    ErrnoSaver errno_saver;
    ps = ValidateLayout(ptrs, kSizes, kN, denied);
  }
  for (int i = kN - 1; i >= 0; --i) {
    if (ptrs[i] != nullptr) obj.free(obj.ctx, ptrs[i]);
  }
  return ps;
}

// The layout was not recognised: says why (in the trace), or, when Python's
// allocator is malloc itself, that nothing is lost.
void DeclineUnknownLayout(bool denied) {
  auto name_fn = reinterpret_cast<NameFn>(OwnDlsym(RTLD_DEFAULT, "_PyMem_GetCurrentAllocatorName"));
  const char* name = name_fn != nullptr ? name_fn() : nullptr;
  if (name != nullptr && strncmp(name, "malloc", 6) == 0) {
    // PYTHONMALLOC=malloc or malloc_debug: every Python object comes from
    // malloc and is counted by the malloc hooks. Nothing is lost: a NOTICE
    // in the trace only.
    g_installed.store(2, std::memory_order_release);
    NoticeOnce(strcmp(name, "malloc") == 0
                   ? "Python's allocator is malloc (PYTHONMALLOC=malloc): not wrapped, its "
                     "objects are counted by the malloc hooks"
                   : "Python's allocator is malloc with debug hooks (PYTHONMALLOC="
                     "malloc_debug): not wrapped, its objects are counted by the malloc hooks");
    return;
  }
  if (denied) {
    Refuse(
        "process_vm_readv is not permitted here (a seccomp filter?), so pymalloc's pool "
        "layout cannot be checked safely");
    return;
  }
  char why[160] = "pymalloc's pool layout was not recognised (allocator: ";
  size_t n = strlen(why);
  const char* nm = name != nullptr ? name : "unknown";
  while (*nm != '\0' && n + 3 < sizeof(why)) why[n++] = *nm++;
  why[n++] = ')';
  why[n] = '\0';
  Refuse(why);
}

// ---- arenas mapped before the install ----
//
// The arenas CPython mapped before memstep_pymem_install (the interpreter's
// start, site's imports) hold the objects made then and free blocks that
// later objects take: uncounted, a leak's objects that land there would be
// missed. They are recorded anonymous mappings; a pool is known by its
// header (PoolPlausible: every field consistent with one size class and with
// the blocks carved so far), and the pools of one arena share its index. An
// arena is entered from its first pool for ARENA_SIZE - POOL_SIZE bytes, or
// ARENA_SIZE where its recorded mapping begins at that pool (an arena that
// starts on a pool boundary has one pool more; CPython maps each arena by
// itself, and the mapping records keep each call's range), when every pool
// in that window is either plausible with the same index or never carved
// (all zero). A last pool left out would hold blocks counted neither way, and
// the live bytes at a step's end would then move with where the allocator
// put that step's survivors (a 3.11 loop's heap zigzagged by 16 KiB a step
// in a quarter of its runs); its
// blocks in use then are counted as allocated at once, and the window leaves
// the anonymous mappings (a MUNMAP record; the arena's own munmap is
// recorded as ever, for the slivers outside the window).

bool PoolPlausible(uintptr_t pool, size_t ps, uint32_t* index, uint64_t* live, bool* zero) {
  uint8_t hdr[pymem::kPoolHeaderSize];
  bool denied = false;
  *zero = false;
  if (!SafeRead(pool, hdr, sizeof(hdr), &denied)) return false;
  uint8_t any = 0;
  for (uint8_t c : hdr) any |= c;
  if (any == 0) {
    *zero = true;
    return false;
  }
  const uint32_t szidx = pymem::HeaderU32(hdr, pymem::kPoolSzidx);
  if (szidx >= pymem::kSmallRequestThreshold >> pymem::kAlignmentShift) return false;
  const size_t bs = pymem::BlockSize(szidx);
  const uint32_t next = pymem::HeaderU32(hdr, pymem::kPoolNextOffset);
  const uint32_t count = pymem::HeaderU32(hdr, pymem::kPoolCount);
  if (pymem::HeaderU32(hdr, pymem::kPoolMaxNextOffset) != ps - bs || next > ps ||
      next < pymem::kPoolHeaderSize + bs || (next - pymem::kPoolHeaderSize) % bs != 0 ||
      count > (next - pymem::kPoolHeaderSize) / bs) {
    return false;
  }
  *index = pymem::HeaderU32(hdr, 32);  // arenaindex
  *live = uint64_t{count} * bs;
  return true;
}

// The arena whose first pool is `first` inside a mapping ending at `hi`:
// its blocks' bytes in use, or false.
bool ArenaAt(uintptr_t first, uintptr_t hi, size_t ps, size_t window, uint64_t* live) {
  if (first + window > hi) return false;
  uint32_t index = 0;
  bool zero;
  *live = 0;
  if (!PoolPlausible(first, ps, &index, live, &zero)) return false;
  for (uintptr_t q = first + ps; q < first + window; q += ps) {
    uint32_t i;
    uint64_t l;
    if (PoolPlausible(q, ps, &i, &l, &zero)) {
      if (i != index) return false;
      *live += l;
    } else if (!zero) {
      return false;
    }
  }
  return true;
}

void AdoptArenas() {
  if (SwitchedOff("MEMSTEP_PY_ADOPT")) return;  // a diagnostic
  const size_t ps = g_pool_size;
  const size_t window = (ps == (size_t{1} << 14) ? size_t{1} << 20 : size_t{1} << 18) - ps;
  uint64_t baseline = 0;
  // At most 16384 pool-sized steps (256 MiB of mappings with 16 KiB pools;
  // the install runs at start-up, when there are a few MiB): arenas past
  // that stay uncounted, as they were before adoption.
  size_t steps_left = size_t{1} << 14;
  constexpr size_t kParts = 32;
  uintptr_t parts[2 * kParts];
  uintptr_t from = 0;
  for (;;) {
    const size_t n = g_mmaps.Overlaps(from, UINTPTR_MAX, parts, kParts);
    for (size_t k = 0; k < n; ++k) {
      const uintptr_t lo = parts[2 * k], hi = parts[2 * k + 1];
      uintptr_t p = (lo + ps - 1) & ~(uintptr_t{ps} - 1);
      while (p + ps <= hi && steps_left-- > 0) {
        uint64_t live;
        // CPython maps each arena by itself: a recorded mapping that begins
        // on a pool boundary with a plausible first pool is an arena that
        // starts there, and has one pool more (the whole ARENA_SIZE).
        const size_t w = p == lo && hi - p >= window + ps ? window + ps : window;
        if (ArenaAt(p, hi, ps, w, &live) && RegisterArena(p, w)) {
          FindArena(p)->adopted = true;
          ForgetMapping(p, w);
          baseline += live;
          p += w;
        } else {
          p += ps;
        }
      }
    }
    if (n < kParts || steps_left == 0) break;
    from = parts[2 * n - 1];
  }
  if (baseline != 0) CountAlloc(t_state, baseline);
}

// Re-stamping needs 3.13's PyRefTracer API (and, while it runs, Python
// frames: SyncRefTracer) and the free-listed types with their flags.
void FindRefTracer() {
  if (SwitchedOff("MEMSTEP_PY_RESTAMP")) return;
  auto set = reinterpret_cast<SetTracerFn>(OwnDlsym(RTLD_DEFAULT, "PyRefTracer_SetTracer"));
  auto get = reinterpret_cast<GetTracerFn>(OwnDlsym(RTLD_DEFAULT, "PyRefTracer_GetTracer"));
  auto get_flags =
      reinterpret_cast<unsigned long (*)(const void*)>(OwnDlsym(RTLD_DEFAULT, "PyType_GetFlags"));
  auto* type_type = OwnDlsym(RTLD_DEFAULT, "PyType_Type");
  if (set == nullptr || get == nullptr || get_flags == nullptr || type_type == nullptr) return;
  static const char* const kNames[kFreeListTypes] = {"PyFloat_Type", "PyTuple_Type", "PyList_Type",
                                                     "PyDict_Type", "PySlice_Type"};
  constexpr unsigned long kHaveGc = 1ul << 14;
  constexpr unsigned long kPreheader = (1ul << 3) | (1ul << 4);  // managed dict, weakref
  for (int i = 0; i < kFreeListTypes; ++i) {
    const void* type = OwnDlsym(RTLD_DEFAULT, kNames[i]);
    if (type == nullptr) return;
    const void* meta;  // ob_type, where RefTrace reads it
    memcpy(&meta, static_cast<const char*>(type) + 8, sizeof(meta));
    if (meta != type_type) return;
    const unsigned long flags = get_flags(type);
    if ((flags & kPreheader) != 0) return;  // not 3.13's layout of these types
    g_fl_type[i] = type;
    g_fl_pre[i] = (flags & kHaveGc) != 0 ? 16 : 0;
  }
  g_get_tracer = get;
  g_set_tracer = set;
}

// Before 3.13 (no tracer), the free lists are bypassed during hunts instead
// (freelists.cc); on 3.13, the dicts' key tables' list, which the tracer
// cannot follow (a key table is no object). Found before the wrappers are in
// place: checking them creates and destroys objects.
void FindFreeLists() {
  if (SwitchedOff("MEMSTEP_PY_RESTAMP")) return;
  const char* why = FreeListsFind();
  if (why == nullptr || why[0] == '\0') return;
  char line[200] = "memstep: CPython's free lists not followed: ";
  size_t n = strlen(line);
  for (const char* s = why; *s != '\0' && n + 80 < sizeof(line); ++s) line[n++] = *s;
  const char* tail = "; objects reused from them keep the stack of their block's allocation";
  for (const char* s = tail; *s != '\0' && n + 1 < sizeof(line); ++s) line[n++] = *s;
  line[n] = '\0';
  NoticeOnce(line);
}

// Puts the wrappers in place: the domains first, then the arena allocator:
// an arena mapped in between (another interpreter, 3.12+) is simply
// unknown, and its blocks uncounted both ways. This thread holds the GIL:
// its own interpreter allocates nothing meanwhile.
void InstallWrappers(const PyAllocatorApi& api) {
  api.get(kDomainMem, &g_prev[kDomainMem]);
  api.get(kDomainObj, &g_prev[kDomainObj]);
  PyMemAllocatorEx mem = {nullptr, WrapMalloc<kDomainMem>, WrapCalloc<kDomainMem>,
                          WrapRealloc<kDomainMem>, WrapFree<kDomainMem>};
  PyMemAllocatorEx ob = {nullptr, WrapMalloc<kDomainObj>, WrapCalloc<kDomainObj>,
                         WrapRealloc<kDomainObj>, WrapFree<kDomainObj>};
  api.set(kDomainMem, &mem);
  api.set(kDomainObj, &ob);
  api.get_arena(&g_prev_arena);
  PyObjectArenaAllocator arena = {nullptr, WrapArenaAlloc, WrapArenaFree};
  api.set_arena(&arena);
}

}  // namespace

// Reads n bytes at `addr` without faulting. *denied: the system call itself
// is not allowed (a seccomp filter: EPERM, ENOSYS), as opposed to EFAULT.
bool SafeRead(uintptr_t addr, void* out, size_t n, bool* denied) {
  struct iovec local = {out, n};
  struct iovec remote = {reinterpret_cast<void*>(addr), n};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n)) return true;
  if (errno == EPERM || errno == ENOSYS) *denied = true;
  return false;
}

}  // namespace memstep::preload

using namespace memstep::preload;  // NOLINT: C entry point

// Hooks CPython's object and mem domains and its arena allocator (see above).
// Call with the GIL held, once the interpreter is initialised (memstep's
// sitecustomize does, through ctypes.PyDLL). Returns 1 when hooked (now or
// before), 0 otherwise: not a Python process (nothing happens), disabled
// (MEMSTEP_PYMEM=0, MEMSTEP_DISABLE), or refused (one line on stderr and a
// NOTICE in the trace saying why).
MEMSTEP_EXPORT int memstep_pymem_install(void) {
  int st = g_installed.load(std::memory_order_acquire);
  if (st != 0) return st == 1 ? 1 : 0;
  ResolveReal();
  PyAllocatorApi api;
  if (!FindPyAllocatorApi(&api)) {
    return 0;  // not a Python process: nothing to do, nothing to say
  }
  if (SwitchedOff("MEMSTEP_PYMEM")) {
    g_installed.store(2, std::memory_order_release);
    return 0;
  }
  if (g_config.disabled || g_state.load(std::memory_order_acquire) == kDisabled) return 0;
  if (!api.gil_check()) {
    Say("memstep: memstep_pymem_install called without the GIL; Python's allocator not hooked\n");
    return 0;
  }
  bool denied = false;
  const size_t ps = ProbePoolSize(api, &denied);
  if (ps == 0) {
    DeclineUnknownLayout(denied);
    return 0;
  }
  g_top = static_cast<std::atomic<Leaf*>*>(RawMmap(kTopEntries * sizeof(std::atomic<Leaf*>)));
  if (g_top == nullptr) {
    Refuse("no memory for the arena table");
    return 0;
  }
  g_pool_size = ps;
  pthread_atfork(AtforkPrepare, AtforkParent, AtforkChild);
  FindRefTracer();
  FindFreeLists();  // its probe objects (left on the lists) are in the baseline
  AdoptArenas();
  InstallWrappers(api);
  g_installed.store(1, std::memory_order_release);
  return 1;
}

namespace memstep::preload {
namespace {

// ---- interpreters memstep's sitecustomize did not reach ----
//
// python -I, -E or -S, a launcher that sets PYTHONPATH anew, an embedding
// program, a process preloaded by hand: nothing calls memstep_pymem_install.
// Once CPython says it is initialised, the writer starts a helper thread
// that takes the GIL (PyGILState_Ensure, as any C extension's thread does:
// the main thread lets go of it between two bytecodes) and makes the call.
// A helper, not the writer: a thread that waits for the GIL while the
// interpreter finalizes may be ended there (3.10, 3.11) or wait forever
// (3.12+). Once per process (a fork child tries again: its pid differs).
pid_t g_tried_pid = 0;  // writer thread only

// Its allocations (CPython's thread state for it, the install's probes) are
// counted and sampled as a program thread's are, as when sitecustomize makes
// the call from the main thread.
void* InstallHelper(void*) {
  OwnThreadsAdd(1);
  auto ensure = reinterpret_cast<int (*)()>(OwnDlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
  auto release = reinterpret_cast<void (*)(int)>(OwnDlsym(RTLD_DEFAULT, "PyGILState_Release"));
  auto finalizing = reinterpret_cast<int (*)()>(OwnDlsym(RTLD_DEFAULT, "Py_IsFinalizing"));
  if (finalizing == nullptr) {
    finalizing = reinterpret_cast<int (*)()>(OwnDlsym(RTLD_DEFAULT, "_Py_IsFinalizing"));
  }
  if (ensure != nullptr && release != nullptr && finalizing != nullptr && finalizing() == 0) {
    const int gil = ensure();
    if (finalizing() == 0) memstep_pymem_install();
    release(gil);
  }
  OwnThreadsAdd(-1);
  return nullptr;
}

}  // namespace

void PyMemPoll() {
  if (g_installed.load(std::memory_order_acquire) != 0) return;
  const pid_t pid = getpid();
  if (g_tried_pid == pid) return;
  // Not a Python process (yet: an embedding program may load it later): the
  // symbol is looked up again once in ten cycles only.
  static int (*initialized)() = nullptr;
  static int wait = 0;
  if (initialized == nullptr) {
    if (wait > 0) {
      --wait;
      return;
    }
    initialized = reinterpret_cast<int (*)()>(OwnDlsym(RTLD_DEFAULT, "Py_IsInitialized"));
    if (initialized == nullptr) {
      wait = 9;
      return;
    }
  }
  if (initialized() == 0 || SwitchedOff("MEMSTEP_PYMEM")) return;
  g_tried_pid = pid;
  StartOwnThread(InstallHelper);
}

}  // namespace memstep::preload

// For tests: 1 hooked, 2 refused or switched off, 0 not tried; *pool_size the
// validated POOL_SIZE.
MEMSTEP_EXPORT int memstep_pymem_state(uint64_t* pool_size) {
  if (pool_size != nullptr) *pool_size = g_pool_size;
  return g_installed.load(std::memory_order_acquire);
}
