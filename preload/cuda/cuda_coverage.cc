// Accounting for the APIs of issue 10 item 3 that the classic tables of
// cuda_account.cc do not cover on their own:
//  - CUDA arrays: the size estimate (the driver keeps the real layout);
//  - IPC-opened memory: a reference count per address, so that memory opened
//    twice counts once and is freed by the close that drops the last
//    reference (the driver returns the same pointer for a handle it already
//    opened, and unmaps at the last close);
//  - non-default memory pools and graph memory: which pools and devices to
//    read at step ends and after a trim (COUNTER records
//    `cuda.pool:<dev>.0x<pool>.reserved_bytes` / `.used_bytes` /
//    `.release_threshold_bytes`, `.trim_to_bytes` at a trim, and
//    `cuda.graph:<dev>.reserved_bytes` / `.used_bytes`); a pool whose release
//    threshold the program sets is read from then on;
//  - multicast objects (cuMulticastCreate): their size and the device memory
//    bound to them, as COUNTER records (the bound memory itself is counted
//    where it was allocated, by cuMemCreate).
//  - the export registry: VMM handles exported as POSIX file descriptors,
//    listed in MEMSTEP_DIR/cuda-exports so that an importer of the same run
//    learns their size at the import (the driver does not tell it).
// Allocations themselves are recorded by cuda_account.cc (RecordAlloc, the
// two-phase frees); this file only decides when.
//
// Contract: like the rest of preload/cuda (cuda_internal.h): no allocation
// from the hooked heap (the IPC table comes from RawMmap at the first open),
// leaf spinlocks held for a few loads and stores, nothing unwound or written
// while one is held; driver queries only from a thread with a current
// context (the step end checks it) or right after the program's own
// successful call on that thread.

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/core/addr_map.h"
#include "preload/core/fds.h"
#include "preload/cuda/cuda_internal.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload::cuda {

namespace fmt = ::memstep::format;

// ---- arrays ----

uint64_t ArrayBytes(uint64_t element_bytes, uint64_t width, uint64_t height, uint64_t depth,
                    unsigned levels) {
  if (element_bytes == 0) return 0;
  if (levels == 0) levels = 1;
  uint64_t total = 0;
  for (unsigned l = 0; l < levels && l < 64; ++l) {
    total += element_bytes * width * (height ? height : 1) * (depth ? depth : 1);
    if (width <= 1 && height <= 1 && depth <= 1) break;  // the last level
    width = width > 1 ? width / 2 : width;
    height = height > 1 ? height / 2 : height;
    depth = depth > 1 ? depth / 2 : depth;
  }
  return total;
}

uint64_t ChannelBytes(const cudaChannelFormatDesc* desc) {
  if (desc == nullptr) return 0;
  int bits = desc->x + desc->y + desc->z + desc->w;
  return bits > 0 && bits % 8 == 0 ? static_cast<uint64_t>(bits / 8) : 0;
}

uint64_t CuFormatBytes(int format, unsigned channels) {
  uint64_t bytes;
  switch (format) {  // CUarray_format
    case 0x01:
    case 0x08:
      bytes = 1;
      break;  // (UN)SIGNED_INT8
    case 0x02:
    case 0x09:
    case 0x10:
      bytes = 2;
      break;  // (UN)SIGNED_INT16, HALF
    case 0x03:
    case 0x0a:
    case 0x20:
      bytes = 4;
      break;  // (UN)SIGNED_INT32, FLOAT
    default:
      return 0;  // packed, compressed and video formats: unknown here
  }
  return channels >= 1 && channels <= 4 ? bytes * channels : 0;
}

// ---- IPC ----
namespace {

SpinLock g_ipc_lock;
AddrMap<uint32_t> g_ipc_refs;     // address -> open references; protected by g_ipc_lock
std::atomic<int> g_ipc_table{0};  // 0 none, 1 being made, 2 ready, 3 failed

bool EnsureIpcTable() {
  int s = g_ipc_table.load(std::memory_order_acquire);
  if (s >= 2) return s == 2;
  int expected = 0;
  if (g_ipc_table.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    bool ok = g_ipc_refs.Init(12);
    g_ipc_table.store(ok ? 2 : 3, std::memory_order_release);
    if (!ok) Notice("cannot reserve memory for the IPC table: IPC-opened memory is not recorded");
    return ok;
  }
  while ((s = g_ipc_table.load(std::memory_order_acquire)) == 1) __builtin_ia32_pause();
  return s == 2;
}

// The size of the allocation at `addr` as the driver knows it, 0 if unknown.
uint64_t AddressRangeSize(uint64_t addr) {
  auto range = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr)>(
      DrHelper(kSym_cuMemGetAddressRange_v2));
  CUdeviceptr base = 0;
  size_t size = 0;
  return range != nullptr && range(&base, &size, addr) == 0 ? size : 0;
}

