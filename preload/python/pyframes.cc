// Python frames in sampled stacks (CPython 3.10 to 3.13).
//
// A native stack of a Python program ends in the interpreter loop
// (_PyEval_EvalFrameDefault, many times over), which tells the user nothing.
// When the process runs a supported CPython, the sampled stack is cut at the
// first interpreter-loop frame and the calling thread's Python frames are put
// there instead, innermost first: c10::alloc_cpu <- at::empty <- ... <-
// linear.py:114 forward <- train.py:40 train_step <- train.py:80 <module>.
//
// How, without the GIL and without allocating:
//  - the version is read once per process, at run time (Py_Version, or
//    Py_GetVersion() on 3.10, which has no Py_Version), and picks the layout
//    (pyframes_layout.h): 3.10, 3.11 and 3.12 from tables checked against
//    each version's headers, 3.13 from the offsets the interpreter publishes
//    in _PyRuntime.debug_offsets. PyCode_Type.tp_basicsize must then be the
//    layout's. Anything else (3.9, 3.14, a free-threaded or debug build, a
//    failed check) says so once (stderr and a NOTICE) and keeps native
//    stacks;
//  - the thread's PyThreadState comes from PyGILState_GetThisThreadState()
//    (a thread-specific key: no lock, no allocation); a thread without one
//    (a C++ worker) keeps its native stack;
//  - frames are read from the thread's own frame chain (3.10: tstate->frame,
//    f_back; 3.11, 3.12: tstate->cframe->current_frame, previous; 3.13:
//    tstate->current_frame, previous). Only the thread itself changes that
//    chain, and it is inside malloc now, so the chain is consistent (a frame
//    being pushed is linked only after its fields are set);
//  - nothing is read once the interpreter is finalizing (_Py_IsFinalizing,
//    3.13: Py_IsFinalizing): daemon threads can outlive their freed thread
//    states then;
//  - a frame whose code slot is not a code object (3.13's C-stack entry
//    frame holds None), a frame owned by the C stack (3.12, 3.13) and an
//    incomplete frame (3.11+: set up, its first traceable instruction not yet
//    reached) are skipped, as CPython's own traceback code does;
//  - the line is decoded from the code object's line table in place
//    (pylinetable.h, each version's format), at the instruction the frame is
//    at (3.10: f_lasti; 3.11, 3.12: prev_instr; 3.13: instr_ptr);
//  - names are read from compact unicode objects in place (ASCII data, or an
//    already computed UTF-8 form), never converted; anything else is "?".
//    3.10 has no co_qualname: its function is co_name.
// Each (code object, line) becomes one STRING "qualname\0filename\0line",
// cached, and a synthetic ip (format.h kPyFrameTag | string id) in the stack.

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "preload/python/pyframes_layout.h"
#include "preload/python/pylinetable.h"
#include "preload/steps/config.h"
#include "src/format/format.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace {

using pylayout::kStateAsciiBit;
using pylayout::kStateCompactBit;
using pylayout::MemstepPyLayout;

constexpr int kMaxPyFrames = 48;              // walked per sample
constexpr uint32_t kNativeBeforePython = 40;  // native frames kept before Python ones

using GetTstateFn = void* (*)();
using IsFinalizingFn = int (*)();
using GetVersionFn = const char* (*)();

// 0 unknown, 1 ready, 2 absent (recheck after dlopen), 3 unsupported (said
// once, never rechecked).
std::atomic<int> g_py_state{0};
std::atomic<bool> g_recheck{false};
// Written by PyFramesPoll before g_py_state becomes 1 (release), read-only after.
GetTstateFn g_get_tstate = nullptr;
IsFinalizingFn g_is_finalizing = nullptr;
const void* g_code_type = nullptr;       // &PyCode_Type
uintptr_t g_eval_lo = 0, g_eval_hi = 0;  // _PyEval_EvalFrameDefault
MemstepPyLayout g_layout;

template <typename T>
T Read(const void* base, size_t off) {
  T v;
  memcpy(&v, static_cast<const char*>(base) + off, sizeof(v));
  return v;
}

