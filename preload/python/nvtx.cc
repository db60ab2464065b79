// NVTX v3 injection: libmemstep.so exports InitializeInjectionNvtx2, so a
// program's NVTX instance that finds NVTX_INJECTION64_PATH pointing at it
// (memstep run sets it unless the user did) hands us its callback tables.
// Ranges become stages; a range whose name matches MEMSTEP_STEP_RANGE (POSIX
// ERE, case-insensitive, compiled once at init) marks a step instead, numbered
// by the first decimal number in its name or else by a counter.
//
// Handled: nvtxRangePushA/PushEx/Pop, nvtxRangeStartA/StartEx/End, their
// domain variants (DomainRangePushEx/Pop/StartEx/End), registered strings
// (DomainRegisterStringA) and DomainCreateA (returns a non-null handle).
// Messages must be ASCII (or registered); others are ignored. The NVTX ABI
// below (table ids, callback ids, the event attribute layout) is the stable
// one of nvtx3/nvtxDetail/nvtxTypes.h and nvToolsExt.h, restated here so the
// library builds without the CUDA toolkit.
//
// Push/Pop nest per thread (a per-thread stack of what each push opened);
// Start/End may cross threads: the range id itself encodes what it opened.

#include <regex.h>
#include <stdint.h>

#include "preload/host/recorder.h"
#include "preload/steps/config.h"

namespace memstep::preload {

namespace {

// ---- NVTX ABI ----
using NvtxFunctionPointer = void (*)();
using NvtxFunctionTable = NvtxFunctionPointer**;
using GetExportTableFn = const void* (*)(uint32_t);
constexpr uint32_t kEtidCallbacks = 1;
constexpr int kModuleCore = 1;
constexpr int kModuleCore2 = 5;
struct ExportTableCallbacks {
  size_t struct_size;
  int (*GetModuleFunctionTable)(int module, NvtxFunctionTable* out, unsigned* out_size);
};
enum CoreCbid : unsigned {
  kRangeStartEx = 4,
  kRangeStartA = 5,
  kRangeEnd = 7,
  kRangePushEx = 8,
  kRangePushA = 9,
  kRangePop = 11,
};
enum Core2Cbid : unsigned {
  kDomainRangeStartEx = 2,
  kDomainRangeEnd = 3,
  kDomainRangePushEx = 4,
  kDomainRangePop = 5,
  kDomainRegisterStringA = 10,
  kDomainCreateA = 12,
};
constexpr int32_t kMessageAscii = 1;
constexpr int32_t kMessageRegistered = 3;
struct EventAttributes {
  uint16_t version;
  uint16_t size;
  uint32_t category;
  int32_t color_type;
  uint32_t color;
  int32_t payload_type;
  int32_t reserved0;
  uint64_t payload;
  int32_t message_type;
  const void* message;
};

// ---- state ----
regex_t g_step_re;
bool g_re_ok = false;
std::atomic<uint64_t> g_auto_step{0};
// Set once a range marked a step; never cleared. Read by
// memstep_nvtx_steps_seen (the Python hooks stop marking steps then).
std::atomic<bool> g_steps_seen{false};
int g_domain_dummy;  // DomainCreateA's handle

constexpr int kDepth = 32;
struct NvtxThread {
  int depth;
  uint64_t open[kDepth];  // what each push opened (EncodeRange)
};
__thread NvtxThread t_nvtx __attribute__((tls_model("initial-exec")));

// Registered strings: copies in a bump arena (never freed).
SpinLock g_str_lock;
char* g_str_arena = nullptr;
size_t g_str_used = 0;
constexpr size_t kStrArena = size_t{1} << 20;

// A range handle: bit 0 = step, else stage; the rest is the step number or
// the stage's string id; 0 = nothing was opened.
uint64_t StepHandle(uint64_t step) { return (step << 1) | 1; }

uint64_t ParseNumber(const char* s, bool* found) {
  *found = false;
  while (*s != '\0' && (*s < '0' || *s > '9')) ++s;
  uint64_t v = 0;
  while (*s >= '0' && *s <= '9' && v < UINT64_MAX / 10 - 10) {
    v = v * 10 + static_cast<uint64_t>(*s++ - '0');
    *found = true;
  }
  return v;
}

const char* MessageOf(const EventAttributes* a) {
  if (a == nullptr || a->size < sizeof(EventAttributes) - sizeof(void*)) return nullptr;
  if (a->message_type == kMessageAscii || a->message_type == kMessageRegistered) {
    return static_cast<const char*>(a->message);
  }
  return nullptr;
}

// Opens a step or a stage for `name`; returns its handle.
uint64_t Open(const char* name) {
  ThreadState& t = t_state;
  if (name == nullptr || t.guard || !Recording()) return 0;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  if (g_re_ok && regexec(&g_step_re, name, 0, nullptr, 0) == 0) {
    g_steps_seen.store(true, std::memory_order_relaxed);
    bool found;
    uint64_t n = ParseNumber(name, &found);
    if (!found) n = g_auto_step.fetch_add(1, std::memory_order_relaxed);
    UserStepBoundary(t, n, true);  // a program marker: it ends time windows
    return StepHandle(n);
  }
  uint32_t id = InternStage(name);
  StageBoundaryById(t, id, true);
  return static_cast<uint64_t>(id) << 1;
}

void Close(uint64_t h) {
  ThreadState& t = t_state;
  if (h == 0 || t.guard) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  if (h & 1) {
    UserStepBoundary(t, h >> 1, false);
  } else {
    StageBoundaryById(t, static_cast<uint32_t>(h >> 1), false);
  }
}

int Push(const char* name) {
  NvtxThread& n = t_nvtx;
  uint64_t h = Open(name);
  if (n.depth < kDepth) n.open[n.depth] = h;
  return n.depth++;
}

int Pop() {
  NvtxThread& n = t_nvtx;
  if (n.depth <= 0) return -1;
  --n.depth;
  if (n.depth < kDepth) Close(n.open[n.depth]);
  return n.depth;
}

// ---- callbacks ----
int RangePushA(const char* m) { return Push(m); }
int RangePushEx(const EventAttributes* a) { return Push(MessageOf(a)); }
int RangePop() { return Pop(); }
uint64_t RangeStartA(const char* m) { return Open(m); }
uint64_t RangeStartEx(const EventAttributes* a) { return Open(MessageOf(a)); }
void RangeEnd(uint64_t id) { Close(id); }
int DomainRangePushEx(void*, const EventAttributes* a) { return Push(MessageOf(a)); }
int DomainRangePop(void*) { return Pop(); }
uint64_t DomainRangeStartEx(void*, const EventAttributes* a) { return Open(MessageOf(a)); }
void DomainRangeEnd(void*, uint64_t id) { Close(id); }
void* DomainCreateA(const char*) { return &g_domain_dummy; }
const void* DomainRegisterStringA(void*, const char* s) {
  if (s == nullptr) return nullptr;
  size_t n = StrLen(s) + 1;
  SpinLockHolder h(&g_str_lock);
  if (g_str_arena == nullptr) g_str_arena = static_cast<char*>(RawMmap(kStrArena));
  if (g_str_arena == nullptr || g_str_used + n > kStrArena) return nullptr;
  char* p = g_str_arena + g_str_used;
  for (size_t i = 0; i < n; ++i) p[i] = s[i];
  g_str_used += n;
  return p;
}

template <typename F>
void Set(NvtxFunctionTable table, unsigned size, unsigned cbid, F fn) {
  if (table != nullptr && cbid < size && table[cbid] != nullptr) {
    *table[cbid] = reinterpret_cast<NvtxFunctionPointer>(fn);
  }
}

}  // namespace

void InitNvtx() {
  if (g_features.step_range[0] != '\0') {
    g_re_ok = regcomp(&g_step_re, g_features.step_range, REG_EXTENDED | REG_ICASE | REG_NOSUB) == 0;
  }
}

}  // namespace memstep::preload

