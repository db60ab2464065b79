/* State shared by the fake CUDA runtime and driver: see fakecuda_core.h. */
#define _GNU_SOURCE
#include "fakecuda_core.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FC_MAX_DEVICES 8
#define FC_TABLE_SIZE (1u << 16) /* registry slots (power of two) */
#define FC_MAX_POOLS 64
#define FC_EMPTY 0ull
#define FC_TOMB 1ull

struct fc_pool {
  int live;
  int dev;
  int is_default;
  uint64_t used, used_high;
  uint64_t reserved, reserved_high;
  uint64_t threshold;
};

static struct {
  pthread_once_t once;
  uint64_t mem_limit;
  uint64_t fail_call;
  int fail_err;
  int via_driver;
  int devices;
  int log_fd;
} g_knobs = {PTHREAD_ONCE_INIT, 0, 0, 2, 0, 2, -1};

/* Protected by g_mu: everything below until the next comment. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static fc_block g_table[FC_TABLE_SIZE];
static uint64_t g_budget_used[FC_MAX_DEVICES];
static struct fc_pool g_pools[FC_MAX_POOLS]; /* [0, FC_MAX_DEVICES) are the default pools */

static atomic_ullong g_alloc_calls;
static atomic_ullong g_next_handle = 0xC0DE0000ull;

static __thread int t_rt_device = 0;
static __thread int t_ctx_device = -1;
static __thread int t_runtime_depth = 0;

/* ---------------------------------------------------------------- knobs */

static uint64_t ParseBytes(const char* s, uint64_t dflt) {
  if (s == NULL || *s == '\0') return dflt;
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  switch (end && *end ? *end : 0) {
    case 'k':
    case 'K':
      v <<= 10;
      break;
    case 'm':
    case 'M':
      v <<= 20;
      break;
    case 'g':
    case 'G':
      v <<= 30;
      break;
    default:
      break;
  }
  return v;
}

static void Lock(void) { pthread_mutex_lock(&g_mu); }
static void Unlock(void) { pthread_mutex_unlock(&g_mu); }

static void ReadKnobs(void) {
  g_knobs.mem_limit = ParseBytes(getenv("FAKECUDA_MEM_LIMIT"), 80ull << 30);
  g_knobs.fail_call = ParseBytes(getenv("FAKECUDA_FAIL_CALL"), 0);
  const char* err = getenv("FAKECUDA_FAIL_ERR");
  g_knobs.fail_err = err && *err ? atoi(err) : 2;
  const char* via = getenv("FAKECUDA_RT_VIA_DRIVER");
  g_knobs.via_driver = via && via[0] == '1';
  const char* devs = getenv("FAKECUDA_DEVICES");
  g_knobs.devices = devs && *devs ? atoi(devs) : 2;
  if (g_knobs.devices < 1) g_knobs.devices = 1;
  if (g_knobs.devices > FC_MAX_DEVICES) g_knobs.devices = FC_MAX_DEVICES;
  const char* log = getenv("FAKECUDA_LOG");
  if (log && *log) g_knobs.log_fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  for (int d = 0; d < FC_MAX_DEVICES; ++d) {
    g_pools[d].live = 1;
    g_pools[d].dev = d;
    g_pools[d].is_default = 1;
  }
  /* The child of a fork must be able to allocate: hold the lock across fork. */
  pthread_atfork(Lock, Unlock, Unlock);
}

void fc_init(void) { pthread_once(&g_knobs.once, ReadKnobs); }
int fc_via_driver(void) {
  fc_init();
  return g_knobs.via_driver;
}
int fc_device_count(void) {
  fc_init();
  return g_knobs.devices;
}
int fc_rt_device(void) { return t_rt_device; }
void fc_set_rt_device(int dev) {
  t_rt_device = dev;
  t_ctx_device = dev;
}
int fc_ctx_device(void) { return t_ctx_device; }
void fc_set_ctx_device(int dev) { t_ctx_device = dev; }
void fc_enter_runtime(void) { ++t_runtime_depth; }
void fc_leave_runtime(void) { --t_runtime_depth; }
int fc_in_runtime(void) { return t_runtime_depth > 0; }

int fc_count_alloc_call(void) {
  fc_init();
  uint64_t n = atomic_fetch_add(&g_alloc_calls, 1) + 1;
  return g_knobs.fail_call != 0 && n == g_knobs.fail_call ? g_knobs.fail_err : 0;
}

