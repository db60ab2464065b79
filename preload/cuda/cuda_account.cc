// Device-memory accounting: the address tables, exact live/peak counters per
// kind, the DEV_ALLOC / DEV_FREE / DEV_FAIL records, counting at the lowest
// layer that fired, VMM handle tracking and the fork handlers.
//
// Tables (all from RawMmap, created at the first recorded device allocation,
// so a process without CUDA pays nothing):
//  - pointers: 16 shards x 16384 slots, address -> DevBlock (size, kind,
//    device), each shard under its own spinlock. Device, managed,
//    pinned-host and pool pointers share it: with unified addressing they
//    never collide.
//  - VMM: handle -> VmmHandle (size, device, live mappings, released) and
//    mapping VA -> VmmMapping (size, handle), both under g_vmm_lock (VMM
//    calls are per 2-20 MiB page).
// All three are preload/core/addr_map.h maps.
// Every lock here is a leaf: nothing else is locked, unwound or pushed while
// one is held.
//
// Sampling (docs/gpu.md "Sampling"): every allocation is counted and written
// (DEV_ALLOC without a stack), so the device totals stay exact; a per-thread
// Poisson byte countdown, like the host's (core/sampler.h), picks the ones
// that are unwound. A sample's DEV_ALLOC carries the T its gap was drawn
// with, so its weight size / p is unbiased across rate changes. Frees never
// unwind: the address table gives the size, whether sampled or not.
//
// Layers: a driver wrapper reached inside a runtime wrapper records the
// operation; the runtime wrapper then does not (an allocation: the pointer is
// already in the table and the thread's driver-record count moved; a free:
// the driver wrapper took the runtime's pending free over).

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "preload/core/addr_map.h"
#include "preload/cuda/cuda.h"
#include "preload/cuda/cuda_internal.h"
#include "preload/host/recorder.h"
#include "preload/steps/config.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace cuda {
namespace {

ShardedAddrMap<DevBlock, 4> g_ptrs;  // 16 shards
SpinLock g_vmm_lock;
AddrMap<VmmHandle> g_handles;  // protected by g_vmm_lock
AddrMap<VmmMapping> g_maps;    // protected by g_vmm_lock
std::atomic<int> g_tables{0};  // 0 none, 1 being made, 2 ready, 3 failed

bool EnsureTables() {
  int s = g_tables.load(std::memory_order_acquire);
  if (s == 2) return true;
  if (s == 3) return false;
  int expected = 0;
  if (g_tables.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    bool ok = g_handles.Init(16) && g_maps.Init(16) && g_ptrs.Init(14);
    g_tables.store(ok ? 2 : 3, std::memory_order_release);
    if (!ok) Notice("cannot reserve memory for device tables: device allocations are not recorded");
    return ok;
  }
  while ((s = g_tables.load(std::memory_order_acquire)) == 1) MEMSTEP_CPU_RELAX();
  return s == 2;
}

// ---- exact counters ----
std::atomic<uint64_t> g_live[fmt::kDevKindMax + 1];
std::atomic<uint64_t> g_peak[fmt::kDevKindMax + 1];  // run peaks per kind
// Resident bytes (device + managed + VMM + pool) per device ordinal, so the
// alert sees each GPU's own peak, as the report's device_peak does; the last
// slot takes unknown (-1) and out-of-range ordinals.
constexpr int kMaxDevices = 32;
std::atomic<uint64_t> g_resident[kMaxDevices + 1];
std::atomic<uint64_t> g_resident_step_peak[kMaxDevices + 1];
int DeviceSlot(int device) { return device >= 0 && device < kMaxDevices ? device : kMaxDevices; }
std::atomic<bool> g_seen{false};       // a device allocation succeeded: CUDA is initialised
std::atomic<bool> g_pool_seen{false};  // ... a stream-ordered one
std::atomic<bool> g_table_full{false};
std::atomic<uint64_t> g_resident_alloc{0};  // resident bytes allocated since the start

// ---- sampling ----
// The mean interval T for new gaps (progressive.cc sets it at step ends).
std::atomic<uint64_t> g_dev_interval{kDefaultDeviceInterval};
__thread int64_t t_dev_until __attribute__((tls_model("initial-exec")));   // < 0: sample
__thread uint64_t t_dev_gap_T __attribute__((tls_model("initial-exec")));  // T of the gap
__thread bool t_dev_seeded __attribute__((tls_model("initial-exec")));
__thread Sampler t_dev_sampler __attribute__((tls_model("initial-exec")));
std::atomic<uint64_t> g_dev_seed_ordinal{0};

// The gap after a sample (and the thread's first, lazily: memoryless).
MEMSTEP_NOINLINE bool DevSampleSlow(uint64_t* interval) {
  const uint64_t T = g_dev_interval.load(std::memory_order_relaxed);
  if (!t_dev_seeded) {
    t_dev_seeded = true;
    const uint64_t k = g_dev_seed_ordinal.fetch_add(1, std::memory_order_relaxed);
    if (g_config.seed != 0) {  // MEMSTEP_SEED: a reproducible stream per thread
      t_dev_sampler.Seed(g_config.seed * 0xD1B54A32D192ED03ull + k * 0x9E3779B97F4A7C15ull + 7);
    } else {
      t_dev_sampler.Seed(MonoNs() ^ (k << 32) ^ reinterpret_cast<uintptr_t>(&t_dev_until));
    }
    t_dev_gap_T = T;
    t_dev_until += t_dev_sampler.NextGap(T);
    if (t_dev_until >= 0) return false;
  }
  const uint64_t drawn_with = t_dev_gap_T;
  t_dev_until = t_dev_sampler.NextGap(T);
  t_dev_gap_T = T;
  *interval = drawn_with <= 1 ? 0 : drawn_with;
  return true;
}

// Whether an allocation of `size` bytes is sampled; *interval: the T its gap
// was drawn with (0: p = 1).
MEMSTEP_ALWAYS_INLINE bool DevSample(uint64_t size, uint64_t* interval) {
  t_dev_until -= static_cast<int64_t>(size > (uint64_t{1} << 62) ? uint64_t{1} << 62 : size) + 1;
  if (t_dev_until >= 0) return false;
  return DevSampleSlow(interval);
}

// Horvitz-Thompson weight of a sample, bytes.
uint64_t SampleWeight(uint64_t size, uint64_t interval) {
  if (interval <= 1) return size;
  const double p = -expm1(-(static_cast<double>(size) + 1.0) / static_cast<double>(interval));
  return p > 0 ? static_cast<uint64_t>(static_cast<double>(size) / p) : size;
}

// ---- the device leak hunt's tally (progressive.cc) ----
std::atomic<bool> g_hunting{false};
std::atomic<uint32_t> g_hunt_gen{1};
std::atomic<uint64_t> g_hunt_est{0};  // estimated live bytes of this generation's samples
std::atomic<uint64_t> g_hunt_n{0};    // and their count

// A sample is made: marks it hunt-born when a hunt runs.
void HuntBorn(uint64_t size, uint64_t interval, uint64_t* est, uint16_t* gen) {
  *est = 0;
  *gen = 0;
  if (!g_hunting.load(std::memory_order_relaxed)) return;
  *est = SampleWeight(size, interval);
  *gen = static_cast<uint16_t>(g_hunt_gen.load(std::memory_order_relaxed));
  g_hunt_est.fetch_add(*est, std::memory_order_relaxed);
  g_hunt_n.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace
// A hunt-born sample is freed: out of the tally if it is of this generation.
void HuntGone(uint64_t est, uint16_t gen);
namespace {

bool Resident(uint8_t kind) { return kind != fmt::kDevPinnedHost; }

void CountAlloc(uint8_t kind, int device, uint64_t size) {
  if (kind > fmt::kDevKindMax) return;
  AtomicMax(&g_peak[kind], g_live[kind].fetch_add(size, std::memory_order_relaxed) + size);
  if (Resident(kind)) {
    const int d = DeviceSlot(device);
    AtomicMax(&g_resident_step_peak[d],
              g_resident[d].fetch_add(size, std::memory_order_relaxed) + size);
    g_resident_alloc.fetch_add(size, std::memory_order_relaxed);
  }
}

// Never below zero: a free of something counted before a fork reset.
void Sub(std::atomic<uint64_t>* a, uint64_t v) {
  uint64_t cur = a->load(std::memory_order_relaxed);
  while (!a->compare_exchange_weak(cur, cur > v ? cur - v : 0, std::memory_order_relaxed)) {
  }
}
void CountFree(uint8_t kind, int device, uint64_t size) {
  if (kind > fmt::kDevKindMax) return;
  Sub(&g_live[kind], size);
  if (Resident(kind)) Sub(&g_resident[DeviceSlot(device)], size);
}

// ---- per-thread layer state ----
__thread uint32_t t_allocs __attribute__((tls_model("initial-exec")));  // recorded allocations
__thread uint32_t t_fails __attribute__((tls_model("initial-exec")));   // recorded failures
__thread PendingFree* t_rt_pending __attribute__((tls_model("initial-exec")));
__thread int t_rt_major __attribute__((tls_model("initial-exec")));  // runtime used here

// ---- records ----
void EmitDevAlloc(ThreadState& t, uint32_t stack, uint8_t kind, int device, uint64_t addr,
                  uint64_t size, uint8_t api, uint64_t aux, bool sampled, uint64_t interval) {
  if (!Recording()) return;
  uint8_t buf[fmt::kMaxEncodedSize<fmt::DevAllocRecord>];
  fmt::DevAllocRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.stack = stack;
  rec.kind = kind;
  rec.device = device;
  rec.addr = addr;
  rec.size = size;
  rec.api = api;
  rec.aux = aux;
  rec.step = g_cur_step.load(std::memory_order_relaxed);
  rec.stage_str = g_cur_stage.load(std::memory_order_relaxed);
  rec.sampled = sampled ? 1 : 0;
  rec.interval = interval;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

void EmitDevFree(ThreadState& t, uint64_t seq, uint8_t kind, int device, uint64_t addr,
                 uint64_t size, uint8_t api) {
  if (!Recording()) return;
  uint8_t buf[fmt::kMaxEncodedSize<fmt::DevFreeRecord>];
  fmt::DevFreeRecord rec;
  rec.ts = NowRel();
  rec.seq = seq;
  rec.tid = t.tid;
  rec.kind = kind;
  rec.device = device;
  rec.addr = addr;
  rec.size = size;
  rec.api = api;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

void TableFull() {
  if (!g_table_full.exchange(true)) {
    Notice("device address table full: later device frees may be unmatched");
  }
}

}  // namespace

void Notice(const char* message) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  SayNotice(t, message, !guard.was_set());
}

bool Active() {
  return t_state.guard == 0 && g_state.load(std::memory_order_relaxed) == kRecording;
}

int DriverDevice() {
  auto fn = reinterpret_cast<CUresult (*)(int*)>(DrHelper(kSym_cuCtxGetDevice));
  int d = -1;
  return fn != nullptr && fn(&d) == 0 ? d : -1;
}

int RuntimeDevice(const Target& t) {
  void* gd = t.get_device;
  if (gd == nullptr && t.major != 0) gd = RtReal(t.major, kSym_cudaGetDevice);
  int d = -1;
  return gd != nullptr && reinterpret_cast<cudaError_t (*)(int*)>(gd)(&d) == 0 ? d : -1;
}

LayerMark Mark() { return {t_allocs, t_fails}; }

bool LowerRecordedAlloc(const LayerMark& m, uint64_t addr) {
  if (t_allocs == m.allocs || g_tables.load(std::memory_order_acquire) != 2) return false;
  return g_ptrs.Contains(addr);
}

bool LowerRecordedFail(const LayerMark& m) { return t_fails != m.fails; }

void NoteRuntimeThread(int major) { t_rt_major = major; }

void RecordAlloc(uint8_t kind, int device, uint64_t addr, uint64_t size, uint8_t api,
                 uint64_t aux) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  ++t_allocs;
  g_seen.store(true, std::memory_order_relaxed);
  if (kind == fmt::kDevPool) g_pool_seen.store(true, std::memory_order_relaxed);
  if (!EnsureTables()) return;
  uint64_t interval = 0;
  const bool sampled = DevSample(size, &interval);
  const uint32_t stack = sampled ? CaptureStack(t) : 0;  // before any lock
  DevBlock block{size, device, kind, 0, 0};
  // The hunt's tally is of device-resident bytes: pinned host memory is not.
  if (sampled && kind != fmt::kDevPinnedHost) {
    HuntBorn(size, interval, &block.hunt_est, &block.hunt_gen);
  }
  DevBlock old;
  PutResult put = g_ptrs.Put(addr, block, &old);
  if (put == PutResult::kRefused) TableFull();
  if (put == PutResult::kReplaced) {  // its free went unseen: close it before the new one
    CountFree(old.kind, old.device, old.size);
    HuntGone(old.hunt_est, old.hunt_gen);
    EmitDevFree(t, NextSeq(), old.kind, old.device, addr, old.size, fmt::kApiUnknown);
  }
  CountAlloc(kind, device, size);
  EmitDevAlloc(t, stack, kind, device, addr, size, api, aux, sampled, interval);
}

// A PyTorch tensor block (torch_blocks.cc): the device sampler's decision,
// and its record. Blocks touch no table and no counter (they lie inside
// segments that are counted already).
bool TorchBlockSample(uint64_t size, uint64_t* interval) { return DevSample(size, interval); }

void RecordTorchBlock(bool alloc, int device, uint64_t addr, uint64_t size, uint32_t stack,
                      bool sampled, uint64_t interval) {
  ThreadState& t = t_state;
  if (alloc) {
    EmitDevAlloc(t, stack, fmt::kDevTensorBlock, device, addr, size, fmt::kApiTorchCachingAllocator,
                 0, sampled, interval);
  } else {
    EmitDevFree(t, NextSeq(), fmt::kDevTensorBlock, device, addr, size,
                fmt::kApiTorchCachingAllocator);
  }
}

void RecordFail(uint8_t kind, int device, uint64_t size, uint8_t api, int error) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  ++t_fails;
  if (!Recording()) return;
  uint32_t stack = CaptureStack(t);
  uint8_t buf[fmt::kMaxEncodedSize<fmt::DevFailRecord>];
  fmt::DevFailRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.stack = stack;
  rec.kind = kind;
  rec.device = device;
  rec.size = size;
  rec.api = api;
  rec.error = static_cast<uint32_t>(error);
  rec.step = g_cur_step.load(std::memory_order_relaxed);
  rec.stage_str = g_cur_stage.load(std::memory_order_relaxed);
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
  if (error != kCudaErrorMemoryAllocation) return;
  // Out of memory: the moment, with what the driver says is free now (this
  // thread just called the allocator, so it has a context).
  int info_device = device;
  uint64_t free = 0, total = 0;
  if (!CudaMemInfo(t, &info_device, &free, &total)) free = total = 0;
  WriteMemSnapshot(t, fmt::kMemSnapDeviceOom, device >= 0 ? device : info_device, size, free, total,
                   api, static_cast<uint64_t>(error));
}

// ---- frees ----
namespace {

void BeginFree(uint64_t addr, PendingFree* f) {
  *f = {addr, {0, -1, 0, 0, 0}, 0, false, false};
  if (g_tables.load(std::memory_order_acquire) != 2) return;
  f->found = g_ptrs.Remove(addr, &f->block);
  if (!f->found) return;
  f->seq = NextSeq();  // before the address can be handed out again
}

void EndFree(PendingFree* f, bool ok, uint8_t api) {
  if (!f->found) return;
  if (!ok) {  // the call failed: nothing was freed
    g_ptrs.Put(f->addr, f->block);
    return;
  }
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  CountFree(f->block.kind, f->block.device, f->block.size);
  HuntGone(f->block.hunt_est, f->block.hunt_gen);
  EmitDevFree(t, f->seq, f->block.kind, f->block.device, f->addr, f->block.size, api);
}

}  // namespace

void BeginRuntimeFree(uint64_t addr, PendingFree* f, PendingFree** saved) {
  BeginFree(addr, f);
  *saved = t_rt_pending;
  t_rt_pending = f;
}

void EndRuntimeFree(PendingFree* f, PendingFree* saved, bool ok, uint8_t api) {
  t_rt_pending = saved;
  if (!f->taken) EndFree(f, ok, api);
}

void BeginDriverFree(uint64_t addr, PendingFree* f) {
  PendingFree* p = t_rt_pending;
  if (p != nullptr && !p->taken && p->addr == addr) {
    *f = *p;
    p->taken = true;
    f->taken = false;
    return;
  }
  BeginFree(addr, f);
}

void EndDriverFree(PendingFree* f, bool ok, uint8_t api) { EndFree(f, ok, api); }

// ---- VMM ----
namespace {

void LogMapping(VmmUndo* u, uint64_t va, const VmmMapping& mapping) {
  VmmUndo::Op& op = u->ops[u->n++];
  op = {};
  op.key = va;
  op.mapping = mapping;
  op.what = VmmUndo::kMappingRemoved;
}
void LogHandle(VmmUndo* u, uint64_t handle, const VmmHandle& value) {
  VmmUndo::Op& op = u->ops[u->n++];
  op = {};
  op.key = handle;
  op.handle = value;
  op.what = VmmUndo::kHandleChanged;
}
// The handle just logged is freed: gone from the table, its DEV_FREE numbered.
void LoggedHandleRemoved(VmmUndo* u) {
  g_handles.Remove(u->ops[u->n - 1].key, nullptr);
  u->ops[u->n - 1].what = VmmUndo::kHandleRemoved;
  u->ops[u->n - 1].seq = NextSeq();
}

// g_vmm_lock held; room for one op in u. One mapping of `handle` is gone.
void DropMappingLocked(uint64_t handle, VmmUndo* u) {
  VmmHandle* entry = g_handles.Find(handle);
  if (entry == nullptr) return;
  LogHandle(u, handle, *entry);
  if (entry->mappings > 0) --entry->mappings;
  if (entry->mappings == 0 && entry->released) LoggedHandleRemoved(u);
}

// g_vmm_lock held: removes the mappings of [cursor, end) while the log has room.
void WalkUnmapLocked(VmmUndo* u) {
  while (u->cursor < u->end && u->n + 2 <= VmmUndo::kMax) {
    VmmMapping m;
    if (!g_maps.Remove(u->cursor, &m) || m.size == 0) {
      u->cursor = u->end;  // not a mapping memstep saw: stop there
      return;
    }
    LogMapping(u, u->cursor, m);
    u->cursor += m.size;
    DropMappingLocked(m.handle, u);
  }
}

// Writes the DEV_FREEs of the handles the log freed.
void CommitLog(VmmUndo* u, uint8_t api) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  for (int i = 0; i < u->n; ++i) {
    const VmmUndo::Op& op = u->ops[i];
    if (op.what != VmmUndo::kHandleRemoved) continue;
    if (!op.handle.counted) continue;  // imported and never mapped: never written
    CountFree(fmt::kDevVmm, op.handle.device, op.handle.size);
    HuntGone(op.handle.hunt_est, op.handle.hunt_gen);
    EmitDevFree(t, op.seq, fmt::kDevVmm, op.handle.device, op.key, op.handle.size, api);
  }
}

}  // namespace

