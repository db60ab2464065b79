// Python frames in sampled stacks (CPython 3.11).
//
// A native stack of a Python program ends in the interpreter loop
// (_PyEval_EvalFrameDefault, many times over), which tells the user nothing.
// When the process runs CPython 3.11, the sampled stack is cut at the first
// interpreter-loop frame and the calling thread's Python frames are put there
// instead, innermost first: c10::alloc_cpu <- at::empty <- ... <-
// linear.py:114 forward <- train.py:40 train_step <- train.py:80 <module>.
//
// How, without the GIL and without allocating:
//  - the thread's PyThreadState comes from PyGILState_GetThisThreadState()
//    (a thread-specific key: no lock, no allocation); a thread without one
//    (a C++ worker) keeps its native stack;
//  - frames are read from the thread's own frame chain (tstate->cframe->
//    current_frame, then ->previous). Only the thread itself changes that
//    chain, and it is inside malloc now, so the chain is consistent (a frame
//    being pushed is linked only after its memory exists);
//  - nothing is read once the interpreter is finalizing (_Py_IsFinalizing):
//    daemon threads can outlive their freed thread states then;
//  - the line comes from PyCode_Addr2Line (reads the line table only);
//  - names are read from compact unicode objects in place (ASCII data, or an
//    already computed UTF-8 form), never converted; anything else is "?".
// Each (code object, line) becomes one STRING "qualname\0filename\0line",
// cached, and a synthetic ip (format.h kPyFrameTag | string id) in the stack.
//
// The structure offsets are CPython 3.11's for x86-64;
// tests/python/pyframes_layout_test.c checks them against the installed
// headers. Any other Python version gets native stacks only (Py_Version is
// checked before any structure is read).

#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include <atomic>

#include "preload/python/pyframes_layout.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "src/format/format.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace {

using namespace py311;  // NOLINT: the layout constants

constexpr int kMaxPyFrames = 48;  // walked per sample
constexpr uint32_t kNativeBeforePython = 40;  // native frames kept before Python ones

using GetTstateFn = void* (*)();
using Addr2LineFn = int (*)(void*, int);
using IsFinalizingFn = int (*)();

std::atomic<int> g_py_state{0};  // 0 unknown, 1 ready, 2 absent (recheck after dlopen)
std::atomic<bool> g_recheck{false};
GetTstateFn g_get_tstate = nullptr;
IsFinalizingFn g_is_finalizing = nullptr;
Addr2LineFn g_addr2line = nullptr;
uintptr_t g_eval_lo = 0, g_eval_hi = 0;  // _PyEval_EvalFrameDefault

template <typename T>
T Read(const void* base, size_t off) {
  T v;
  memcpy(&v, static_cast<const char*>(base) + off, sizeof(v));
  return v;
}

// (code, line) -> string id, lock-free: a writer claims an empty slot
// (kBusy), stores the id, then publishes the key (release).
constexpr uint32_t kCacheSize = 1u << 13;
constexpr uint64_t kBusy = UINT64_MAX;  // never a key (CacheKey < 2^62)
struct CacheSlot {
  std::atomic<uint64_t> key;
  std::atomic<uint32_t> id;
};
CacheSlot* g_cache = nullptr;

uint64_t CacheKey(uintptr_t code, int line) {
  uint64_t l = line < 0 ? 0 : (line > 0x7FFFF ? 0x7FFFF : static_cast<uint64_t>(line));
  return ((static_cast<uint64_t>(code) >> 3) | (l << 45)) + 1;  // never 0
}

// Appends the UTF-8 text of a str object, or "?" (no conversion is made).
size_t AppendStr(const void* obj, char* out, size_t cap) {
  const char* data = nullptr;
  int64_t len = 0;
  if (obj != nullptr) {
    const uint32_t state = Read<uint32_t>(obj, kAsciiState);
    const bool compact = (state >> kStateCompactBit) & 1, ascii = (state >> kStateAsciiBit) & 1;
    if (compact && ascii) {
      data = static_cast<const char*>(obj) + kAsciiSize;
      len = Read<int64_t>(obj, kAsciiLength);
    } else if (compact) {
      data = Read<const char*>(obj, kCompactUtf8);
      len = Read<int64_t>(obj, kCompactUtf8Length);
    }
  }
  if (data == nullptr || len < 0) data = "?", len = 1;
  size_t n = static_cast<size_t>(len) < cap ? static_cast<size_t>(len) : cap;
  memcpy(out, data, n);
  return n;
}

uint32_t FrameString(void* code, int line) {
  char buf[512];
  size_t n = AppendStr(Read<void*>(code, kCodeQualname), buf, 200);
  buf[n++] = '\0';
  n += AppendStr(Read<void*>(code, kCodeFilename), buf + n, 280);
  buf[n++] = '\0';
  char digits[16];
  int k = 0;
  unsigned v = line > 0 ? static_cast<unsigned>(line) : 0;
  do {
    digits[k++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && k < 15);
  while (k > 0) buf[n++] = digits[--k];
  return g_dict.InternString(buf, n);
}

uint32_t FrameId(void* code, int line) {
  const uint64_t key = CacheKey(reinterpret_cast<uintptr_t>(code), line);
  uint32_t h = static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> 51) & (kCacheSize - 1);
  for (uint32_t i = 0; i < 8; ++i) {
    CacheSlot& s = g_cache[(h + i) & (kCacheSize - 1)];
    uint64_t k = s.key.load(std::memory_order_acquire);
    if (k == key) return s.id.load(std::memory_order_relaxed);
    if (k == 0) {
      uint64_t expected = 0;
      if (!s.key.compare_exchange_strong(expected, kBusy, std::memory_order_acquire)) {
        if (expected == key) return s.id.load(std::memory_order_relaxed);
        continue;  // another writer took the slot
      }
      const uint32_t id = FrameString(code, line);
      s.id.store(id, std::memory_order_relaxed);
      s.key.store(key, std::memory_order_release);
      return id;
    }
  }
  return FrameString(code, line);  // a crowded neighbourhood: no caching
}