__thread uint32_t t_ipc_opens __attribute__((tls_model("initial-exec")));
std::atomic<bool> g_ipc_full{false};

}  // namespace

uint32_t IpcMark() { return t_ipc_opens; }

void IpcOpened(int device, uint64_t addr, uint8_t api) {
  ++t_ipc_opens;
  if (addr == 0 || !EnsureIpcTable()) return;
  bool refused;
  {
    SpinLockHolder h(&g_ipc_lock);
    uint32_t* refs = g_ipc_refs.Find(addr);
    if (refs != nullptr) {  // opened again: the same memory, counted once
      ++*refs;
      return;
    }
    refused = g_ipc_refs.Put(addr, 1) == PutResult::kRefused;
  }
  if (refused) {  // not recorded (and so never freed either)
    if (!g_ipc_full.exchange(true))
      Notice("IPC table full: later IPC-opened memory is not recorded");
    return;
  }
  RecordAlloc(fmt::kDevDevice, device, addr, AddressRangeSize(addr), api, 0);
}

void IpcBeginClose(uint64_t addr, IpcClose* c) {
  c->addr = addr;
  c->known = c->last = false;
  if (g_ipc_table.load(std::memory_order_acquire) != 2) return;
  SpinLockHolder h(&g_ipc_lock);
  uint32_t* refs = g_ipc_refs.Find(addr);
  if (refs == nullptr) return;
  c->known = true;
  if (*refs > 1) {
    --*refs;
  } else {
    g_ipc_refs.Remove(addr, nullptr);
    c->last = true;
  }
}

void IpcEndClose(const IpcClose& c, bool ok) {
  if (ok || !c.known) return;
  SpinLockHolder h(&g_ipc_lock);  // the close failed: the reference is still there
  uint32_t* refs = g_ipc_refs.Find(c.addr);
  if (refs != nullptr) {
    ++*refs;
  } else {
    g_ipc_refs.Put(c.addr, 1);
  }
}

namespace {
__thread const IpcClose* t_ipc_rt_close __attribute__((tls_model("initial-exec")));
}  // namespace

const IpcClose* IpcRuntimeClose(uint64_t addr) {
  const IpcClose* c = t_ipc_rt_close;
  return c != nullptr && c->addr == addr ? c : nullptr;
}
const IpcClose* SetIpcRuntimeClose(const IpcClose* c) {
  const IpcClose* old = t_ipc_rt_close;
  t_ipc_rt_close = c;
  return old;
}

