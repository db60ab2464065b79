/* State shared by the fake CUDA runtime (libcudart.so.12/.13) and the fake
 * driver (libcuda.so.1): knobs, device-memory budget, the registry of live
 * blocks, stream-ordered pools and the call log. It lives in its own library,
 * libfakecuda_core.so, which both fakes link, so that a runtime call and a
 * driver call see one process-wide state (one budget, one call counter), the
 * way one GPU does.
 *
 * Contract:
 *  - Knobs are read once, on the first call into either fake (not in a
 *    constructor), so a test program may setenv() them at the top of main().
 *  - Backing memory comes from raw mmap syscalls: the profiler's host mmap
 *    hooks never see it. A freed block is remapped PROT_NONE in place and never
 *    unmapped, so no address is ever handed out twice in a process.
 *  - Thread-safe: one mutex guards the registry, budget and pools; it is
 *    taken around fork() (pthread_atfork), so a fork child can allocate.
 *  - Nothing here calls malloc.
 *
 * Knobs (environment):
 *   FAKECUDA_MEM_LIMIT=BYTES   device memory per device (default 80 GiB): the
 *                              total that cudaMemGetInfo reports; device,
 *                              VMM physical and pool-reserved bytes count
 *                              against it, beyond it allocations fail with
 *                              2 (cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY)
 *   FAKECUDA_FAIL_CALL=N       the N-th allocation call (1-based, counted
 *   FAKECUDA_FAIL_ERR=CODE     at the layer that allocates) fails with CODE
 *                              (default 2)
 *   FAKECUDA_RT_VIA_DRIVER=1   the runtime's cudaMalloc/cudaFree/cudaMallocAsync/
 *                              cudaFreeAsync/cudaMallocFromPoolAsync call the
 *                              driver functions it resolved (default: it
 *                              allocates itself)
 *   FAKECUDA_DEVICES=N         device count (default 2)
 *   FAKECUDA_LOG=PATH          append one line per call (see fc_log)
 */
#ifndef MEMSTEP_TESTS_CUDA_FAKE_FAKECUDA_CORE_H_
#define MEMSTEP_TESTS_CUDA_FAKE_FAKECUDA_CORE_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds: the numbers of memstep's format::DeviceKind. */
enum { FC_DEVICE = 1, FC_MANAGED = 2, FC_PINNED = 3, FC_VMM = 4, FC_POOL = 5 };
/* Who created a block. */
enum { FC_OWNER_DRIVER = 1, FC_OWNER_RT12 = 12, FC_OWNER_RT13 = 13 };

#define FC_GRANULARITY (2ull << 20) /* VMM granularity and pool reserve unit */

typedef struct fc_block {
  uint64_t addr; /* pointer, or the handle for FC_VMM */
  uint64_t size;
  uint64_t aux; /* FC_POOL: the pool (struct fc_pool*) */
  int kind;
  int dev; /* -1 for pinned host memory */
  int owner;
  const char* api; /* the exported function that created it (a string literal) */
  int borrowed;    /* the memory is not the fakes' (registered host memory): never retired */
} fc_block;

typedef struct fc_pool fc_pool;

/* ---- knobs and per-thread state */
void fc_init(void);
int fc_via_driver(void);
int fc_device_count(void);
int fc_rt_device(void);         /* the runtime's current device (default 0) */
void fc_set_rt_device(int dev); /* also makes that device's context current */
int fc_ctx_device(void);        /* the current context's device, -1 if none */
void fc_set_ctx_device(int dev);
void fc_enter_runtime(void); /* the runtime is calling the driver ... */
void fc_leave_runtime(void); /* ... until this */
int fc_in_runtime(void);

/* Counts one allocation call; returns the injected error (FAKECUDA_FAIL_CALL)
 * or 0. Called by the layer that allocates, once per logical call. */
int fc_count_alloc_call(void);

/* ---- device-memory budget: 0 on success, -1 when over the limit */
int fc_budget_take(int dev, uint64_t bytes);
void fc_budget_give(int dev, uint64_t bytes);
uint64_t fc_budget_used(int dev);
uint64_t fc_budget_total(void);

/* ---- backing memory (raw syscalls) */
void* fc_map(uint64_t bytes);                     /* read-write; NULL on failure */
void fc_retire(void* p, uint64_t bytes);          /* PROT_NONE in place */
void* fc_reserve(uint64_t bytes, uint64_t align); /* PROT_NONE address range */
void fc_unreserve(void* p, uint64_t bytes);
void fc_remap_none(void* p, uint64_t bytes); /* fresh PROT_NONE pages, same range */
int fc_protect_rw(void* p, uint64_t bytes);

/* ---- registry of live blocks, keyed by addr (or handle) */
int fc_block_add(const fc_block* b); /* 0, or -1 when full */
int fc_block_find(uint64_t addr, fc_block* out);
int fc_block_remove(uint64_t addr, fc_block* out);
uint64_t fc_next_handle(void); /* unique VMM handles */

/* ---- one allocation or free, start to end, for both fakes */
/* Allocates `size` bytes of `kind` on `dev` for the exported function `call`:
 * counts the call (FAKECUDA_FAIL_CALL), takes the budget (FC_DEVICE, FC_VMM)
 * or grows `pool` (FC_POOL), maps backing memory (a fresh handle for FC_VMM),
 * registers the block and logs it. Returns 0 and sets *out, or returns the
 * error (2 out of memory, or the injected code) with *out untouched. */