// (code, line) -> string id, lock-free: a writer claims an empty slot
// (kBusy), stores the check and the id, then publishes the key (release). A
// slot whose code object's check (CodeCheck) differs is another code object
// at a freed one's address: not used.
constexpr uint32_t kCacheSize = 1u << 13;
constexpr uint64_t kBusy = UINT64_MAX;  // never a key (CacheKey < 2^62)
struct CacheSlot {
  std::atomic<uint64_t> key;
  std::atomic<uint64_t> check;  // CodeCheck of the code object the slot was filled from
  std::atomic<uint32_t> id;
};
CacheSlot* g_cache = nullptr;
// (code, byte offset) -> string id, the same way: a sample at a position seen
// before decodes no line table (decoding walks it from its start, about
// 2,300 instructions a frame of a small function, more of a long one).
CacheSlot* g_pos_cache = nullptr;

uint64_t PosKey(uintptr_t code, int64_t offset) {
  const uint64_t o = offset < -1 ? 0 : (offset > 0x3FFFF ? 0x3FFFF : offset + 1);
  return ((static_cast<uint64_t>(code) >> 3) | (o << 44)) + 1;  // never 0, never kBusy
}

uint64_t CacheKey(uintptr_t code, int line) {
  uint64_t l = line < 0 ? 0 : (line > 0x7FFFF ? 0x7FFFF : static_cast<uint64_t>(line));
  return ((static_cast<uint64_t>(code) >> 3) | (l << 45)) + 1;  // never 0
}

// Appends the UTF-8 text of a str object, or "?" (no conversion is made).
size_t AppendStr(const void* obj, char* out, size_t cap) {
  const char* data = nullptr;
  int64_t len = 0;
  if (obj != nullptr) {
    const MemstepPyLayout& l = g_layout;
    const uint32_t state = Read<uint32_t>(obj, l.str_state);
    const bool compact = (state >> kStateCompactBit) & 1, ascii = (state >> kStateAsciiBit) & 1;
    if (compact && ascii) {
      data = static_cast<const char*>(obj) + l.str_ascii_data;
      len = Read<int64_t>(obj, l.str_length);
    } else if (compact) {
      data = Read<const char*>(obj, l.str_utf8);
      len = Read<int64_t>(obj, l.str_utf8_length);
    }
  }
  if (data == nullptr || len < 0) data = "?", len = 1;
  size_t n = static_cast<size_t>(len) < cap ? static_cast<size_t>(len) : cap;
  memcpy(out, data, n);
  return n;
}