void VmmCreated(uint64_t handle, uint64_t size, int device) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  ++t_allocs;
  g_seen.store(true, std::memory_order_relaxed);
  if (!EnsureTables()) return;
  uint64_t interval = 0;
  const bool sampled = DevSample(size, &interval);
  const uint32_t stack = sampled ? CaptureStack(t) : 0;
  VmmHandle entry{size, device, 0, false, 0, 0, false, true, 1};
  if (sampled) HuntBorn(size, interval, &entry.hunt_est, &entry.hunt_gen);
  VmmHandle old;
  PutResult put;
  {
    SpinLockHolder h(&g_vmm_lock);
    put = g_handles.Put(handle, entry, &old);
  }
  if (put == PutResult::kRefused) TableFull();
  if (put == PutResult::kReplaced && old.counted) {  // a release memstep did not see
    CountFree(fmt::kDevVmm, old.device, old.size);
    HuntGone(old.hunt_est, old.hunt_gen);
    EmitDevFree(t, NextSeq(), fmt::kDevVmm, old.device, handle, old.size, fmt::kApiUnknown);
  }
  CountAlloc(fmt::kDevVmm, device, size);
  EmitDevAlloc(t, stack, fmt::kDevVmm, device, handle, size, fmt::kApiCuMemCreate, 0, sampled,
               interval);
}