// ---- pools and graph memory ----
namespace {

constexpr int kMaxPools = 64;
struct PoolEntry {
  uint64_t pool;  // 0 = free slot
  int32_t device;
};
SpinLock g_pool_lock;
PoolEntry g_pools[kMaxPools];  // protected by g_pool_lock
std::atomic<bool> g_pools_full{false};
std::atomic<uint32_t> g_graph_devices{0};  // bit d: graph memory seen on device d (d < 32)

// "<prefix><dev>.<suffix>" or "<prefix><dev>.0x<pool>.<suffix>" into buf.
size_t CounterName(char* buf, size_t cap, const char* prefix, int device, uint64_t pool,
                   const char* suffix) {
  size_t n = 0;
  auto put = [&](char c) {
    if (n + 1 < cap) buf[n++] = c;
  };
  for (const char* p = prefix; *p != '\0'; ++p) put(*p);
  if (device < 0) {
    put('-');
    put('1');
  } else {
    char digits[12];
    int k = 0;
    unsigned v = static_cast<unsigned>(device);
    do digits[k++] = static_cast<char>('0' + v % 10), v /= 10;
    while (v != 0 && k < 12);
    while (k > 0) put(digits[--k]);
  }
  put('.');
  if (pool != 0) {
    put('0');
    put('x');
    bool started = false;
    for (int shift = 60; shift >= 0; shift -= 4) {
      unsigned nib = static_cast<unsigned>(pool >> shift) & 0xF;
      if (nib == 0 && !started && shift != 0) continue;
      started = true;
      put("0123456789abcdef"[nib]);
    }
    put('.');
  }
  for (const char* p = suffix; *p != '\0'; ++p) put(*p);
  buf[n] = '\0';
  return n;
}

void EmitCounter(const char* name, size_t len, uint64_t value) {
  if (!Recording()) return;
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  uint8_t buf[fmt::kMaxEncodedSize<fmt::CounterRecord>];
  fmt::CounterRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.name_str = g_dict.InternString(name, len);
  rec.value = static_cast<int64_t>(value);
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
}

// The pool attribute through the driver if it is loaded, else through the
// runtime this thread used. False if neither answers (a destroyed pool).
bool PoolAttr(uint64_t pool, int attr, uint64_t* value) {
  *value = 0;
  if (DriverLoaded()) {
    auto get =
        reinterpret_cast<CUresult (*)(void*, int, void*)>(DrHelper(kSym_cuMemPoolGetAttribute));
    return get != nullptr && get(reinterpret_cast<void*>(pool), attr, value) == 0;
  }
  int major = ThreadRuntimeMajor();
  auto get = reinterpret_cast<cudaError_t (*)(void*, int, void*)>(
      major != 0 ? RtReal(major, kSym_cudaMemPoolGetAttribute) : nullptr);
  return get != nullptr && get(reinterpret_cast<void*>(pool), attr, value) == kCudaSuccess;
}

bool GraphAttr(int device, int attr, uint64_t* value) {
  *value = 0;
  if (DriverLoaded()) {
    auto get = reinterpret_cast<CUresult (*)(int, int, void*)>(
        DrHelper(kSym_cuDeviceGetGraphMemAttribute));
    return get != nullptr && get(device, attr, value) == 0;
  }
  int major = ThreadRuntimeMajor();
  auto get = reinterpret_cast<cudaError_t (*)(int, int, void*)>(
      major != 0 ? RtReal(major, kSym_cudaDeviceGetGraphMemAttribute) : nullptr);
  return get != nullptr && get(device, attr, value) == kCudaSuccess;
}

void EmitPool(uint64_t pool, int device, int64_t trim_to) {
  uint64_t reserved = 0, used = 0, threshold = 0;
  if (!PoolAttr(pool, kPoolAttrReservedMemCurrent, &reserved) ||
      !PoolAttr(pool, kPoolAttrUsedMemCurrent, &used)) {
    return;
  }
  char name[96];
  if (trim_to >= 0) {
    EmitCounter(name, CounterName(name, sizeof name, "cuda.pool:", device, pool, "trim_to_bytes"),
                static_cast<uint64_t>(trim_to));
  }
  if (PoolAttr(pool, kPoolAttrReleaseThreshold, &threshold)) {
    EmitCounter(
        name, CounterName(name, sizeof name, "cuda.pool:", device, pool, "release_threshold_bytes"),
        threshold);
  }
  EmitCounter(name, CounterName(name, sizeof name, "cuda.pool:", device, pool, "reserved_bytes"),
              reserved);
  EmitCounter(name, CounterName(name, sizeof name, "cuda.pool:", device, pool, "used_bytes"), used);
}

}  // namespace

void PoolSeenHandle(uint64_t pool, int device) {
  if (pool == 0) return;
  {
    SpinLockHolder h(&g_pool_lock);
    int free_slot = -1;
    for (int i = 0; i < kMaxPools; ++i) {
      if (g_pools[i].pool == pool) {
        if (g_pools[i].device < 0) g_pools[i].device = device;
        return;
      }
      if (g_pools[i].pool == 0 && free_slot < 0) free_slot = i;
    }
    if (free_slot >= 0) {
      g_pools[free_slot] = {pool, device};
      return;
    }
  }
  if (!g_pools_full.exchange(true)) {  // after the lock: Notice writes a record
    Notice("more than 64 memory pools: the counters of later pools are not recorded");
  }
}

void PoolGone(uint64_t pool) {
  SpinLockHolder h(&g_pool_lock);
  for (PoolEntry& e : g_pools) {
    if (e.pool == pool) e = {0, -1};
  }
}

void GraphMemSeen(int device) {
  if (device >= 0 && device < 32) {
    g_graph_devices.fetch_or(1u << device, std::memory_order_relaxed);
  }
}

void EmitPoolCounters(uint64_t pool, int64_t trim_to) {
  int device = -2;
  {
    SpinLockHolder h(&g_pool_lock);
    for (const PoolEntry& e : g_pools) {
      if (e.pool == pool) device = e.device;
    }
  }
  if (device != -2) EmitPool(pool, device, trim_to);
}

