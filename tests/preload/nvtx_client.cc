// An NVTX-instrumented test program: 4 steps ("train_step N" ranges), each
// with forward/backward push-pop ranges, an "optimizer" start/end range and a
// "data" range in a domain with a registered string. Built against the NVTX v3
// header when the CUDA toolkit provides it (MEMSTEP_HAVE_NVTX3), otherwise
// against a minimal client of our own that does what nvtx3 does: on first use
// dlopen(NVTX_INJECTION64_PATH), call its InitializeInjectionNvtx2 with an
// export-table getter, and call whatever the tool put in the tables.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if MEMSTEP_HAVE_NVTX3
#include <nvtx3/nvToolsExt.h>
#else
#include <dlfcn.h>

namespace {

using Fn = void (*)();
constexpr int kCoreSize = 16, kCore2Size = 16;
Fn g_core[kCoreSize];  // what the tool installed (null = no-op)
Fn g_core2[kCore2Size];
Fn* g_core_slots[kCoreSize];
Fn* g_core2_slots[kCore2Size];
bool g_inited = false;

struct Callbacks {
  size_t struct_size;
  int (*get_module)(int module, Fn*** out, unsigned* size);
};

int GetModule(int module, Fn*** out, unsigned* size) {
  if (module == 1) {
    *out = g_core_slots;
    *size = kCoreSize;
    return 1;
  }
  if (module == 5) {
    *out = g_core2_slots;
    *size = kCore2Size;
    return 1;
  }
  return 0;
}

const Callbacks kCallbacks = {sizeof(Callbacks), GetModule};
const void* GetExportTable(uint32_t id) { return id == 1 ? &kCallbacks : nullptr; }

void Init() {
  if (g_inited) return;
  g_inited = true;
  for (int i = 0; i < kCoreSize; ++i) g_core_slots[i] = &g_core[i];
  for (int i = 0; i < kCore2Size; ++i) g_core2_slots[i] = &g_core2[i];
  const char* path = getenv("NVTX_INJECTION64_PATH");
  if (path == nullptr) return;
  void* h = dlopen(path, RTLD_LAZY);
  if (h == nullptr) return;
  auto init =
      reinterpret_cast<int (*)(const void* (*)(uint32_t))>(dlsym(h, "InitializeInjectionNvtx2"));
  if (init == nullptr || init(GetExportTable) == 0) {
    for (Fn& f : g_core) f = nullptr;
    for (Fn& f : g_core2) f = nullptr;
  }
}

struct EventAttributes {  // the layout of nvtxEventAttributes_v2
  uint16_t version, size;
  uint32_t category;
  int32_t colorType;
  uint32_t color;
  int32_t payloadType, reserved0;
  uint64_t payload;
  int32_t messageType;
  union {
    const char* ascii;
    const void* registered;
  } message;
};
using nvtxEventAttributes_t = EventAttributes;
using nvtxDomainHandle_t = void*;
using nvtxStringHandle_t = const void*;
using nvtxRangeId_t = uint64_t;
constexpr uint16_t NVTX_VERSION = 3;
constexpr uint16_t NVTX_EVENT_ATTRIB_STRUCT_SIZE = sizeof(EventAttributes);
constexpr int32_t NVTX_MESSAGE_TYPE_REGISTERED = 3;

int nvtxRangePushA(const char* m) {
  Init();
  return g_core[9] ? reinterpret_cast<int (*)(const char*)>(g_core[9])(m) : -1;
}
int nvtxRangePop() {
  Init();
  return g_core[11] ? reinterpret_cast<int (*)()>(g_core[11])() : -1;
}
nvtxRangeId_t nvtxRangeStartA(const char* m) {
  Init();
  return g_core[5] ? reinterpret_cast<nvtxRangeId_t (*)(const char*)>(g_core[5])(m) : 0;
}
void nvtxRangeEnd(nvtxRangeId_t id) {
  Init();
  if (g_core[7]) reinterpret_cast<void (*)(nvtxRangeId_t)>(g_core[7])(id);
}
nvtxDomainHandle_t nvtxDomainCreateA(const char* name) {
  Init();
  return g_core2[12] ? reinterpret_cast<void* (*)(const char*)>(g_core2[12])(name) : nullptr;
}
nvtxStringHandle_t nvtxDomainRegisterStringA(nvtxDomainHandle_t d, const char* s) {
  Init();
  using F = const void* (*)(void*, const char*);
  return g_core2[10] ? reinterpret_cast<F>(g_core2[10])(d, s) : nullptr;
}
int nvtxDomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  Init();
  using F = int (*)(void*, const EventAttributes*);
  return g_core2[4] ? reinterpret_cast<F>(g_core2[4])(d, a) : -1;
}
int nvtxDomainRangePop(nvtxDomainHandle_t d) {
  Init();
  return g_core2[5] ? reinterpret_cast<int (*)(void*)>(g_core2[5])(d) : -1;
}

}  // namespace
#endif

namespace {

void Work(size_t n) {
  for (int i = 0; i < 100; ++i) {
    void* p = malloc(n);
    memset(p, 1, n);
    free(p);
  }
}

}  // namespace

int main() {
  nvtxDomainHandle_t dom = nvtxDomainCreateA("memstep-test");
  nvtxStringHandle_t data = nvtxDomainRegisterStringA(dom, "data");
  for (int step = 0; step < 4; ++step) {
    char name[32];
    snprintf(name, sizeof(name), "train_step %d", step);
    nvtxRangePushA(name);
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof(a));
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = data;
    nvtxDomainRangePushEx(dom, &a);
    Work(1000);
    nvtxDomainRangePop(dom);
    nvtxRangePushA("forward");
    Work(4096);
    nvtxRangePop();
    nvtxRangePushA("backward");
    Work(4096);
    nvtxRangePop();
    nvtxRangeId_t opt = nvtxRangeStartA("optimizer");
    Work(100);
    nvtxRangeEnd(opt);
    nvtxRangePop();
  }
  puts("nvtx ok");
  return 0;
}