uint32_t FrameString(void* code, int line) {
  char buf[512];
  size_t n = AppendStr(Read<void*>(code, g_layout.code_name), buf, 200);
  buf[n++] = '\0';
  n += AppendStr(Read<void*>(code, g_layout.code_filename), buf + n, 280);
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

// What tells one code object from another that took its address after it was
// freed (exec, compile, torch.compile's generated code): its name and
// filename text (up to 64 bytes each), its first line and its line table.
// Without it the cache named such a function as the dead one
// (python_frames' test_functions_at_reused_addresses).
uint64_t CodeCheck(const void* code) {
  char buf[136];
  size_t n = AppendStr(Read<void*>(code, g_layout.code_name), buf, 64);
  n += AppendStr(Read<void*>(code, g_layout.code_filename), buf + n, 64);
  memset(buf + n, 0, 8);  // the last word's tail
  uint64_t h = Read<uintptr_t>(code, g_layout.code_linetable) * 31 +
               static_cast<uint32_t>(Read<int32_t>(code, g_layout.code_firstlineno)) + n;
  for (size_t i = 0; i < n; i += 8) {  // by words: it runs for every frame of every sample
    uint64_t w;
    memcpy(&w, buf + i, 8);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  return h;
}

// The id cached in `cache` under `key` for the code object whose check is
// `check`, or make(), cached when a slot is free. A slot whose check differs
// holds another code object that took a freed one's address: not used.
template <typename Make>
uint32_t Cached(CacheSlot* cache, uint64_t key, uint64_t check, Make make) {
  uint32_t h = static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> 51) & (kCacheSize - 1);
  for (uint32_t i = 0; i < 8; ++i) {
    CacheSlot& s = cache[(h + i) & (kCacheSize - 1)];
    uint64_t k = s.key.load(std::memory_order_acquire);
    if (k == 0) {
      uint64_t expected = 0;
      if (s.key.compare_exchange_strong(expected, kBusy, std::memory_order_acquire)) {
        const uint32_t id = make();
        s.check.store(check, std::memory_order_relaxed);
        s.id.store(id, std::memory_order_relaxed);
        s.key.store(key, std::memory_order_release);
        return id;
      }
      k = expected;  // another writer took the slot
    }
    if (k == key) {
      if (s.check.load(std::memory_order_relaxed) != check) break;  // another code object
      return s.id.load(std::memory_order_relaxed);
    }
  }
  return make();  // a crowded neighbourhood or a reused address: no caching
}

uint32_t FrameId(void* code, int line, uint64_t check) {
  return Cached(g_cache, CacheKey(reinterpret_cast<uintptr_t>(code), line), check,
                [&] { return FrameString(code, line); });
}

bool InEval(uint64_t ip) { return ip - g_eval_lo < g_eval_hi - g_eval_lo; }

// The line of `code` at byte offset `offset` of its instructions, from its
// line table read in place (-1: none).
int CodeLine(const void* code, int64_t offset) {
  const MemstepPyLayout& l = g_layout;
  const void* table = Read<const void*>(code, l.code_linetable);
  if (table == nullptr) return -1;
  const int64_t len = Read<int64_t>(table, l.bytes_size);
  if (len < 0 || len > (int64_t{1} << 30)) return -1;
  const auto* bytes = static_cast<const uint8_t*>(table) + l.bytes_data;
  const int first = Read<int32_t>(code, l.code_firstlineno);
  return l.lines == pylayout::kLines310
             ? pyline::Line310(bytes, static_cast<size_t>(len), first, offset)
             : pyline::Line311(bytes, static_cast<size_t>(len), first, offset);
}

// The frame string id of `code` at byte offset `offset`: from the position
// cache, or the line table decoded once and the (function, file, line)
// string interned.
uint32_t PositionId(void* code, int64_t offset) {
  const uint64_t check = CodeCheck(code);
  return Cached(g_pos_cache, PosKey(reinterpret_cast<uintptr_t>(code), offset), check,
                [&] { return FrameId(code, CodeLine(code, offset), check); });
}

void* CurrentFrame(void* tstate) {
  const MemstepPyLayout& l = g_layout;
  if (l.chain != pylayout::kChainCframe) return Read<void*>(tstate, l.tstate_frame);
  void* cframe = Read<void*>(tstate, l.tstate_frame);
  return cframe != nullptr ? Read<void*>(cframe, l.cframe_current) : nullptr;
}

// Whether frame `frame` (code object `code`) is shown, and at which byte
// offset of the code it is.
bool FrameOffset(const void* frame, const void* code, int64_t* offset) {
  const MemstepPyLayout& l = g_layout;
  if (code == nullptr || Read<const void*>(code, l.ob_type) != g_code_type) return false;
  if (l.chain == pylayout::kChainFrameObject) {
    const int32_t lasti = Read<int32_t>(frame, l.frame_instr);  // -1 before the first
    *offset = lasti < 0 ? -1 : int64_t{lasti} * 2;
    return true;
  }
  const uint32_t owner = static_cast<uint8_t>(Read<char>(frame, l.frame_owner));
  if (l.owned_by_cstack != 0 && owner == l.owned_by_cstack) return false;
  const char* instr = Read<const char*>(frame, l.frame_instr);
  const char* first = static_cast<const char*>(code) + l.code_adaptive;
  if (owner != l.owned_by_generator && l.code_firsttraceable != 0 &&
      instr < first + 2 * int64_t{Read<int32_t>(code, l.code_firsttraceable)}) {
    return false;  // incomplete: no line yet
  }
  *offset = instr - first;
  return true;
}

// Says once, on stderr and in the trace, why Python frames are not read.
void Unsupported(const char* why) {
  g_py_state.store(3, std::memory_order_release);
  char line[320];
  size_t n = 0;
  auto put = [&](const char* s) {
    while (*s != '\0' && n + 2 < sizeof(line)) line[n++] = *s++;
  };
  put("Python frames not read: ");
  put(why);
  put("; sampled stacks keep their native frames (CPython 3.10 to 3.13 are supported)");
  line[n] = '\0';
  ThreadState& t = t_state;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  SayNotice(t, line, true);
}

// "3.10.13 (main, ...)" -> 0x030A0000; 0 when not a version.
uint32_t ParseVersion(const char* s) {
  uint32_t major = 0, minor = 0;
  int i = 0;
  if (s[i] < '0' || s[i] > '9') return 0;
  while (s[i] >= '0' && s[i] <= '9') major = major * 10 + static_cast<uint32_t>(s[i++] - '0');
  if (s[i++] != '.' || s[i] < '0' || s[i] > '9') return 0;
  while (s[i] >= '0' && s[i] <= '9') minor = minor * 10 + static_cast<uint32_t>(s[i++] - '0');
  return major > 255 || minor > 255 ? 0 : (major << 24) | (minor << 16);
}

// Picks the layout of CPython `version` (major.minor): nullptr, or why not.
const char* PickLayout(uint32_t version, MemstepPyLayout* out) {
  static char why[96];
  switch (version) {
    case pylayout::kLayout310.version:
      *out = pylayout::kLayout310;
      return nullptr;
    case pylayout::kLayout311.version:
      *out = pylayout::kLayout311;
      return nullptr;
    case pylayout::kLayout312.version:
      *out = pylayout::kLayout312;
      return nullptr;
    case pylayout::kLayout313.version: {
      const auto* runtime = static_cast<const uint8_t*>(OwnDlsym(RTLD_DEFAULT, "_PyRuntime"));
      if (runtime == nullptr) return "CPython 3.13 without a _PyRuntime symbol";
      const char* bad = pylayout::Layout313FromDebugOffsets(runtime, pylayout::kDbgSize313, out);
      if (bad == nullptr) return nullptr;
      size_t n = 0;
      for (const char* p = "CPython 3.13: "; *p != '\0';) why[n++] = *p++;
      for (const char* p = bad; *p != '\0' && n + 1 < sizeof(why);) why[n++] = *p++;
      why[n] = '\0';
      return why;
    }
    default: {
      size_t n = 0;
      for (const char* p = "CPython "; *p != '\0';) why[n++] = *p++;
      const uint32_t parts[2] = {version >> 24, (version >> 16) & 0xFF};
      for (int k = 0; k < 2; ++k) {
        if (k == 1) why[n++] = '.';
        char d[4];
        int m = 0;
        uint32_t v = parts[k];
        do {
          d[m++] = static_cast<char>('0' + v % 10);
          v /= 10;
        } while (v != 0);
        while (m > 0) why[n++] = d[--m];
      }
      for (const char* p = " is not supported"; *p != '\0';) why[n++] = *p++;
      why[n] = '\0';
      return why;
    }
  }
}

}  // namespace