namespace {

// Writes the DEV_ALLOC of an imported handle (at its import or its first
// mapping), sampled like any allocation; the entry was marked counted.
void CountImported(uint64_t handle, VmmHandle imported) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  uint64_t interval = 0;
  const bool sampled = DevSample(imported.size, &interval);
  const uint32_t stack = sampled ? CaptureStack(t) : 0;
  if (sampled) {
    HuntBorn(imported.size, interval, &imported.hunt_est, &imported.hunt_gen);
    SpinLockHolder h(&g_vmm_lock);
    VmmHandle* still = g_handles.Find(handle);
    if (still != nullptr && still->imported) {
      still->hunt_est = imported.hunt_est;
      still->hunt_gen = imported.hunt_gen;
      imported.hunt_est = 0;
    }
  }
  HuntGone(imported.hunt_est, imported.hunt_gen);  // freed meanwhile: not a hunt sample
  CountAlloc(fmt::kDevVmm, imported.device, imported.size);
  EmitDevAlloc(t, stack, fmt::kDevVmm, imported.device, handle, imported.size,
               fmt::kApiCuMemImportFromShareableHandle, 0, sampled, interval);
}

}  // namespace

void VmmImported(uint64_t handle, int device, uint64_t exported_size, bool own) {
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  g_seen.store(true, std::memory_order_relaxed);
  if (!EnsureTables()) return;
  PutResult put;
  VmmHandle entry{exported_size, device, 0, false, 0, 0, true, exported_size > 0, 1};
  {
    SpinLockHolder h(&g_vmm_lock);
    VmmHandle* known = g_handles.Find(handle);
    if (known != nullptr && !known->released) {  // the same handle again: the same memory
      ++known->refs;
      return;
    }
    // Its own export imported again as a new handle: the memory is counted
    // by its cuMemCreate already.
    if (own) return;
    // (A released handle still mapped that comes back from an import: the
    // driver reused it for new memory; the old entry is replaced unfreed,
    // as cuMemCreate's replace does.)
    put = g_handles.Put(handle, entry, nullptr);
  }
  if (put == PutResult::kRefused) {
    TableFull();
    return;
  }
  if (entry.counted) CountImported(handle, entry);  // the size from the export registry
}