/* ---------------------------------------------------------------- budget */

int fc_budget_take(int dev, uint64_t bytes) {
  fc_init();
  if (dev < 0 || dev >= FC_MAX_DEVICES) return -1;
  int ok;
  Lock();
  ok = g_budget_used[dev] + bytes <= g_knobs.mem_limit;
  if (ok) g_budget_used[dev] += bytes;
  Unlock();
  return ok ? 0 : -1;
}

void fc_budget_give(int dev, uint64_t bytes) {
  if (dev < 0 || dev >= FC_MAX_DEVICES) return;
  Lock();
  g_budget_used[dev] -= bytes;
  Unlock();
}

uint64_t fc_budget_used(int dev) {
  if (dev < 0 || dev >= FC_MAX_DEVICES) return 0;
  Lock();
  uint64_t v = g_budget_used[dev];
  Unlock();
  return v;
}

uint64_t fc_budget_total(void) {
  fc_init();
  return g_knobs.mem_limit;
}

/* ---------------------------------------------------------------- memory */

static void* RawMmap(void* addr, uint64_t len, int prot, int flags) {
  long r = syscall(SYS_mmap, addr, (size_t)len, prot, flags, -1, 0L);
  return r < 0 && r > -4096 ? NULL : (void*)r;
}

static uint64_t PageRound(uint64_t n) { return (n + 4095) & ~4095ull; }