// Writer thread (never on an allocation path), and once at start: finds
// CPython in the process, once, and again after each dlopen while absent.
void PyFramesPoll() {
  int st = g_py_state.load(std::memory_order_acquire);
  if (st == 1 || st == 3 || (st == 2 && !g_recheck.exchange(false, std::memory_order_relaxed))) {
    return;
  }
  const char* off = getenv("MEMSTEP_PYTHON_FRAMES");
  if (off != nullptr && off[0] == '0') {
    g_py_state.store(3, std::memory_order_release);
    return;
  }
  const auto* py_version = static_cast<const unsigned long*>(OwnDlsym(RTLD_DEFAULT, "Py_Version"));
  auto get_version = reinterpret_cast<GetVersionFn>(OwnDlsym(RTLD_DEFAULT, "Py_GetVersion"));
  if (py_version == nullptr && get_version == nullptr) {
    g_py_state.store(2, std::memory_order_release);  // not (yet) a Python process
    return;
  }
  // Py_Version exists from 3.11 on; 3.10 says its version in Py_GetVersion().
  const uint32_t version = py_version != nullptr ? static_cast<uint32_t>(*py_version & 0xFFFF0000)
                                                 : ParseVersion(get_version());
  void* get = OwnDlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
  void* eval = OwnDlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
  void* fin = OwnDlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
  if (fin == nullptr) fin = OwnDlsym(RTLD_DEFAULT, "Py_IsFinalizing");  // 3.13
  const void* code_type = OwnDlsym(RTLD_DEFAULT, "PyCode_Type");
  Dl_info info;
  void* sym_ptr = nullptr;
  if (get == nullptr || eval == nullptr || fin == nullptr || code_type == nullptr ||
      dladdr1(eval, &info, &sym_ptr, RTLD_DL_SYMENT) == 0 || sym_ptr == nullptr ||
      static_cast<const ElfW(Sym)*>(sym_ptr)->st_size == 0) {
    Unsupported(
        "this Python lacks a symbol memstep needs (PyGILState_GetThisThreadState, "
        "_PyEval_EvalFrameDefault with its size, _Py_IsFinalizing, PyCode_Type)");
    return;
  }
  MemstepPyLayout layout;
  if (const char* why = PickLayout(version, &layout); why != nullptr) {
    Unsupported(why);
    return;
  }
  // The code object layout is the expected one (a debug build's is not).
  if (Read<int64_t>(code_type, layout.type_basicsize) != int64_t{layout.code_basicsize}) {
    Unsupported("its code objects are not laid out as memstep expects (a debug build?)");
    return;
  }
  if (g_cache == nullptr) {
    g_cache = static_cast<CacheSlot*>(RawMmap(2 * sizeof(CacheSlot) * kCacheSize));
    g_pos_cache = g_cache != nullptr ? g_cache + kCacheSize : nullptr;
    if (g_cache == nullptr) {
      Unsupported("no memory for the frame cache");
      return;
    }
  }
  g_layout = layout;
  g_get_tstate = reinterpret_cast<GetTstateFn>(get);
  g_is_finalizing = reinterpret_cast<IsFinalizingFn>(fin);
  g_code_type = code_type;
  g_eval_lo = reinterpret_cast<uintptr_t>(eval);
  g_eval_hi = g_eval_lo + static_cast<const ElfW(Sym)*>(sym_ptr)->st_size;
  g_py_state.store(1, std::memory_order_release);
}