bool VmmHandleSize(uint64_t handle, uint64_t* size, int* device) {
  if (g_tables.load(std::memory_order_acquire) != 2) return false;
  SpinLockHolder h(&g_vmm_lock);
  const VmmHandle* known = g_handles.Find(handle);
  if (known == nullptr || (known->imported && !known->counted)) return false;
  *size = known->size;
  *device = known->device;
  return true;
}

void VmmMapped(uint64_t va, uint64_t size, uint64_t offset, uint64_t handle) {
  if (!EnsureTables()) return;
  VmmUndo stale;
  stale.n = 0;
  bool stored;
  bool first_import_map = false;
  VmmHandle imported{};
  {
    SpinLockHolder h(&g_vmm_lock);
    VmmMapping old;
    PutResult put = g_maps.Put(va, VmmMapping{size, handle}, &old);
    stored = put != PutResult::kRefused;
    if (put == PutResult::kReplaced) DropMappingLocked(old.handle, &stale);  // unmap unseen
    VmmHandle* mapped = stored ? g_handles.Find(handle) : nullptr;
    if (mapped != nullptr) {
      ++mapped->mappings;  // a mapping not in the table is never unmapped
      if (mapped->imported && !mapped->counted) {
        mapped->counted = true;
        mapped->size = offset + size;  // the extent this process uses
        first_import_map = true;
        imported = *mapped;
      }
    }
  }
  if (!stored) TableFull();
  if (stale.n > 0) CommitLog(&stale, fmt::kApiCuMemUnmap);
  if (first_import_map) CountImported(handle, imported);
}

