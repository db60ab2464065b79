// Objects from CPython's free lists, before 3.13: the lists bypassed during
// leak hunts. 3.13: dicts' key tables only (see the end of this comment).
//
// CPython keeps freed floats, tuples (of up to 20 items), lists and dicts
// (and dicts' smallest key tables) on free lists and hands them out again
// without calling its allocator. A sampled block's stack is then the line
// that allocated it, not the line that created the object living in it: a
// loop that builds thousands of small tuples a step fills the lists, and a
// line that keeps a few tuples a step takes its tuples from them, so the
// churn's line is named for the keeping line's leak. 3.13 has a hook at
// object creation (pymem.cc re-stamps blocks from it); 3.10 to 3.12 have
// none. There, while a host leak hunt runs, memstep stops the lists from
// serving objects, so that every object of these types is allocated (and
// sampled) at the line that creates it:
//
//  - floats and tuples: the lists' contents are set aside (parked: still
//    allocated, so the exact counters do not move) and their counts set to
//    their maximum: CPython then frees every such object it would have kept,
//    and finds none to reuse;
//  - lists and dicts take from a stack while its count is not zero and push
//    while it is below its maximum, so no count stops both: their stacks are
//    parked too, and their types' tp_dealloc is replaced for the hunt by a
//    function that calls CPython's and then frees what it pushed (objects,
//    and key tables, as CPython frees them when it clears its lists).
//    CPython's deallocators only take the trashcan (which defers
//    deallocations nested deeper than 50) when the type's tp_dealloc is
//    themselves, so the replacement takes it in their place, as their
//    Py_TRASHCAN_BEGIN does: untrack, _PyTrash_begin, _PyTrash_end.
//
// The bypass begins at the first allocation of a step (FreeListsStep, armed
// by a sample of the step before that found the hunt running: outside that
// one step, the pymalloc hook tests a zero), when the lists still hold what
// the last step left in them: the parked contents are then what every step
// ends with anyway, and the heap's step series does not step. It ends at any
// sample (FreeListsSync): the parked contents go back on the lists (after
// whatever a full collection let in meanwhile is freed, but not while
// finalizing: nothing is freed then) and the slots back to CPython's
// functions. A full collection (gc.collect()) clears the lists and resets
// their counts; the next sample sets them again. Only the main interpreter's
// lists are touched, from threads of that interpreter (3.12 may run others,
// with their own GIL; theirs keep their lists).
//
// Where the lists live is internal (freelist_layout.h, one table per
// version); before anything is touched, FreeListsFind checks that every
// list holds what it should (objects of its type and size, as many as its
// count says, read without faulting) and that creating and destroying one
// object of each type pops and pushes where expected. A build laid out
// otherwise (a debug or trace-refs build, a patch release that moved a
// field) leaves the lists alone, and says so once.
//
// Measured on Debian's 3.11 (docs/analysis.md "Objects from free lists"):
// a line keeping tuples, dicts or floats that a churn refills the lists with
// is named LEAK in 15 runs of 15, the churn's line in none (with
// MEMSTEP_PY_RESTAMP=0: the churn's line in 9 of 9), the heap LEAK in each.
//
// Cost: while a hunt runs, creating and destroying such an object goes
// through pymalloc (and its hooks) instead of a free list: +25 % in the
// hunting steps of a loop that does nothing but make tuples and floats
// (bench_freelist.py under callgrind); otherwise pymem.cc tests g_fl_step
// (a zero) at each allocation: 2 instructions.
// MEMSTEP_PY_RESTAMP=0 turns it off (with 3.13's re-stamping).
//
// 3.13 re-stamps objects (pymem.cc), but a dict's key table is no object,
// and its free list handed a kept dict the table of a churned one (whose
// line then read LEAK): that list alone is bypassed there (g_keys_only),
// with the same timing. Its contents are parked and its count held at -1,
// which stops both its pop (numfree > 0) and its push (numfree >= 0), as
// CPython's finalization does; no slot is replaced.

#include "preload/python/freelists.h"

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "preload/python/freelist_layout.h"
#include "preload/steps/config.h"

