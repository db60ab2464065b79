// Where CPython 3.10 to 3.12 keep their free lists of floats, tuples, lists
// and dicts (and dicts' small key tables; 3.13: the key tables' only):
// fields of the interpreter state
// (PyInterpreterState, an internal struct), per version, from each version's
// headers (Include/internal/pycore_interp.h and the state structs it embeds).
// preload/python/freelists.cc bypasses these lists during leak hunts.
//
//   floats  int numfree; PyFloatObject *free_list, linked through ob_type.
//   tuples  PyTupleObject *free_list[20], each linked through ob_item[0];
//           int numfree[20]. 3.10: list i holds tuples of size i (list 0 is
//           the empty tuple, which is not freed: left alone); 3.11, 3.12:
//           list i holds tuples of size i + 1.
//   lists   PyListObject *free_list[80]; int numfree (a stack).
//   dicts   PyDictObject *free_list[80]; int numfree; PyDictKeysObject
//           *keys_free_list[80]; int keys_numfree (stacks; 3.12 reorders
//           the fields after two version counters).
//
// Offsets are LP64 ones (x86-64 and aarch64 Linux alike). The table is plain
// constants; tests/python/pyframes_layout_test.c checks the one of the
// headers it is compiled against (CMake: Debian's 3.11; cpython_versions.sh:
// each version it checks), and at run time freelists.cc checks every list's
// contents and one push and pop of each before it touches anything.
// Plain C as well as C++ (the layout test is C).

#ifndef MEMSTEP_PRELOAD_PYTHON_FREELIST_LAYOUT_H_
#define MEMSTEP_PRELOAD_PYTHON_FREELIST_LAYOUT_H_

#include <stdint.h>

#ifdef __cplusplus
namespace memstep::preload::pylayout {
#define MEMSTEP_FL_CONST inline constexpr
#else
#define MEMSTEP_FL_CONST static const
#endif

struct MemstepFreeListLayout {
  uint32_t version;        // PY_VERSION_HEX & 0xFFFF0000
  uint32_t float_numfree;  // offsets in PyInterpreterState
  uint32_t float_head;
  uint32_t tuple_heads;
  uint32_t tuple_numfree;
  uint32_t tuple_size0;  // the size of the tuples of list 0
  uint32_t list_items;
  uint32_t list_numfree;
  uint32_t dict_items;
  uint32_t dict_numfree;
  uint32_t keys_items;
  uint32_t keys_numfree;
};

// The same in every version: PyFloat_MAXFREELIST, PyTuple_MAXSAVESIZE (the
// number of tuple lists), PyTuple_MAXFREELIST, PyList_MAXFREELIST and
// PyDict_MAXFREELIST (dicts and key tables).
MEMSTEP_FL_CONST uint32_t kFloatMax = 100;
MEMSTEP_FL_CONST uint32_t kTupleLists = 20;
MEMSTEP_FL_CONST uint32_t kTupleMax = 2000;
MEMSTEP_FL_CONST uint32_t kListMax = 80;
MEMSTEP_FL_CONST uint32_t kDictMax = 80;

// Object fields read or written (public structs, every version).
MEMSTEP_FL_CONST uint32_t kObType = 8;       // PyObject.ob_type
MEMSTEP_FL_CONST uint32_t kObSize = 16;      // PyVarObject.ob_size
MEMSTEP_FL_CONST uint32_t kTupleItem0 = 24;  // PyTupleObject.ob_item[0]
MEMSTEP_FL_CONST uint32_t kDictKeys = 32;    // PyDictObject.ma_keys
MEMSTEP_FL_CONST uint32_t kTpDealloc = 48;   // PyTypeObject.tp_dealloc

MEMSTEP_FL_CONST struct MemstepFreeListLayout kFreeLists310 = {
    0x030A0000, 9776, 9784, 9800, 9960, 0, 10040, 10680, 10688, 11328, 11336, 11976};
MEMSTEP_FL_CONST struct MemstepFreeListLayout kFreeLists311 = {
    0x030B0000, 3608, 3616, 3632, 3792, 1, 3872, 4512, 4520, 5160, 5168, 5808};
MEMSTEP_FL_CONST struct MemstepFreeListLayout kFreeLists312 = {
    0x030C0000, 267408, 267416, 269832, 269992, 1, 270072, 270712, 270736, 272016, 271376, 272020};

// 3.13: the objects of these lists are re-stamped instead (pymem.cc's
// reference tracer), but a dict's key table is no object: its free list,
// PyInterpreterState.object_state.freelists.dictkeys {PyDictKeysObject
// *items[80]; int numfree}, is bypassed. A count of -1 stops both its pop
// (numfree > 0) and its push (numfree >= 0), as CPython's finalization
// does. Only keys_items and keys_numfree are set.
MEMSTEP_FL_CONST struct MemstepFreeListLayout kFreeLists313 = {0x030D0000, 0, 0, 0, 0,     0,
                                                               0,          0, 0, 0, 12504, 13144};

#undef MEMSTEP_FL_CONST
#ifdef __cplusplus
}  // namespace memstep::preload::pylayout
#endif

#endif  // MEMSTEP_PRELOAD_PYTHON_FREELIST_LAYOUT_H_