void VmmBeginRelease(uint64_t handle, VmmUndo* u) {
  u->n = 0;
  u->cursor = u->end = 0;
  if (g_tables.load(std::memory_order_acquire) != 2) return;
  SpinLockHolder h(&g_vmm_lock);
  VmmHandle* released = g_handles.Find(handle);
  if (released == nullptr) return;
  LogHandle(u, handle, *released);
  if (released->refs > 1) {  // another import of it is still held
    --released->refs;
    return;
  }
  released->released = true;
  if (released->mappings == 0) LoggedHandleRemoved(u);
}

void VmmBeginUnmap(uint64_t va, uint64_t size, VmmUndo* u) {
  u->n = 0;
  u->cursor = va;
  u->end = va + size;
  if (g_tables.load(std::memory_order_acquire) != 2) {
    u->cursor = u->end;
    return;
  }
  SpinLockHolder h(&g_vmm_lock);
  WalkUnmapLocked(u);
}

void VmmEnd(VmmUndo* u, bool ok, uint8_t api) {
  if (!ok) {
    if (u->n == 0) return;
    SpinLockHolder h(&g_vmm_lock);
    for (int i = u->n - 1; i >= 0; --i) {  // newest first
      const VmmUndo::Op& op = u->ops[i];
      if (op.what == VmmUndo::kMappingRemoved) {
        g_maps.Put(op.key, op.mapping);
      } else {
        g_handles.Put(op.key, op.handle);
      }
    }
    return;
  }
  CommitLog(u, api);
  // An unmap of more mappings than the log holds: the rest, now that the
  // call has succeeded (no undo needed).
  while (u->cursor < u->end) {
    u->n = 0;
    {
      SpinLockHolder h(&g_vmm_lock);
      WalkUnmapLocked(u);
    }
    CommitLog(u, api);
  }
}