void PoolThresholdSet(uint64_t pool, uint64_t threshold) {
  if (pool == 0) return;
  PoolSeenHandle(pool, -1);
  int device = -2;
  {
    SpinLockHolder h(&g_pool_lock);
    for (const PoolEntry& e : g_pools) {
      if (e.pool == pool) device = e.device;
    }
  }
  if (device == -2) return;  // the table is full
  char name[96];
  EmitCounter(name,
              CounterName(name, sizeof name, "cuda.pool:", device, pool, "release_threshold_bytes"),
              threshold);
}

void EmitGraphCounters(int device) {
  uint64_t reserved = 0, used = 0;
  if (!GraphAttr(device, kGraphMemAttrReservedMemCurrent, &reserved) ||
      !GraphAttr(device, kGraphMemAttrUsedMemCurrent, &used)) {
    return;
  }
  char name[64];
  EmitCounter(name, CounterName(name, sizeof name, "cuda.graph:", device, 0, "reserved_bytes"),
              reserved);
  EmitCounter(name, CounterName(name, sizeof name, "cuda.graph:", device, 0, "used_bytes"), used);
}

void CoverageStepEnd() {
  PoolEntry pools[kMaxPools];
  {
    SpinLockHolder h(&g_pool_lock);
    for (int i = 0; i < kMaxPools; ++i) pools[i] = g_pools[i];
  }
  for (const PoolEntry& e : pools) {
    if (e.pool != 0) EmitPool(e.pool, e.device, -1);
  }
  uint32_t graphs = g_graph_devices.load(std::memory_order_relaxed);
  for (int d = 0; d < 32; ++d) {
    if (graphs & (1u << d)) EmitGraphCounters(d);
  }
}

// ---- multicast objects ----
namespace {

constexpr int kMaxMulticast = 64;
constexpr int kMulticastDevices = 8;  // bound bytes per device 0..7; others share slot 8
struct MulticastEntry {
  uint64_t mc;  // 0 = free slot
  uint64_t size;
  uint64_t bound[kMulticastDevices + 1];  // [kMulticastDevices]: device -1 or >= 8
};
SpinLock g_mc_lock;
MulticastEntry g_mcs[kMaxMulticast];  // protected by g_mc_lock
std::atomic<bool> g_mcs_full{false};

int McSlot(int device) {
  return device >= 0 && device < kMulticastDevices ? device : kMulticastDevices;
}

void EmitMcSize(uint64_t mc, uint64_t size) {
  char name[96];
  EmitCounter(name, CounterName(name, sizeof name, "cuda.multicast:", -1, mc, "size_bytes"), size);
}
void EmitMcBound(uint64_t mc, int device, uint64_t bytes) {
  char name[96];
  EmitCounter(name, CounterName(name, sizeof name, "cuda.multicast:", device, mc, "bound_bytes"),
              bytes);
}

// Adds (sign > 0) or removes `bytes` bound on `device`; the new total, or -1
// for an object memstep did not see.
int64_t McBind(uint64_t mc, int device, uint64_t bytes, int sign) {
  SpinLockHolder h(&g_mc_lock);
  for (MulticastEntry& e : g_mcs) {
    if (e.mc != mc) continue;
    uint64_t& b = e.bound[McSlot(device)];
    b = sign > 0 ? b + bytes : (b > bytes ? b - bytes : 0);
    return static_cast<int64_t>(b);
  }
  return -1;
}

}  // namespace

// ---- the export registry ----
namespace {

// One export, as appended to MEMSTEP_DIR/cuda-exports (O_APPEND: each write
// of an entry lands whole, even from several processes at once).
struct ExportEntry {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  int32_t device;
  uint64_t size;
};
constexpr uint32_t kExportMagic = 0x4d455831;  // "MEX1"
constexpr int kKcmpFile = 0;                   // KCMP_FILE (linux/kcmp.h)

// MEMSTEP_DIR/cuda-exports into `out`; false without a directory.
bool ExportPath(char* out, size_t n) {
  const char* dir = g_config.dir;
  static const char kName[] = "/cuda-exports";
  size_t len = 0;
  while (dir[len] != '\0') ++len;
  if (len == 0 || len + sizeof kName > n) return false;
  memcpy(out, dir, len);
  memcpy(out + len, kName, sizeof kName);
  return true;
}

}  // namespace