void* fc_map(uint64_t bytes) {
  return RawMmap(NULL, PageRound(bytes ? bytes : 1), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
}

void fc_retire(void* p, uint64_t bytes) { fc_remap_none(p, bytes ? bytes : 1); }

void fc_remap_none(void* p, uint64_t bytes) {
  RawMmap(p, PageRound(bytes), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED);
}

void* fc_reserve(uint64_t bytes, uint64_t align) {
  if (align < FC_GRANULARITY) align = FC_GRANULARITY;
  uint64_t len = bytes + align;
  char* raw = RawMmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
  if (raw == NULL) return NULL;
  uint64_t base = ((uint64_t)raw + align - 1) & ~(align - 1);
  if (base > (uint64_t)raw) syscall(SYS_munmap, raw, (size_t)(base - (uint64_t)raw));
  uint64_t tail = (uint64_t)raw + len - (base + bytes);
  if (tail) syscall(SYS_munmap, (void*)(base + bytes), (size_t)tail);
  return (void*)base;
}

void fc_unreserve(void* p, uint64_t bytes) { syscall(SYS_munmap, p, (size_t)bytes); }

int fc_protect_rw(void* p, uint64_t bytes) {
  return syscall(SYS_mprotect, p, (size_t)PageRound(bytes), PROT_READ | PROT_WRITE) == 0 ? 0 : -1;
}

/* ---------------------------------------------------------------- registry */

static uint32_t Hash(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return (uint32_t)k & (FC_TABLE_SIZE - 1);
}

/* Slot holding `addr`, or -1. Caller holds g_mu. */
static int FindSlot(uint64_t addr) {
  for (uint32_t i = Hash(addr), n = 0; n < FC_TABLE_SIZE; ++n, i = (i + 1) & (FC_TABLE_SIZE - 1)) {
    if (g_table[i].addr == FC_EMPTY) return -1;
    if (g_table[i].addr == addr) return (int)i;
  }
  return -1;
}

int fc_block_add(const fc_block* b) {
  int rc = -1;
  Lock();
  for (uint32_t i = Hash(b->addr), n = 0; n < FC_TABLE_SIZE;
       ++n, i = (i + 1) & (FC_TABLE_SIZE - 1)) {
    if (g_table[i].addr == FC_EMPTY || g_table[i].addr == FC_TOMB) {
      g_table[i] = *b;
      rc = 0;
      break;
    }
  }
  Unlock();
  return rc;
}

int fc_block_find(uint64_t addr, fc_block* out) {
  if (addr <= FC_TOMB) return 0;
  Lock();
  int s = FindSlot(addr);
  if (s >= 0 && out) *out = g_table[s];
  Unlock();
  return s >= 0;
}

int fc_block_remove(uint64_t addr, fc_block* out) {
  if (addr <= FC_TOMB) return 0;
  Lock();
  int s = FindSlot(addr);
  if (s >= 0) {
    if (out) *out = g_table[s];
    g_table[s].addr = FC_TOMB;
  }
  Unlock();
  return s >= 0;
}

uint64_t fc_next_handle(void) { return atomic_fetch_add(&g_next_handle, 0x10); }

/* ---------------------------------------------------------------- pools */

fc_pool* fc_default_pool(int dev) {
  fc_init();
  return dev >= 0 && dev < g_knobs.devices ? &g_pools[dev] : NULL;
}

fc_pool* fc_pool_create(int dev) {
  fc_init();
  if (dev < 0 || dev >= g_knobs.devices) return NULL;
  fc_pool* p = NULL;
  Lock();
  for (int i = FC_MAX_DEVICES; i < FC_MAX_POOLS && p == NULL; ++i) {
    if (!g_pools[i].live) {
      p = &g_pools[i];
      memset(p, 0, sizeof(*p));
      p->live = 1;
      p->dev = dev;
    }
  }
  Unlock();
  return p;
}

int fc_pool_valid(fc_pool* p) {
  if (p < &g_pools[0] || p >= &g_pools[FC_MAX_POOLS]) return 0;
  fc_init();
  return p->live && (!p->is_default || p->dev < g_knobs.devices);
}

int fc_pool_dev(fc_pool* p) { return p->dev; }

int fc_pool_destroy(fc_pool* p) {
  if (!fc_pool_valid(p) || p->is_default) return -1;
  Lock();
  uint64_t give = p->reserved;
  int dev = p->dev;
  p->live = 0;
  Unlock();
  fc_budget_give(dev, give);
  return 0;
}

static uint64_t GranuleRound(uint64_t n) {
  return (n + FC_GRANULARITY - 1) & ~(FC_GRANULARITY - 1);
}

int fc_pool_alloc(fc_pool* p, uint64_t size) {
  int rc = -1;
  Lock();
  uint64_t need = GranuleRound(p->used + size);
  uint64_t grow = need > p->reserved ? need - p->reserved : 0;
  if (g_budget_used[p->dev] + grow <= g_knobs.mem_limit) {
    g_budget_used[p->dev] += grow;
    p->reserved += grow;
    p->used += size;
    if (p->used > p->used_high) p->used_high = p->used;
    if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
    rc = 0;
  }
  Unlock();
  return rc;
}

void fc_pool_free(fc_pool* p, uint64_t size) {
  Lock();
  p->used -= size;
  Unlock();
}

void fc_pool_trim(fc_pool* p, uint64_t keep) {
  Lock();
  uint64_t floor = GranuleRound(p->used);
  uint64_t target = GranuleRound(keep);
  if (target < floor) target = floor;
  uint64_t give = p->reserved > target ? p->reserved - target : 0;
  p->reserved -= give;
  Unlock();
  fc_budget_give(p->dev, give);
}

int fc_pool_attr(fc_pool* p, int attr, uint64_t* value) {
  Lock();
  int rc = 0;
  switch (attr) {
    case 4:
      *value = p->threshold;
      break;
    case 5:
      *value = p->reserved;
      break;
    case 6:
      *value = p->reserved_high;
      break;
    case 7:
      *value = p->used;
      break;
    case 8:
      *value = p->used_high;
      break;
    default:
      rc = -1;
      break;
  }
  Unlock();
  return rc;
}

int fc_pool_set_attr(fc_pool* p, int attr, uint64_t value) {
  if (attr != 4) return -1;
  Lock();
  p->threshold = value;
  Unlock();
  return 0;
}

/* ---------------------------------------------------------------- alloc/free */

static int CountsAgainstBudget(int kind) { return kind == FC_DEVICE || kind == FC_VMM; }

int fc_alloc(const char* call, int kind, int dev, uint64_t size, fc_pool* pool, uint64_t aux,
             int owner, uint64_t* out) {
  int err = fc_count_alloc_call();
  int took = 0, pooled = 0;
  uint64_t addr = 0;
  if (err == 0 && CountsAgainstBudget(kind)) {
    if (fc_budget_take(dev, size) == 0)
      took = 1;
    else
      err = 2;
  }
  if (err == 0 && kind == FC_POOL) {
    if (fc_pool_alloc(pool, size) == 0)
      pooled = 1;
    else
      err = 2;
  }
  if (err == 0) {
    addr = kind == FC_VMM ? fc_next_handle() : (uint64_t)fc_map(size);
    if (addr == 0) err = 2;
  }
  fc_block b = {addr, size, aux, kind, dev, owner, call, 0};
  if (err == 0 && fc_block_add(&b) != 0) err = 2;
  if (err != 0) {
    if (took) fc_budget_give(dev, size);
    if (pooled) fc_pool_free(pool, size);
    fc_log(call, "fail", kind, dev, size, 0, aux, err);
    return err;
  }
  *out = addr;
  fc_log(call, "alloc", kind, dev, size, addr, aux, 0);
  return 0;
}

int fc_free(const char* call, uint64_t addr, unsigned kind_mask) {
  fc_block b;
  if (!fc_block_find(addr, &b) || !(kind_mask & FC_MASK(b.kind)) || !fc_block_remove(addr, &b)) {
    fc_log(call, "none", 0, -1, 0, addr, 0, 1);
    return 1;
  }
  if (CountsAgainstBudget(b.kind)) fc_budget_give(b.dev, b.size);
  if (b.kind == FC_POOL) fc_pool_free(b.aux ? (fc_pool*)b.aux : fc_default_pool(b.dev), b.size);
  if (b.kind != FC_VMM && !b.borrowed) fc_retire((void*)addr, b.size);
  fc_log(call, "free", b.kind, b.dev, b.size, addr, b.aux, 0);
  return 0;
}

/* ---------------------------------------------------------------- issue 10 coverage */

int fc_host_register(const char* call, void* p, uint64_t size) {
  if (p == NULL || size == 0) {
    fc_log(call, "fail", FC_PINNED, -1, size, 0, 0, 1);
    return 1;
  }
  fc_block b = {(uint64_t)p, size, 0, FC_PINNED, -1, FC_OWNER_DRIVER, call, 1};
  int err = fc_block_find((uint64_t)p, NULL) ? 712 : fc_block_add(&b) == 0 ? 0 : 2;
  fc_log(call, err ? "fail" : "alloc", FC_PINNED, -1, size, err ? 0 : (uint64_t)p, 0, err);
  return err;
}

int fc_host_unregister(const char* call, void* p) {
  fc_block b;
  if (!fc_block_find((uint64_t)p, &b) || !b.borrowed) {
    fc_log(call, "none", 0, -1, 0, (uint64_t)p, 0, 713);
    return 713;
  }
  return fc_free(call, (uint64_t)p, FC_MASK(FC_PINNED));
}

int fc_array_create(const char* call, int dev, uint64_t bytes, int owner, uint64_t* handle) {
  if (bytes == 0) {
    fc_log(call, "fail", FC_DEVICE, dev, 0, 0, 0, 1);
    return 1;
  }
  return fc_alloc(call, FC_DEVICE, dev, bytes, NULL, 0, owner, handle);
}

int fc_array_destroy(const char* call, uint64_t handle) {
  fc_block b;
  if (!fc_block_find(handle, &b) || strstr(b.api, "rray") == NULL) {
    fc_log(call, "none", 0, -1, 0, handle, 0, 1);
    return 1;
  }
  return fc_free(call, handle, FC_MASK(FC_DEVICE));
}

/* Opened IPC handles of this process; protected by g_mu. */
#define FC_MAX_IPC 64
static struct {
  int64_t pid;
  uint64_t src, local;
  int refs;
} g_ipc[FC_MAX_IPC];

int fc_ipc_get(uint64_t addr, fc_ipc_handle* out) {
  fc_block b;
  if (!fc_block_find(addr, &b) || b.kind != FC_DEVICE) return 1;
  memset(out, 0, sizeof *out);
  memcpy(out->magic, "FCIPC01", 8);
  out->pid = getpid();
  out->addr = addr;
  out->size = b.size;
  out->dev = b.dev;
  return 0;
}

int fc_ipc_open(const char* call, const fc_ipc_handle* h, int owner, uint64_t* addr) {
  if (memcmp(h->magic, "FCIPC01", 8) != 0 || h->pid == getpid() || h->size == 0) {
    fc_log(call, "fail", FC_DEVICE, (int)h->dev, h->size, 0, 0, 1);
    return 1;
  }
  Lock();
  for (int i = 0; i < FC_MAX_IPC; ++i) {
    if (g_ipc[i].refs > 0 && g_ipc[i].pid == h->pid && g_ipc[i].src == h->addr) {
      ++g_ipc[i].refs;
      *addr = g_ipc[i].local;
      Unlock();
      fc_log(call, "none", FC_DEVICE, (int)h->dev, h->size, *addr, 0, 0);
      return 0;
    }
  }
  Unlock();
  void* mem = fc_map(h->size);
  fc_block b = {(uint64_t)mem, h->size, 0, FC_DEVICE, (int)h->dev, owner, call, 0};
  int slot = -1;
  Lock();
  for (int i = 0; i < FC_MAX_IPC && slot < 0; ++i) {
    if (g_ipc[i].refs == 0) slot = i;
  }
  if (slot >= 0 && mem != NULL) {
    g_ipc[slot].pid = h->pid;
    g_ipc[slot].src = h->addr;
    g_ipc[slot].local = (uint64_t)mem;
    g_ipc[slot].refs = 1;
  }
  Unlock();
  if (slot < 0 || mem == NULL || fc_block_add(&b) != 0) {
    fc_log(call, "fail", FC_DEVICE, (int)h->dev, h->size, 0, 0, 2);
    return 2;
  }
  *addr = (uint64_t)mem;
  fc_log(call, "alloc", FC_DEVICE, (int)h->dev, h->size, *addr, 0, 0);
  return 0;
}

int fc_ipc_close(const char* call, uint64_t addr) {
  int last = -1;
  Lock();
  for (int i = 0; i < FC_MAX_IPC; ++i) {
    if (g_ipc[i].refs > 0 && g_ipc[i].local == addr) {
      last = --g_ipc[i].refs == 0;
      break;
    }
  }
  Unlock();
  if (last < 0) {
    fc_log(call, "none", 0, -1, 0, addr, 0, 1);
    return 1;
  }
  if (!last) {
    fc_log(call, "none", FC_DEVICE, -1, 0, addr, 0, 0);
    return 0;
  }
  return fc_free(call, addr, FC_MASK(FC_DEVICE));
}

/* Graph memory per device; protected by g_mu. */
static uint64_t g_graph_used[FC_MAX_DEVICES], g_graph_reserved[FC_MAX_DEVICES];

static uint64_t GraphRound(uint64_t n) { return (n + FC_GRANULARITY - 1) & ~(FC_GRANULARITY - 1); }

int fc_graph_alloc(const char* call, int dev, uint64_t size, uint64_t graph, int owner,
                   uint64_t* addr) {
  fc_init();
  if (dev < 0 || dev >= g_knobs.devices || size == 0 || graph == 0) {
    fc_log(call, "fail", FC_POOL, dev, size, 0, graph, 1);
    return 1;
  }
  int err = fc_count_alloc_call();
  int took = 0;
  if (err == 0) {
    Lock();
    uint64_t need = GraphRound(g_graph_used[dev] + size);
    uint64_t grow = need > g_graph_reserved[dev] ? need - g_graph_reserved[dev] : 0;
    if (g_budget_used[dev] + grow <= g_knobs.mem_limit) {
      g_budget_used[dev] += grow;
      g_graph_reserved[dev] += grow;
      g_graph_used[dev] += size;
      took = 1;
    } else {
      err = 2;
    }
    Unlock();
  }
  void* mem = err == 0 ? fc_map(size) : NULL;
  fc_block b = {(uint64_t)mem, size, graph, FC_POOL, dev, owner, call, 0};
  if (err == 0 && (mem == NULL || fc_block_add(&b) != 0)) err = 2;
  if (err != 0) {
    if (took) {
      Lock();
      g_graph_used[dev] -= size;
      Unlock();
    }
    fc_log(call, "fail", FC_POOL, dev, size, 0, graph, err);
    return err;
  }
  *addr = (uint64_t)mem;
  fc_log(call, "alloc", FC_POOL, dev, size, *addr, graph, 0);
  return 0;
}

int fc_graph_free(const char* call, uint64_t addr) {
  fc_block b;
  if (!fc_block_find(addr, &b) || b.kind != FC_POOL || strstr(b.api, "Graph") == NULL ||
      !fc_block_remove(addr, &b)) {
    fc_log(call, "none", 0, -1, 0, addr, 0, 1);
    return 1;
  }
  Lock();
  g_graph_used[b.dev] -= b.size;
  Unlock();
  fc_retire((void*)addr, b.size);
  fc_log(call, "free", b.kind, b.dev, b.size, addr, b.aux, 0);
  return 0;
}

void fc_graph_trim(int dev) {
  if (dev < 0 || dev >= FC_MAX_DEVICES) return;
  Lock();
  uint64_t keep = GraphRound(g_graph_used[dev]);
  uint64_t give = g_graph_reserved[dev] > keep ? g_graph_reserved[dev] - keep : 0;
  g_graph_reserved[dev] -= give;
  g_budget_used[dev] -= give;
  Unlock();
}

int fc_graph_attr(int dev, int attr, uint64_t* value) {
  fc_init();
  if (dev < 0 || dev >= g_knobs.devices) return -1;
  Lock();
  int rc = 0;
  switch (attr) {
    case 0:
      *value = g_graph_used[dev];
      break; /* UsedMemCurrent */
    case 2:
      *value = g_graph_reserved[dev];
      break; /* ReservedMemCurrent */
    default:
      rc = -1;
      break;
  }
  Unlock();
  return rc;
}

int fc_address_range(uint64_t addr, uint64_t* base, uint64_t* size) {
  fc_block b;
  if (!fc_block_find(addr, &b)) return 1;
  *base = addr;
  *size = b.size;
  return 0;
}

/* ---------------------------------------------------------------- log */

const char* fc_kind_name(int kind) {
  switch (kind) {
    case FC_DEVICE:
      return "device";
    case FC_MANAGED:
      return "device_managed";
    case FC_PINNED:
      return "pinned_host";
    case FC_VMM:
      return "device_vmm";
    case FC_POOL:
      return "device_pool";
    default:
      return "-";
  }
}

void fc_log(const char* call, const char* ev, int kind, int dev, uint64_t size, uint64_t addr,
            uint64_t aux, int ret) {
  fc_init();
  if (g_knobs.log_fd < 0) return;
  int saved = errno;
  char line[320];
  int n = snprintf(line, sizeof line,
                   "pid=%d tid=%ld layer=%s call=%s ev=%s kind=%s dev=%d size=%llu addr=0x%llx "
                   "aux=0x%llx ret=%d\n",
                   (int)getpid(), (long)syscall(SYS_gettid), fc_in_runtime() ? "rt" : "app", call,
                   ev, fc_kind_name(kind), dev, (unsigned long long)size, (unsigned long long)addr,
                   (unsigned long long)aux, ret);
  if (n > 0 && n < (int)sizeof line) (void)!write(g_knobs.log_fd, line, (size_t)n);
  errno = saved;
}

void fc_log_lookup(const char* call, const char* symbol, int version, uint64_t flags,
                   const void* fn, int ret) {
  fc_init();
  if (g_knobs.log_fd < 0) return;
  int saved = errno;
  Dl_info info;
  const char* found = "-";
  if (fn != NULL) found = dladdr(fn, &info) && info.dli_sname ? info.dli_sname : "?";
  char line[384];
  int n = snprintf(line, sizeof line,
                   "pid=%d tid=%ld layer=%s call=%s ev=none symbol=%.100s version=%d flags=%llu "
                   "found=%.100s ret=%d\n",
                   (int)getpid(), (long)syscall(SYS_gettid), fc_in_runtime() ? "rt" : "app", call,
                   symbol ? symbol : "(null)", version, (unsigned long long)flags, found, ret);
  if (n > 0 && n < (int)sizeof line) (void)!write(g_knobs.log_fd, line, (size_t)n);
  errno = saved;
}

/* ---------------------------------------------------------------- queries */

int fakecuda_block_info(uint64_t addr, int* kind, int* dev, uint64_t* size, const char** api,
                        int* owner) {
  fc_block b;
  if (!fc_block_find(addr, &b)) return 0;
  if (kind) *kind = b.kind;
  if (dev) *dev = b.dev;
  if (size) *size = b.size;
  if (api) *api = b.api;
  if (owner) *owner = b.owner;
  return 1;
}

uint64_t fakecuda_live_bytes(int kind) {
  uint64_t sum = 0;
  Lock();
  for (uint32_t i = 0; i < FC_TABLE_SIZE; ++i) {
    if (g_table[i].addr > FC_TOMB && g_table[i].kind == kind) sum += g_table[i].size;
  }
  Unlock();
  return sum;
}

uint64_t fakecuda_alloc_calls(void) { return atomic_load(&g_alloc_calls); }