void HuntGone(uint64_t est, uint16_t gen) {
  if (est == 0 || gen != static_cast<uint16_t>(g_hunt_gen.load(std::memory_order_relaxed))) return;
  Sub(&g_hunt_est, est);
  Sub(&g_hunt_n, 1);
}

// ---- state for the step-end counters (cuda_info.cc) ----

bool DeviceSeen() { return g_seen.load(std::memory_order_relaxed); }
bool PoolSeen() { return g_pool_seen.load(std::memory_order_relaxed); }
int ThreadRuntimeMajor() { return t_rt_major; }

uint64_t CloseStepPeak() {
  uint64_t most = 0;  // the largest per-device peak of the step
  for (int d = 0; d <= kMaxDevices; ++d) {
    uint64_t live = g_resident[d].load(std::memory_order_relaxed);
    uint64_t peak = g_resident_step_peak[d].exchange(live, std::memory_order_relaxed);
    if (live > peak) peak = live;
    if (peak > most) most = peak;
  }
  return most;
}

}  // namespace cuda

// ---- sampling and the hunt's tally: the interface of cuda.h ----
void CudaSetSampleInterval(uint64_t interval) {
  cuda::g_dev_interval.store(interval, std::memory_order_relaxed);
}

uint64_t CudaResidentBytes() {
  uint64_t sum = 0;
  for (int d = 0; d <= cuda::kMaxDevices; ++d) {
    sum += cuda::g_resident[d].load(std::memory_order_relaxed);
  }
  return sum;
}
uint64_t CudaResidentAllocated() { return cuda::g_resident_alloc.load(std::memory_order_relaxed); }