int fc_alloc(const char* call, int kind, int dev, uint64_t size, fc_pool* pool, uint64_t aux,
             int owner, uint64_t* out);
/* Frees the live block `addr` if (1 << its kind) is in kind_mask and logs it;
 * returns 0, or 1 (invalid value) when there is no such block. Pinned and
 * device memory is retired (PROT_NONE); a VMM handle has no memory of its own. */
int fc_free(const char* call, uint64_t addr, unsigned kind_mask);
#define FC_MASK(k) (1u << (k))

/* ---- stream-ordered pools. The reserve grows in FC_GRANULARITY steps and
 * counts against the device budget; freeing keeps it (release threshold
 * "infinite", as PyTorch sets it) until fc_pool_trim. */
fc_pool* fc_default_pool(int dev);
fc_pool* fc_pool_create(int dev); /* NULL when the table is full */
int fc_pool_destroy(fc_pool* p);  /* 0, or -1 if invalid or default */
int fc_pool_valid(fc_pool* p);
int fc_pool_dev(fc_pool* p);
int fc_pool_alloc(fc_pool* p, uint64_t size); /* 0, or -1 out of memory */
void fc_pool_free(fc_pool* p, uint64_t size);
void fc_pool_trim(fc_pool* p, uint64_t keep);
int fc_pool_attr(fc_pool* p, int attr, uint64_t* value); /* 0, or -1 unknown attr */
int fc_pool_set_attr(fc_pool* p, int attr, uint64_t value);

/* ---- issue 10 coverage */
/* Registers [p, p+size) as pinned (cuMemHostRegister): 0, 712 when it
 * overlaps a registered range's start, 1 for a null or empty range. */
int fc_host_register(const char* call, void* p, uint64_t size);
/* 0, or 713 (not registered). */
int fc_host_unregister(const char* call, void* p);
/* A CUDA array of `bytes` (the fakes size arrays like memstep's estimate:
 * element bytes x extents, every mip level). The handle is its memory. */
int fc_array_create(const char* call, int dev, uint64_t bytes, int owner, uint64_t* handle);
int fc_array_destroy(const char* call, uint64_t handle); /* 0, or 1 (invalid handle) */
/* IPC: a handle names (exporting pid, address, size, device). Opening it in
 * another process maps fresh memory of that size; opening it again returns
 * the same pointer and counts a reference (the driver's documented
 * behaviour); the last close unmaps it. Opening a handle of this very
 * process fails with 1 (invalid value), as in the driver. */
typedef struct fc_ipc_handle {
  char magic[8]; /* "FCIPC01" */
  int64_t pid;
  uint64_t addr, size;
  int64_t dev;
  char pad[24];
} fc_ipc_handle;
int fc_ipc_get(uint64_t addr, fc_ipc_handle* out); /* 0, or 1 (not a live device block) */
int fc_ipc_open(const char* call, const fc_ipc_handle* h, int owner, uint64_t* addr);
int fc_ipc_close(const char* call, uint64_t addr); /* 0, or 1 (not open) */
/* Graph memory nodes: the node's memory is a device_pool block (aux = the
 * graph); the device's graph reserve grows in FC_GRANULARITY units to cover
 * the live node bytes and shrinks only on fc_graph_trim. */
int fc_graph_alloc(const char* call, int dev, uint64_t size, uint64_t graph, int owner,
                   uint64_t* addr);
int fc_graph_free(const char* call, uint64_t addr); /* 0, or 1 (not a node's memory) */
void fc_graph_trim(int dev);
int fc_graph_attr(int dev, int attr, uint64_t* value); /* 0, or -1 (attr or device) */
/* cuMemGetAddressRange: the live block starting at or containing addr. */
int fc_address_range(uint64_t addr, uint64_t* base, uint64_t* size);

/* ---- call log (FAKECUDA_LOG), one write(2) per line:
 *   pid=P tid=T layer=app|rt call=NAME ev=alloc|free|fail|none kind=KIND dev=D
 *   size=N addr=0xA aux=0xX ret=R
 * `ev` is what a profiler counting at the lowest layer must record for this
 * line: a runtime call that handed the work to the driver logs ev=none and
 * the driver's line (layer=rt) carries the event. KIND is memstep's
 * DeviceKindName ("device", "device_managed", "pinned_host", "device_vmm",
 * "device_pool") or "-". */
void fc_log(const char* call, const char* ev, int kind, int dev, uint64_t size, uint64_t addr,
            uint64_t aux, int ret);
/* A driver lookup (cuGetProcAddress*, cudaGetDriverEntryPoint*):
 *   pid=P tid=T layer=L call=NAME ev=none symbol=S version=V flags=F found=F ret=R
 * `found` is the name of the function returned (dladdr), "-" for none, so
 * that two runs can be compared despite address randomisation. */
void fc_log_lookup(const char* call, const char* symbol, int version, uint64_t flags,
                   const void* fn, int ret);
const char* fc_kind_name(int kind);

/* ---- queries for the test programs (stable names) */
/* 1 and the block's fields if `addr` (or a VMM handle) is live, else 0. */
int fakecuda_block_info(uint64_t addr, int* kind, int* dev, uint64_t* size, const char** api,
                        int* owner);
/* Live bytes of `kind` in this process as the fakes account them. */
uint64_t fakecuda_live_bytes(int kind);
/* Allocation calls counted so far (see fc_count_alloc_call). */
uint64_t fakecuda_alloc_calls(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MEMSTEP_TESTS_CUDA_FAKE_FAKECUDA_CORE_H_ */