void PyFramesRecheck() { g_recheck.store(true, std::memory_order_relaxed); }

bool PyFramesActive() { return g_py_state.load(std::memory_order_acquire) == 1; }

bool PyFramesInEval(uintptr_t ip) { return PyFramesActive() && InEval(ip); }

bool PyFramesOnThread() {
  return PyFramesActive() && g_is_finalizing() == 0 && g_get_tstate() != nullptr;
}

uint64_t PyFramesKey(int frames) {
  if (!PyFramesActive() || g_is_finalizing() != 0) return 0;
  void* tstate = g_get_tstate();
  void* frame = tstate != nullptr ? CurrentFrame(tstate) : nullptr;
  // The innermost frames a stack would show (PyFramesMerge's rules), within
  // a few more: an allocation's own line (and its callers'), cheaply.
  uint64_t key = 0;
  int got = 0;
  for (int depth = 0; frame != nullptr && got < frames && depth < frames + 3; ++depth) {
    void* code = Read<void*>(frame, g_layout.frame_code);
    int64_t offset;
    if (FrameOffset(frame, code, &offset)) {
      uint64_t h = (reinterpret_cast<uintptr_t>(code) ^ (static_cast<uint64_t>(offset) << 40)) *
                   0x9E3779B97F4A7C15ull;
      h ^= h >> 31;
      key = got == 0 ? h : (key * 0x100000001B3ull) ^ h;
      ++got;
    }
    frame = Read<void*>(frame, g_layout.frame_previous);
  }
  return key;
}

uint32_t PyFramesContext() {
  if (!PyFramesActive() || g_is_finalizing() != 0) return 0;
  void* tstate = g_get_tstate();
  void* frame = tstate != nullptr ? CurrentFrame(tstate) : nullptr;
  // The innermost shown frame's line: its frame string (function, file,
  // line), as a stack would show it, from the position cache (a position
  // seen before decodes no line table). By line, not by instruction: a line
  // that keeps a tuple, its items and a dict is one context, whose screens
  // add up, not five that each stay under the targeting bar.
  for (int depth = 0; frame != nullptr && depth < 4; ++depth) {
    void* code = Read<void*>(frame, g_layout.frame_code);
    int64_t offset;
    if (FrameOffset(frame, code, &offset)) {
      const uint32_t id = PositionId(code, offset);
      return id == 0 ? 0 : kScreenKeyBit | (id & (kScreenKeyBit - 1));
    }
    frame = Read<void*>(frame, g_layout.frame_previous);
  }
  return 0;
}

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
  void* frame = tstate != nullptr ? CurrentFrame(tstate) : nullptr;
  if (frame == nullptr) {  // no Python on this thread: the native stack as it is
    uint32_t m = n < cap ? n : cap;
    memcpy(out, native, m * sizeof(uint64_t));
    return m;
  }
  uint32_t m = 0;
  const uint32_t keep = cut < kNativeBeforePython ? cut : kNativeBeforePython;
  for (; m < keep && m < cap; ++m) out[m] = native[m];
  for (int depth = 0; frame != nullptr && depth < kMaxPyFrames && m < cap; ++depth) {
    void* code = Read<void*>(frame, g_layout.frame_code);
    int64_t offset;
    if (FrameOffset(frame, code, &offset)) out[m++] = fmt::kPyFrameTag | PositionId(code, offset);
    frame = Read<void*>(frame, g_layout.frame_previous);
  }
  return m;
}

}  // namespace memstep::preload