namespace memstep::preload {

bool SafeRead(uintptr_t addr, void* out, size_t n, bool* denied);  // pymem.cc

uint64_t g_fl_step = 0;

namespace {

namespace pl = pylayout;

using Destructor = void (*)(void*);

struct Api {
  void* (*new_float)(double);                         // PyFloat_FromDouble
  void* (*new_tuple)(intptr_t);                       // PyTuple_New
  void* (*new_list)(intptr_t);                        // PyList_New
  void* (*new_dict)();                                // PyDict_New
  void (*decref)(void*);                              // Py_DecRef
  void (*object_free)(void*);                         // PyObject_Free
  void (*gc_del)(void*);                              // PyObject_GC_Del
  void (*untrack)(void*);                             // PyObject_GC_UnTrack
  void* (*tstate)();                                  // _PyThreadState_UncheckedGet
  void* (*interp_of)(void*);                          // PyThreadState_GetInterpreter
  int (*trash_begin)(void*, void*);                   // _PyTrash_begin
  void (*trash_end)(void*);                           // _PyTrash_end
  int (*finalizing)();                                // _Py_IsFinalizing
  int (*set_item_string)(void*, const char*, void*);  // PyDict_SetItemString (3.13)
  void* none;                                         // _Py_NoneStruct (3.13)
  char* float_type;
  char* tuple_type;
  char* list_type;
  char* dict_type;
};

// All below change with the GIL of the main interpreter held.
Api g_api;
char* g_is = nullptr;  // the main interpreter's state; null: not found
pl::MemstepFreeListLayout g_fl;
uint32_t g_tuple_first = 0;           // the first tuple list to bypass (3.10: 1)
Destructor g_list_dealloc = nullptr;  // CPython's
Destructor g_dict_dealloc = nullptr;
bool g_bypass = false;
bool g_busy = false;  // emptying (frees reach the hooks, which may sync)
// 3.13: only the key tables' list (its objects are re-stamped): parked, and
// its count held at -1, which stops its pop and its push.
bool g_keys_only = false;

int& IntAt(uint32_t off) { return *reinterpret_cast<int*>(g_is + off); }
void*& PtrAt(uint32_t off) { return *reinterpret_cast<void**>(g_is + off); }
void* Field(const void* op, uint32_t off) {
  void* v;
  memcpy(&v, static_cast<const char*>(op) + off, sizeof(v));
  return v;
}
Destructor& Slot(char* type) { return *reinterpret_cast<Destructor*>(type + pl::kTpDealloc); }

// Whether this thread runs in the main interpreter (with its GIL).
bool OnMain(void* ts) { return ts != nullptr && g_api.interp_of(ts) == g_is; }

// ---- emptying, as CPython's own _Py*_ClearFreeList do ----

void EmptyFloats(int count) {
  void* f = PtrAt(g_fl.float_head);
  PtrAt(g_fl.float_head) = nullptr;
  IntAt(g_fl.float_numfree) = count;
  while (f != nullptr) {
    void* next = Field(f, pl::kObType);  // the link
    g_api.object_free(f);
    f = next;
  }
}

void EmptyTuples(int count) {
  for (uint32_t i = g_tuple_first; i < pl::kTupleLists; ++i) {
    void*& head = PtrAt(g_fl.tuple_heads + 8 * i);
    void* t = head;
    head = nullptr;
    IntAt(g_fl.tuple_numfree + 4 * i) = count;
    while (t != nullptr) {
      void* next = Field(t, pl::kTupleItem0);  // the link
      g_api.gc_del(t);
      t = next;
    }
  }
}

void EmptyStack(uint32_t items, uint32_t numfree, void (*del)(void*)) {
  int& n = IntAt(numfree);
  while (n > 0) {
    void* o = reinterpret_cast<void**>(g_is + items)[--n];
    del(o);
  }
}

void EmptyLists() { EmptyStack(g_fl.list_items, g_fl.list_numfree, g_api.gc_del); }
void EmptyDicts() {
  EmptyStack(g_fl.dict_items, g_fl.dict_numfree, g_api.gc_del);
  EmptyStack(g_fl.keys_items, g_fl.keys_numfree, g_api.object_free);
}

// ---- lists' and dicts' tp_dealloc during a hunt ----

void AfterDealloc(void* ts, void (*empty)()) {
  if (g_bypass && !g_busy && OnMain(ts) && g_api.finalizing() == 0) {
    g_busy = true;
    empty();
    g_busy = false;
  }
}

void DeallocWith(void* op, Destructor cpython, Destructor self, void (*empty)()) {
  void* ts = g_api.tstate();
  if (Slot(static_cast<char*>(Field(op, pl::kObType))) != self) {
    cpython(op);  // a subclass's object: subtype_dealloc took the trashcan
    AfterDealloc(ts, empty);
    return;
  }
  // CPython's Py_TRASHCAN_BEGIN(op, list_dealloc), which list_dealloc skips
  // now that the slot holds this function: after its untrack.
  g_api.untrack(op);
  if (ts != nullptr && g_api.trash_begin(ts, op) != 0) return;  // deferred: through the slot
  cpython(op);
  AfterDealloc(ts, empty);
  if (ts != nullptr) g_api.trash_end(ts);
}

void ListDealloc(void* op);
void DictDealloc(void* op);
void ListDealloc(void* op) { DeallocWith(op, g_list_dealloc, ListDealloc, EmptyLists); }
void DictDealloc(void* op) { DeallocWith(op, g_dict_dealloc, DictDealloc, EmptyDicts); }

// ---- on and off ----

// What the lists held when the bypass began, set aside (the objects stay
// allocated, so the exact counters do not move) and put back when it ends:
// the lists are then as the program left them, and the bypass costs no
// step in the heap's live bytes either way.
struct Parked {
  void* float_head;
  int float_count;
  void* tuple_head[pl::kTupleLists];
  int tuple_count[pl::kTupleLists];
  void* lists[pl::kListMax];
  int nlists;
  void* dicts[pl::kDictMax];
  int ndicts;
  void* keys[pl::kDictMax];
  int nkeys;
};
Parked g_parked;

void ParkStack(uint32_t items, uint32_t numfree, void** out, int* n) {
  *n = IntAt(numfree);
  memcpy(out, g_is + items, sizeof(void*) * static_cast<size_t>(*n));
  IntAt(numfree) = 0;
}

void UnparkStack(uint32_t items, uint32_t numfree, void* const* in, int n, void (*del)(void*),
                 bool finalizing) {
  if (!finalizing) EmptyStack(items, numfree, del);
  if (IntAt(numfree) != 0) return;
  memcpy(g_is + items, in, sizeof(void*) * static_cast<size_t>(n));
  IntAt(numfree) = n;
}

// Whether the bypass is still whole (a full collection resets the counts).
bool Whole() {
  if (g_keys_only) return IntAt(g_fl.keys_numfree) == -1;
  if (IntAt(g_fl.float_numfree) != int{pl::kFloatMax} || PtrAt(g_fl.float_head) != nullptr) {
    return false;
  }
  for (uint32_t i = g_tuple_first; i < pl::kTupleLists; ++i) {
    if (IntAt(g_fl.tuple_numfree + 4 * i) != int{pl::kTupleMax} ||
        PtrAt(g_fl.tuple_heads + 8 * i) != nullptr) {
      return false;
    }
  }
  return IntAt(g_fl.list_numfree) == 0 && IntAt(g_fl.dict_numfree) == 0 &&
         IntAt(g_fl.keys_numfree) == 0 && Slot(g_api.list_type) == ListDealloc &&
         Slot(g_api.dict_type) == DictDealloc;
}

// Sets the lists aside, or (already on) frees what a full collection let in.
void BypassOn() {
  if (g_keys_only) {
    if (!g_bypass) {
      ParkStack(g_fl.keys_items, g_fl.keys_numfree, g_parked.keys, &g_parked.nkeys);
      g_bypass = true;
    }
    EmptyStack(g_fl.keys_items, g_fl.keys_numfree, g_api.object_free);
    IntAt(g_fl.keys_numfree) = -1;
    return;
  }
  if (!g_bypass) {
    Parked& p = g_parked;
    p.float_head = PtrAt(g_fl.float_head);
    p.float_count = IntAt(g_fl.float_numfree);
    PtrAt(g_fl.float_head) = nullptr;
    for (uint32_t i = g_tuple_first; i < pl::kTupleLists; ++i) {
      p.tuple_head[i] = PtrAt(g_fl.tuple_heads + 8 * i);
      p.tuple_count[i] = IntAt(g_fl.tuple_numfree + 4 * i);
      PtrAt(g_fl.tuple_heads + 8 * i) = nullptr;
    }
    ParkStack(g_fl.list_items, g_fl.list_numfree, p.lists, &p.nlists);
    ParkStack(g_fl.dict_items, g_fl.dict_numfree, p.dicts, &p.ndicts);
    ParkStack(g_fl.keys_items, g_fl.keys_numfree, p.keys, &p.nkeys);
    g_bypass = true;
  }
  Slot(g_api.list_type) = ListDealloc;
  Slot(g_api.dict_type) = DictDealloc;
  EmptyFloats(pl::kFloatMax);
  EmptyTuples(pl::kTupleMax);
  EmptyLists();
  EmptyDicts();
}

// Puts the lists back. A list is only emptied first when a full collection
// let objects in meanwhile, and not while finalizing: those stay, and the
// parked objects stay allocated (as a free list's do at exit).
void BypassOff(bool finalizing) {
  g_bypass = false;
  if (g_keys_only) {
    // Finalizing: -1 stays, as CPython's finalization sets it; the parked
    // tables stay allocated (as a free list's do at exit).
    if (!finalizing && IntAt(g_fl.keys_numfree) == -1) IntAt(g_fl.keys_numfree) = 0;
    UnparkStack(g_fl.keys_items, g_fl.keys_numfree, g_parked.keys, g_parked.nkeys,
                g_api.object_free, finalizing);
    memset(&g_parked, 0, sizeof(g_parked));
    return;
  }
  Slot(g_api.list_type) = g_list_dealloc;
  Slot(g_api.dict_type) = g_dict_dealloc;
  Parked& p = g_parked;
  if (!finalizing) EmptyFloats(0);
  if (PtrAt(g_fl.float_head) == nullptr) {
    PtrAt(g_fl.float_head) = p.float_head;
    IntAt(g_fl.float_numfree) = p.float_count;
  }
  if (!finalizing) EmptyTuples(0);
  for (uint32_t i = g_tuple_first; i < pl::kTupleLists; ++i) {
    if (PtrAt(g_fl.tuple_heads + 8 * i) == nullptr) {
      PtrAt(g_fl.tuple_heads + 8 * i) = p.tuple_head[i];
      IntAt(g_fl.tuple_numfree + 4 * i) = p.tuple_count[i];
    }
  }
  UnparkStack(g_fl.list_items, g_fl.list_numfree, p.lists, p.nlists, g_api.gc_del, finalizing);
  UnparkStack(g_fl.dict_items, g_fl.dict_numfree, p.dicts, p.ndicts, g_api.gc_del, finalizing);
  UnparkStack(g_fl.keys_items, g_fl.keys_numfree, p.keys, p.nkeys, g_api.object_free, finalizing);
  memset(&p, 0, sizeof(p));
}

// ---- finding and checking ----

template <typename T>
bool Read(uintptr_t addr, T* out) {
  bool denied = false;
  return SafeRead(addr, out, sizeof(T), &denied);
}
uintptr_t Addr(uint32_t off) { return reinterpret_cast<uintptr_t>(g_is) + off; }

// A singly linked list of `count` objects of `type` (and `size` items when
// not negative), linked at `link`.
bool ChainHolds(uintptr_t head_at, int count, int max, uint32_t link, const char* type, long size) {
  uintptr_t node;
  if (!Read(head_at, &node) || count < 0 || count > max) return false;
  int n = 0;
  while (node != 0) {
    uintptr_t t, next;
    long sz = 0;
    if (++n > count || !Read(node + pl::kObType, &t) || !Read(node + link, &next)) return false;
    // A float's ob_type is the link itself.
    if (link != pl::kObType && t != reinterpret_cast<uintptr_t>(type)) return false;
    if (size >= 0 && (!Read(node + pl::kObSize, &sz) || sz != size)) return false;
    node = next;
  }
  return n == count;
}

// A stack of `count` objects of `type` (any non-null pointers: nullptr).
bool StackHolds(uint32_t items, uint32_t numfree, int max, const char* type) {
  int n;
  if (!Read(Addr(numfree), &n) || n < 0 || n > max) return false;
  for (int i = 0; i < n; ++i) {
    uintptr_t o, t;
    if (!Read(Addr(items) + 8 * static_cast<uint32_t>(i), &o) || o == 0) return false;
    if (type != nullptr && (!Read(o + pl::kObType, &t) || t != reinterpret_cast<uintptr_t>(type))) {
      return false;
    }
  }
  return true;
}

bool ContentsHold() {
  int n;
  if (!Read(Addr(g_fl.float_numfree), &n) ||
      !ChainHolds(Addr(g_fl.float_head), n, pl::kFloatMax, pl::kObType, nullptr, -1)) {
    return false;
  }
  for (uint32_t i = g_tuple_first; i < pl::kTupleLists; ++i) {
    if (!Read(Addr(g_fl.tuple_numfree + 4 * i), &n) ||
        !ChainHolds(Addr(g_fl.tuple_heads + 8 * i), n, pl::kTupleMax, pl::kTupleItem0,
                    g_api.tuple_type, long{i + g_fl.tuple_size0})) {
      return false;
    }
  }
  return StackHolds(g_fl.list_items, g_fl.list_numfree, pl::kListMax, g_api.list_type) &&
         StackHolds(g_fl.dict_items, g_fl.dict_numfree, pl::kDictMax, g_api.dict_type) &&
         StackHolds(g_fl.keys_items, g_fl.keys_numfree, pl::kDictMax, nullptr);
}

// Creating an object pops the top of its list when there is one; destroying
// it pushes it back (the list was checked not to be full or is full again).
bool PopPush(void* (*make)(), uint32_t numfree, uint32_t top_at, bool chain) {
  auto top = [&](int n) -> void* {
    if (chain) return PtrAt(top_at);
    return n > 0 ? reinterpret_cast<void**>(g_is + top_at)[n - 1] : nullptr;
  };
  const int n0 = IntAt(numfree);
  void* const t0 = top(n0);
  void* o = make();
  if (o == nullptr) return false;
  const bool popped = n0 > 0 ? o == t0 && IntAt(numfree) == n0 - 1 : IntAt(numfree) == 0;
  g_api.decref(o);
  const int n1 = n0 > 0 ? n0 : 1;
  return popped && IntAt(numfree) == n1 && top(n1) == o;
}

// 3.13: a dict given one str key takes a key table of the smallest size,
// the kind the list keeps; destroying the dict pushes the table back.
bool KeysPopPush() {
  const uint32_t numfree = g_fl.keys_numfree;
  auto items = reinterpret_cast<void**>(g_is + g_fl.keys_items);
  const int n0 = IntAt(numfree);
  void* const t0 = n0 > 0 ? items[n0 - 1] : nullptr;
  void* d = g_api.new_dict();
  if (d == nullptr) return false;
  if (g_api.set_item_string(d, "memstep", g_api.none) != 0) {
    g_api.decref(d);
    return false;
  }
  void* const keys = Field(d, pl::kDictKeys);
  const bool popped = n0 > 0 ? keys == t0 && IntAt(numfree) == n0 - 1 : IntAt(numfree) == 0;
  g_api.decref(d);
  const int n1 = n0 > 0 ? n0 : 1;
  return popped && IntAt(numfree) == n1 && items[n1 - 1] == keys;
}

void* MakeFloat() { return g_api.new_float(0.5); }
void* MakeTuple() { return g_api.new_tuple(1); }
void* MakeList() { return g_api.new_list(0); }
void* MakeDict() { return g_api.new_dict(); }

template <typename F>
bool Sym(F* out, const char* name) {
  *out = reinterpret_cast<F>(OwnDlsym(RTLD_DEFAULT, name));
  return *out != nullptr;
}

}  // namespace

namespace {

// 3.13 (the objects are re-stamped): the key tables' list only.
const char* FindKeysOnly() {
  Api a = {};
  void* (*main_interp)() = nullptr;
  if (!Sym(&a.new_dict, "PyDict_New") || !Sym(&a.set_item_string, "PyDict_SetItemString") ||
      !Sym(&a.none, "_Py_NoneStruct") || !Sym(&a.decref, "Py_DecRef") ||
      !Sym(&a.object_free, "PyObject_Free") ||
      !Sym(&a.tstate, "PyThreadState_GetUnchecked") ||  // 3.13's names for these two
      !Sym(&a.interp_of, "PyThreadState_GetInterpreter") ||
      !Sym(&a.finalizing, "Py_IsFinalizing") || !Sym(&main_interp, "PyInterpreterState_Main")) {
    return "a symbol memstep needs is missing";
  }
  g_api = a;
  g_is = static_cast<char*>(main_interp());
  const bool ok = g_is != nullptr && OnMain(a.tstate()) &&
                  StackHolds(g_fl.keys_items, g_fl.keys_numfree, pl::kDictMax, nullptr) &&
                  KeysPopPush();
  if (!ok) {
    g_is = nullptr;
    return "its dicts' key tables are not laid out as memstep expects";
  }
  g_keys_only = true;
  return nullptr;
}

}  // namespace

const char* FreeListsFind() {
  const auto* py_version = static_cast<const unsigned long*>(OwnDlsym(RTLD_DEFAULT, "Py_Version"));
  const char* (*get_version)() = nullptr;
  uint32_t version = 0;
  if (py_version != nullptr) {
    version = static_cast<uint32_t>(*py_version & 0xFFFF0000);
  } else if (Sym(&get_version, "Py_GetVersion") && strncmp(get_version(), "3.10.", 5) == 0) {
    version = 0x030A0000;
  }
  switch (version) {
    case pl::kFreeLists310.version:
      g_fl = pl::kFreeLists310;
      break;
    case pl::kFreeLists311.version:
      g_fl = pl::kFreeLists311;
      break;
    case pl::kFreeLists312.version:
      g_fl = pl::kFreeLists312;
      break;
    case pl::kFreeLists313.version:
      g_fl = pl::kFreeLists313;
      return FindKeysOnly();
    default:
      return "";  // 3.14+ or unsupported: nothing to say
  }
  Api a;
  void* (*main_interp)() = nullptr;
  if (!Sym(&a.new_float, "PyFloat_FromDouble") || !Sym(&a.new_tuple, "PyTuple_New") ||
      !Sym(&a.new_list, "PyList_New") || !Sym(&a.new_dict, "PyDict_New") ||
      !Sym(&a.decref, "Py_DecRef") || !Sym(&a.object_free, "PyObject_Free") ||
      !Sym(&a.gc_del, "PyObject_GC_Del") || !Sym(&a.untrack, "PyObject_GC_UnTrack") ||
      !Sym(&a.tstate, "_PyThreadState_UncheckedGet") ||
      !Sym(&a.interp_of, "PyThreadState_GetInterpreter") ||
      !Sym(&a.trash_begin, "_PyTrash_begin") || !Sym(&a.trash_end, "_PyTrash_end") ||
      !Sym(&a.finalizing, "_Py_IsFinalizing") || !Sym(&a.float_type, "PyFloat_Type") ||
      !Sym(&a.tuple_type, "PyTuple_Type") || !Sym(&a.list_type, "PyList_Type") ||
      !Sym(&a.dict_type, "PyDict_Type") || !Sym(&main_interp, "PyInterpreterState_Main")) {
    return "a symbol memstep needs is missing";
  }
  g_api = a;
  g_is = static_cast<char*>(main_interp());
  g_tuple_first = g_fl.tuple_size0 == 0 ? 1 : 0;
  const uint32_t tuple1 = g_fl.tuple_heads + 8 * (1 - g_fl.tuple_size0);
  const bool ok =
      g_is != nullptr && OnMain(a.tstate()) && ContentsHold() &&
      PopPush(MakeFloat, g_fl.float_numfree, g_fl.float_head, true) &&
      PopPush(MakeTuple, g_fl.tuple_numfree + 4 * (1 - g_fl.tuple_size0), tuple1, true) &&
      PopPush(MakeList, g_fl.list_numfree, g_fl.list_items, false) &&
      PopPush(MakeDict, g_fl.dict_numfree, g_fl.dict_items, false) &&
      Slot(a.list_type) != nullptr && Slot(a.dict_type) != nullptr;
  if (!ok) {
    g_is = nullptr;
    return "its free lists are not laid out as memstep expects (a debug build?)";
  }
  g_list_dealloc = Slot(a.list_type);
  g_dict_dealloc = Slot(a.dict_type);
  return nullptr;
}

namespace {

// Turns the bypass on only at a step's first allocation (`at_step`), off at
// any time; while on, makes it whole again at any time.
void Sync(bool at_step) {
  if (g_is == nullptr || g_busy) return;
  void* ts = g_api.tstate();
  if (!OnMain(ts)) return;
  const bool finalizing = g_api.finalizing() != 0;
  const bool want = !finalizing && SitesHunting() && Recording() && PyFramesActive();
  if (want == g_bypass && (!want || Whole())) return;
  if (want && !g_bypass && !at_step) {
    // Armed: the next step's first allocation begins it (FreeListsStep).
    if (g_fl_step == 0) g_fl_step = g_cur_step.load(std::memory_order_relaxed) + 1;
    return;
  }
  g_busy = true;
  if (want) {
    BypassOn();  // or whole again
  } else {
    BypassOff(finalizing);
  }
  g_busy = false;
}

}  // namespace

void FreeListsSync() { Sync(false); }

void FreeListsStep() {
  if (g_is == nullptr) return;
  void* ts = g_api.tstate();
  if (!OnMain(ts)) return;  // the main interpreter's first allocation in the step
  g_fl_step = 0;            // disarmed
  Sync(true);
}

}  // namespace memstep::preload