void VmmExported(uint64_t handle, int fd) {
  ErrnoSaver errno_saver;
  ExportEntry e{kExportMagic, static_cast<int32_t>(getpid()), fd, -1, 0};
  if (fd < 0 || !VmmHandleSize(handle, &e.size, &e.device) || e.size == 0) return;
  char path[sizeof g_config.dir + 16];
  if (!ExportPath(path, sizeof path)) return;
  const int f = OpenOwn(path, O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (f < 0) return;
  if (write(f, &e, sizeof e) != static_cast<ssize_t>(sizeof e)) {
    // A short write leaves a partial entry, which readers skip by its size.
  }
  close(f);
}

bool ExportLookup(int fd, uint64_t* size, int* device, bool* own) {
  ErrnoSaver errno_saver;
  if (fd < 0) return false;
  char path[sizeof g_config.dir + 16];
  if (!ExportPath(path, sizeof path)) return false;
  const int f = OpenOwn(path, O_RDONLY);
  if (f < 0) return false;
  const pid_t self = getpid();
  bool found = false;
  ExportEntry batch[64];
  for (;;) {
    const ssize_t got = read(f, batch, sizeof batch);
    if (got <= 0) break;
    for (size_t i = 0; i < static_cast<size_t>(got) / sizeof(ExportEntry); ++i) {
      const ExportEntry& e = batch[i];
      if (e.magic != kExportMagic || e.size == 0) continue;
      // The same open file (the descriptor passed over a socket or taken
      // with pidfd_getfd) while the exporter still holds its descriptor; a
      // kcmp the system refuses (seccomp, another user) matches nothing.
      if (syscall(SYS_kcmp, self, e.pid, kKcmpFile, fd, e.fd) != 0) continue;
      *size = e.size;  // the last entry wins: a descriptor number reused
      *device = e.device;
      *own = e.pid == self;
      found = true;
    }
  }
  close(f);
  return found;
}

void MulticastCreated(uint64_t mc, uint64_t size) {
  if (mc == 0) return;
  bool stored = false;
  {
    SpinLockHolder h(&g_mc_lock);
    int free_slot = -1;
    for (int i = 0; i < kMaxMulticast; ++i) {
      if (g_mcs[i].mc == mc) {  // a handle value reused by the driver
        free_slot = i;
        break;
      }
      if (g_mcs[i].mc == 0 && free_slot < 0) free_slot = i;
    }
    if (free_slot >= 0) {
      g_mcs[free_slot] = {};
      g_mcs[free_slot].mc = mc;
      g_mcs[free_slot].size = size;
      stored = true;
    }
  }
  if (!stored) {
    if (!g_mcs_full.exchange(true)) {
      Notice("more than 64 multicast objects: the counters of later ones are not recorded");
    }
    return;
  }
  EmitMcSize(mc, size);
}

void MulticastBound(uint64_t mc, int device, uint64_t bytes) {
  int64_t total = McBind(mc, device, bytes, +1);
  if (total >= 0)
    EmitMcBound(mc, McSlot(device) == kMulticastDevices ? -1 : device,
                static_cast<uint64_t>(total));
}

void MulticastUnbound(uint64_t mc, int device, uint64_t bytes) {
  int64_t total = McBind(mc, device, bytes, -1);
  if (total >= 0)
    EmitMcBound(mc, McSlot(device) == kMulticastDevices ? -1 : device,
                static_cast<uint64_t>(total));
}

bool MulticastReleased(uint64_t mc) {
  MulticastEntry gone{};
  {
    SpinLockHolder h(&g_mc_lock);
    for (MulticastEntry& e : g_mcs) {
      if (e.mc == mc) {
        gone = e;
        e = {};
        break;
      }
    }
  }
  if (gone.mc == 0) return false;
  for (int d = 0; d <= kMulticastDevices; ++d) {
    if (gone.bound[d] != 0) EmitMcBound(mc, d == kMulticastDevices ? -1 : d, 0);
  }
  EmitMcSize(mc, 0);
  return true;
}

// ---- fork: the child has no CUDA context ----
namespace {
void CoverageForkPrepare() {
  g_pool_lock.Lock();
  g_ipc_lock.Lock();
  g_mc_lock.Lock();
}
void CoverageForkParent() {
  g_mc_lock.Unlock();
  g_ipc_lock.Unlock();
  g_pool_lock.Unlock();
}
void CoverageForkChild() {
  g_mc_lock.Reset();
  for (MulticastEntry& e : g_mcs) e = {};
  g_ipc_lock.Reset();
  g_pool_lock.Reset();
  if (g_ipc_table.load(std::memory_order_acquire) == 2) g_ipc_refs.Reset();
  for (PoolEntry& e : g_pools) e = {0, -1};
  g_graph_devices.store(0, std::memory_order_relaxed);
  t_ipc_rt_close = nullptr;
}
__attribute__((constructor(102))) void CoverageInit() {
  pthread_atfork(CoverageForkPrepare, CoverageForkParent, CoverageForkChild);
}
}  // namespace

}  // namespace memstep::preload::cuda