void CudaHuntOn(bool on) { cuda::g_hunting.store(on, std::memory_order_relaxed); }

void CudaHuntCheckpoint() {
  cuda::g_hunt_gen.fetch_add(1, std::memory_order_relaxed);
  cuda::g_hunt_est.store(0, std::memory_order_relaxed);
  cuda::g_hunt_n.store(0, std::memory_order_relaxed);
}

void CudaHuntTally(uint64_t* est_bytes, uint64_t* samples) {
  *est_bytes = cuda::g_hunt_est.load(std::memory_order_relaxed);
  *samples = cuda::g_hunt_n.load(std::memory_order_relaxed);
}

// ---- fork: the child has no CUDA context; its device history starts empty ----
namespace cuda {
namespace {

void ForkPrepare() {
  if (g_tables.load(std::memory_order_acquire) != 2) return;
  g_vmm_lock.Lock();
  g_ptrs.LockAll();
}

void ForkParent() {
  if (g_tables.load(std::memory_order_acquire) != 2) return;
  g_ptrs.UnlockAll();
  g_vmm_lock.Unlock();
}

void ForkChild() {
  g_ptrs.ResetLocks();
  g_vmm_lock.Reset();
  if (g_tables.load(std::memory_order_acquire) == 2) {
    g_ptrs.Reset();
    g_handles.Reset();
    g_maps.Reset();
  }
  for (int k = 0; k <= fmt::kDevKindMax; ++k) {
    g_live[k].store(0, std::memory_order_relaxed);
    g_peak[k].store(0, std::memory_order_relaxed);
  }
  for (int d = 0; d <= kMaxDevices; ++d) {
    g_resident[d].store(0, std::memory_order_relaxed);
    g_resident_step_peak[d].store(0, std::memory_order_relaxed);
  }
  g_seen.store(false, std::memory_order_relaxed);
  g_pool_seen.store(false, std::memory_order_relaxed);
  g_resident_alloc.store(0, std::memory_order_relaxed);
  g_hunting.store(false, std::memory_order_relaxed);
  g_hunt_est.store(0, std::memory_order_relaxed);
  g_hunt_n.store(0, std::memory_order_relaxed);
  t_rt_pending = nullptr;
  t_dev_seeded = false;  // a stream of its own
}

// After memstep's own constructor (101): its fork handlers are registered
// first, so these prepare handlers run before its (each set is lock-ordered;
// no lock here is held while one of memstep's is taken, or the reverse).
__attribute__((constructor(102))) void CudaInit() {
  pthread_atfork(ForkPrepare, ForkParent, ForkChild);
}

}  // namespace
}  // namespace cuda
}  // namespace memstep::preload