using namespace memstep::preload;  // NOLINT: the NVTX entry point

MEMSTEP_EXPORT int memstep_nvtx_steps_seen(void) {
  return g_steps_seen.load(std::memory_order_relaxed) ? 1 : 0;
}

MEMSTEP_EXPORT int InitializeInjectionNvtx2(GetExportTableFn get_table) {
  if (!g_features.nvtx || get_table == nullptr) return 0;
  auto* cb = static_cast<const ExportTableCallbacks*>(get_table(kEtidCallbacks));
  if (cb == nullptr || cb->GetModuleFunctionTable == nullptr) return 0;
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned ncore = 0, ncore2 = 0;
  if (cb->GetModuleFunctionTable(kModuleCore, &core, &ncore) == 0) return 0;
  Set(core, ncore, kRangePushA, RangePushA);
  Set(core, ncore, kRangePushEx, RangePushEx);
  Set(core, ncore, kRangePop, RangePop);
  Set(core, ncore, kRangeStartA, RangeStartA);
  Set(core, ncore, kRangeStartEx, RangeStartEx);
  Set(core, ncore, kRangeEnd, RangeEnd);
  if (cb->GetModuleFunctionTable(kModuleCore2, &core2, &ncore2) != 0) {
    Set(core2, ncore2, kDomainRangePushEx, DomainRangePushEx);
    Set(core2, ncore2, kDomainRangePop, DomainRangePop);
    Set(core2, ncore2, kDomainRangeStartEx, DomainRangeStartEx);
    Set(core2, ncore2, kDomainRangeEnd, DomainRangeEnd);
    Set(core2, ncore2, kDomainCreateA, DomainCreateA);
    Set(core2, ncore2, kDomainRegisterStringA, DomainRegisterStringA);
  }
  return 1;
}
