/* memstep public C API (C99 and C++): training step / stage markers and
 * user counters for the memstep allocation profiler.
 *
 * Contract:
 *  - The functions are defined by libmemstep.so, which `memstep run` (or
 *    LD_PRELOAD=.../libmemstep.so) injects. Nothing here needs linking.
 *  - By default they are declared weak, so a program compiled against this
 *    header links and runs without memstep: the symbols are then null and the
 *    MEMSTEP_* wrapper macros below do nothing (one compare, no call).
 *  - All functions are thread-safe and cheap (no allocation from the
 *    program's heap, a short spinlock, one record in a per-thread buffer).
 *    The current (step, stage) is process-global: allocations made by every
 *    thread are tagged with it.
 *  - Calling them inside a signal handler is not supported.
 *
 * Semantics:
 *  - memstep_step_begin(n) opens step n (ending the open step, if any; when
 *    step n itself is open, it just continues);
 *    memstep_step_end(n) closes it. Each boundary writes a STEP record with
 *    exact heap counters; the end record's peak is the step's peak live bytes.
 *  - memstep_stage_begin(name) / memstep_stage_end(name) bracket a stage
 *    ("data", "forward", "backward", "optimizer", ...); stages nest (up to 16
 *    levels). The stage-end record's peak is the stage's peak live bytes.
 *  - memstep_epoch_begin(e) starts epoch e (an EPOCH record): the steps that
 *    follow belong to it until the next memstep_epoch_begin. Steps nest in
 *    epochs; reports give per-epoch growth and peaks.
 *  - memstep_boost(n) samples densely (T_warm) for the next n steps, e.g.
 *    around a phase worth the detail; estimates stay unbiased.
 *  - memstep_counter(name, value) records a named value (e.g. PyTorch's
 *    allocator statistics) at the current time.
 *
 * Usage, pattern 1 (weak symbols, the default):
 *     #include "memstep/memstep.h"
 *     for (uint64_t step = 0; step < n; ++step) {
 *       MEMSTEP_STEP_BEGIN(step);
 *       MEMSTEP_STAGE_BEGIN("forward"); forward(); MEMSTEP_STAGE_END("forward");
 *       MEMSTEP_STEP_END(step);
 *     }
 * Pattern 2 (no header at all, e.g. from another language): look the symbols
 * up at run time; they are null when memstep is not loaded:
 *     typedef void (*step_fn)(uint64_t);
 *     step_fn f = (step_fn)dlsym(RTLD_DEFAULT, "memstep_step_begin");
 *     if (f) f(step);
 * Python: ctypes.CDLL(None).memstep_step_begin (see python/memstep).
 * C++: memstep/scoped.h has scope objects (ScopedStep, ScopedStage).
 *
 * Define MEMSTEP_NO_WEAK before including to get plain (strong) declarations,
 * e.g. when linking a program directly against libmemstep.so.
 */
#ifndef MEMSTEP_INCLUDE_MEMSTEP_MEMSTEP_H_
#define MEMSTEP_INCLUDE_MEMSTEP_MEMSTEP_H_

#include <stdint.h>

#if defined(MEMSTEP_NO_WEAK) || defined(MEMSTEP_BUILDING_LIBRARY)
#define MEMSTEP_API_ATTR __attribute__((visibility("default")))
#else
#define MEMSTEP_API_ATTR __attribute__((weak))
#endif

#ifdef __cplusplus
extern "C" {
#endif

MEMSTEP_API_ATTR void memstep_step_begin(uint64_t step);
MEMSTEP_API_ATTR void memstep_step_end(uint64_t step);
MEMSTEP_API_ATTR void memstep_stage_begin(const char* name);
MEMSTEP_API_ATTR void memstep_stage_end(const char* name);
MEMSTEP_API_ATTR void memstep_counter(const char* name, int64_t value);
MEMSTEP_API_ATTR void memstep_epoch_begin(uint64_t epoch);
MEMSTEP_API_ATTR void memstep_boost(uint32_t steps);
/* 1 once an NVTX range matching the step pattern marked a step, else 0 (the
 * Python hooks then leave step marking to NVTX). */
MEMSTEP_API_ATTR int memstep_nvtx_steps_seen(void);
/* Memory snapshots (a MEM_SNAPSHOT record; `memstep report` shows what was
 * live by site at that moment, host and device). memstep_out_of_memory: the
 * program (or a framework: the Python helper for PyTorch's OutOfMemoryError)
 * caught an out-of-memory error on `device` (-1 unknown) asking for
 * `requested` bytes, with `free_bytes`/`total_bytes` of the device free and
 * in total (0: unknown). memstep_snapshot: a snapshot on request (the same as
 * the snapshot signal, MEMSTEP_SNAPSHOT_SIGNAL). */
MEMSTEP_API_ATTR void memstep_out_of_memory(int32_t device, uint64_t requested, uint64_t free_bytes,
                                            uint64_t total_bytes);
MEMSTEP_API_ATTR void memstep_snapshot(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* Null-safe wrappers: no-ops when libmemstep.so is not loaded. */
#define MEMSTEP_STEP_BEGIN(n)                                        \
  do {                                                               \
    if (&memstep_step_begin != 0) memstep_step_begin((uint64_t)(n)); \
  } while (0)
#define MEMSTEP_STEP_END(n)                                      \
  do {                                                           \
    if (&memstep_step_end != 0) memstep_step_end((uint64_t)(n)); \
  } while (0)
#define MEMSTEP_STAGE_BEGIN(name)                             \
  do {                                                        \
    if (&memstep_stage_begin != 0) memstep_stage_begin(name); \
  } while (0)
#define MEMSTEP_STAGE_END(name)                           \
  do {                                                    \
    if (&memstep_stage_end != 0) memstep_stage_end(name); \
  } while (0)
#define MEMSTEP_EPOCH_BEGIN(n)                                         \
  do {                                                                 \
    if (&memstep_epoch_begin != 0) memstep_epoch_begin((uint64_t)(n)); \
  } while (0)
#define MEMSTEP_COUNTER(name, value)                                      \
  do {                                                                    \
    if (&memstep_counter != 0) memstep_counter((name), (int64_t)(value)); \
  } while (0)
#define MEMSTEP_BOOST(n)                                   \
  do {                                                     \
    if (&memstep_boost != 0) memstep_boost((uint32_t)(n)); \
  } while (0)

/* C++: memstep::ScopedStep and memstep::ScopedStage, scope objects over the
 * functions above, live in memstep/scoped.h (included here for C++). */
#ifdef __cplusplus
#include "memstep/scoped.h"
#endif

#endif /* MEMSTEP_INCLUDE_MEMSTEP_MEMSTEP_H_ */