bool InEval(uint64_t ip) { return ip - g_eval_lo < g_eval_hi - g_eval_lo; }

}  // namespace

// Writer thread (never on an allocation path): finds CPython 3.11 in the
// process, once, and again after each dlopen while absent.
void PyFramesPoll() {
  int st = g_py_state.load(std::memory_order_acquire);
  if (st == 1 || (st == 2 && !g_recheck.exchange(false, std::memory_order_relaxed))) return;
  const char* off = getenv("MEMSTEP_PYTHON_FRAMES");
  if (off != nullptr && off[0] == '0') {
    g_py_state.store(2, std::memory_order_release);
    return;
  }
  const auto* version = static_cast<const unsigned long*>(dlsym(RTLD_DEFAULT, "Py_Version"));
  void* get = dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
  void* a2l = dlsym(RTLD_DEFAULT, "PyCode_Addr2Line");
  void* eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
  void* fin = dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
  Dl_info info;
  void* sym_ptr = nullptr;
  if (version == nullptr || (*version & 0xFFFF0000) != kPy311 || get == nullptr ||
      a2l == nullptr || eval == nullptr || fin == nullptr ||
      dladdr1(eval, &info, &sym_ptr, RTLD_DL_SYMENT) == 0 || sym_ptr == nullptr ||
      static_cast<const ElfW(Sym)*>(sym_ptr)->st_size == 0) {
    g_py_state.store(2, std::memory_order_release);
    return;
  }
  if (g_cache == nullptr) {
    g_cache = static_cast<CacheSlot*>(RawMmap(sizeof(CacheSlot) * kCacheSize));
    if (g_cache == nullptr) {
      g_py_state.store(2, std::memory_order_release);
      return;
    }
  }
  g_get_tstate = reinterpret_cast<GetTstateFn>(get);
  g_addr2line = reinterpret_cast<Addr2LineFn>(a2l);
  g_is_finalizing = reinterpret_cast<IsFinalizingFn>(fin);
  g_eval_lo = reinterpret_cast<uintptr_t>(eval);
  g_eval_hi = g_eval_lo + static_cast<const ElfW(Sym)*>(sym_ptr)->st_size;
  g_py_state.store(1, std::memory_order_release);
}

void PyFramesRecheck() { g_recheck.store(true, std::memory_order_relaxed); }

bool PyFramesActive() { return g_py_state.load(std::memory_order_acquire) == 1; }

uint32_t PyFramesMerge(const uint64_t* native, uint32_t n, uint64_t* out, uint32_t cap) {
  // Cut at the first interpreter-loop frame.
  uint32_t cut = n;
  for (uint32_t i = 0; i < n; ++i) {
    if (InEval(native[i])) {
      cut = i;
      break;
    }
  }
  // During finalization other threads' states are freed while those threads
  // may still run (daemon threads): no Python frames from then on.
  void* tstate = cut < n && g_is_finalizing() == 0 ? g_get_tstate() : nullptr;
  void* frame = nullptr;
  if (tstate != nullptr) {
    void* cframe = Read<void*>(tstate, kTstateCframe);
    if (cframe != nullptr) frame = Read<void*>(cframe, kCframeCurrentFrame);
  }
  if (frame == nullptr) {  // no Python on this thread: the native stack as it is
    uint32_t m = n < cap ? n : cap;
    memcpy(out, native, m * sizeof(uint64_t));
    return m;
  }
  uint32_t m = 0;
  const uint32_t keep = cut < kNativeBeforePython ? cut : kNativeBeforePython;
  for (; m < keep && m < cap; ++m) out[m] = native[m];
  for (int depth = 0; frame != nullptr && depth < kMaxPyFrames && m < cap; ++depth) {
    void* code = Read<void*>(frame, kFrameCode);
    const char* prev_instr = Read<const char*>(frame, kFramePrevInstr);
    const char* first = static_cast<const char*>(code) + kCodeAdaptive;
    // An incomplete frame (being set up) has no line yet: skipped, as
    // CPython's own traceback code does.
    const bool incomplete =
        code == nullptr ||
        (static_cast<size_t>(Read<char>(frame, kFrameOwner)) != kOwnedByGenerator &&
         prev_instr < first + 2 * static_cast<int64_t>(Read<int32_t>(code, kCodeFirstTraceable)));
    if (!incomplete) {
      const int line = g_addr2line(code, static_cast<int>(prev_instr - first));
      out[m++] = fmt::kPyFrameTag | FrameId(code, line);
    }
    frame = Read<void*>(frame, kFramePrevious);
  }
  return m;
}

}  // namespace memstep::preload
