/* Checks preload/python/pyframes_layout.h against the CPython headers it is
 * compiled with (3.10 to 3.13): every offset memstep reads in place must be
 * the real one. CMake builds it against Debian's python3.11-dev headers where
 * installed; tests/python/cpython_versions.sh against each version it checks. */
#define Py_BUILD_CORE 1
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000
#include <internal/pycore_frame.h>
#else
#include <frameobject.h>
#endif
#if PY_VERSION_HEX >= 0x030D0000
#include <internal/pycore_runtime.h>
#endif
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "preload/python/pyframes_layout.h"
#if PY_VERSION_HEX < 0x030E0000
#include <internal/pycore_interp.h>

#include "preload/python/freelist_layout.h"
#endif

static int failures = 0;
#define EXPECT(name, actual)                                                                 \
  do {                                                                                       \
    if ((size_t)(actual) != (size_t)(name)) {                                                \
      printf("%s: memstep has %zu, CPython %zu\n", #name, (size_t)(name), (size_t)(actual)); \
      ++failures;                                                                            \
    }                                                                                        \
  } while (0)

int main(void) {
#if PY_VERSION_HEX >= 0x030A0000 && PY_VERSION_HEX < 0x030B0000
  const struct MemstepPyLayout* l = &kLayout310;
  EXPECT(l->chain, kChainFrameObject);
  EXPECT(l->tstate_frame, offsetof(PyThreadState, frame));
  EXPECT(l->frame_code, offsetof(PyFrameObject, f_code));
  EXPECT(l->frame_previous, offsetof(PyFrameObject, f_back));
  EXPECT(l->frame_instr, offsetof(PyFrameObject, f_lasti));
  EXPECT(l->code_name, offsetof(PyCodeObject, co_name));
  EXPECT(l->code_basicsize, sizeof(PyCodeObject));
#elif PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#if PY_VERSION_HEX < 0x030C0000
  const struct MemstepPyLayout* l = &kLayout311;
#else
  const struct MemstepPyLayout* l = &kLayout312;
  EXPECT(l->owned_by_cstack, FRAME_OWNED_BY_CSTACK);
#endif
  EXPECT(l->chain, kChainCframe);
  EXPECT(l->tstate_frame, offsetof(PyThreadState, cframe));
  EXPECT(l->cframe_current, offsetof(_PyCFrame, current_frame));
  EXPECT(l->frame_code, offsetof(_PyInterpreterFrame, f_code));
  EXPECT(l->frame_previous, offsetof(_PyInterpreterFrame, previous));
  EXPECT(l->frame_instr, offsetof(_PyInterpreterFrame, prev_instr));
#elif PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000
  const struct MemstepPyLayout* l = &kLayout313;
  EXPECT(l->chain, kChainDirect);
  EXPECT(l->tstate_frame, offsetof(PyThreadState, current_frame));
  EXPECT(l->frame_code, offsetof(_PyInterpreterFrame, f_executable));
  EXPECT(l->frame_previous, offsetof(_PyInterpreterFrame, previous));
  EXPECT(l->frame_instr, offsetof(_PyInterpreterFrame, instr_ptr));
  EXPECT(l->owned_by_cstack, FRAME_OWNED_BY_CSTACK);
  /* Where the published offsets lie inside _Py_DebugOffsets. */
  EXPECT(sizeof(kDebugCookie), sizeof(((_Py_DebugOffsets*)0)->cookie));
  EXPECT(kDbgVersion, offsetof(_Py_DebugOffsets, version));
  EXPECT(kDbgFreeThreaded, offsetof(_Py_DebugOffsets, free_threaded));
  EXPECT(kDbgTstateCurrentFrame, offsetof(_Py_DebugOffsets, thread_state.current_frame));
  EXPECT(kDbgFramePrevious, offsetof(_Py_DebugOffsets, interpreter_frame.previous));
  EXPECT(kDbgFrameExecutable, offsetof(_Py_DebugOffsets, interpreter_frame.executable));
  EXPECT(kDbgFrameInstrPtr, offsetof(_Py_DebugOffsets, interpreter_frame.instr_ptr));
  EXPECT(kDbgFrameOwner, offsetof(_Py_DebugOffsets, interpreter_frame.owner));
  EXPECT(kDbgCodeSize, offsetof(_Py_DebugOffsets, code_object.size));
  EXPECT(kDbgCodeFilename, offsetof(_Py_DebugOffsets, code_object.filename));
  EXPECT(kDbgCodeQualname, offsetof(_Py_DebugOffsets, code_object.qualname));
  EXPECT(kDbgCodeLinetable, offsetof(_Py_DebugOffsets, code_object.linetable));
  EXPECT(kDbgCodeFirstlineno, offsetof(_Py_DebugOffsets, code_object.firstlineno));
  EXPECT(kDbgCodeAdaptive, offsetof(_Py_DebugOffsets, code_object.co_code_adaptive));
  EXPECT(kDbgObType, offsetof(_Py_DebugOffsets, pyobject.ob_type));
  EXPECT(kDbgBytesSize, offsetof(_Py_DebugOffsets, bytes_object.ob_size));
  EXPECT(kDbgBytesData, offsetof(_Py_DebugOffsets, bytes_object.ob_sval));
  EXPECT(kDbgStrState, offsetof(_Py_DebugOffsets, unicode_object.state));
  EXPECT(kDbgStrLength, offsetof(_Py_DebugOffsets, unicode_object.length));
  EXPECT(kDbgStrAsciiSize, offsetof(_Py_DebugOffsets, unicode_object.asciiobject_size));
  EXPECT(kDbgSize313, sizeof(_Py_DebugOffsets));
#else
#error "no memstep layout table for this CPython version"
#endif
#if PY_VERSION_HEX >= 0x030B0000
  EXPECT(l->frame_owner, offsetof(_PyInterpreterFrame, owner));
  EXPECT(l->code_name, offsetof(PyCodeObject, co_qualname));
  EXPECT(l->code_firsttraceable, offsetof(PyCodeObject, _co_firsttraceable));
  EXPECT(l->code_adaptive, offsetof(PyCodeObject, co_code_adaptive));
  EXPECT(l->code_basicsize, offsetof(PyCodeObject, co_code_adaptive));
  EXPECT(l->owned_by_generator, FRAME_OWNED_BY_GENERATOR);
  EXPECT(l->lines, kLines311);
#else
  EXPECT(l->lines, kLines310);
#endif
  EXPECT(l->version, PY_VERSION_HEX & 0xFFFF0000);
  EXPECT(l->code_filename, offsetof(PyCodeObject, co_filename));
  EXPECT(l->code_firstlineno, offsetof(PyCodeObject, co_firstlineno));
  EXPECT(l->code_linetable, offsetof(PyCodeObject, co_linetable));
  EXPECT(l->bytes_size, offsetof(PyVarObject, ob_size));
  EXPECT(l->bytes_data, offsetof(PyBytesObject, ob_sval));
  EXPECT(l->str_length, offsetof(PyASCIIObject, length));
  EXPECT(l->str_state, offsetof(PyASCIIObject, state));
  EXPECT(l->str_ascii_data, sizeof(PyASCIIObject));
  EXPECT(l->str_utf8_length, offsetof(PyCompactUnicodeObject, utf8_length));
  EXPECT(l->str_utf8, offsetof(PyCompactUnicodeObject, utf8));
  EXPECT(l->ob_type, offsetof(PyObject, ob_type));
  EXPECT(l->type_basicsize, offsetof(PyTypeObject, tp_basicsize));
  /* The state bit-fields: set compact and ascii, read the word. */
  PyASCIIObject probe;
  memset(&probe, 0, sizeof(probe));
  probe.state.compact = 1;
  unsigned int word;
  memcpy(&word, (char*)&probe + l->str_state, sizeof(word));
  EXPECT(1u << kStateCompactBit, word);
  probe.state.compact = 0;
  probe.state.ascii = 1;
  memcpy(&word, (char*)&probe + l->str_state, sizeof(word));
  EXPECT(1u << kStateAsciiBit, word);
#if PY_VERSION_HEX < 0x030D0000
  /* preload/python/freelist_layout.h: the free lists of 3.10 to 3.12. */
#if PY_VERSION_HEX < 0x030B0000
  const struct MemstepFreeListLayout* f = &kFreeLists310;
  EXPECT(f->tuple_size0, 0);
#else
#if PY_VERSION_HEX < 0x030C0000
  const struct MemstepFreeListLayout* f = &kFreeLists311;
#else
  const struct MemstepFreeListLayout* f = &kFreeLists312;
#endif
  EXPECT(f->tuple_size0, 1);
  EXPECT(kFloatMax, PyFloat_MAXFREELIST); /* 3.10 defines it in floatobject.c */
#endif
  EXPECT(f->version, PY_VERSION_HEX & 0xFFFF0000);
  EXPECT(f->float_numfree, offsetof(PyInterpreterState, float_state.numfree));
  EXPECT(f->float_head, offsetof(PyInterpreterState, float_state.free_list));
  EXPECT(f->tuple_heads, offsetof(PyInterpreterState, tuple.free_list));
  EXPECT(f->tuple_numfree, offsetof(PyInterpreterState, tuple.numfree));
  EXPECT(f->list_items, offsetof(PyInterpreterState, list.free_list));
  EXPECT(f->list_numfree, offsetof(PyInterpreterState, list.numfree));
  EXPECT(f->dict_items, offsetof(PyInterpreterState, dict_state.free_list));
  EXPECT(f->dict_numfree, offsetof(PyInterpreterState, dict_state.numfree));
  EXPECT(f->keys_items, offsetof(PyInterpreterState, dict_state.keys_free_list));
  EXPECT(f->keys_numfree, offsetof(PyInterpreterState, dict_state.keys_numfree));
  {
    PyInterpreterState* is = NULL;
    EXPECT(kTupleLists, sizeof(is->tuple.free_list) / sizeof(is->tuple.free_list[0]));
    EXPECT(kTupleLists, sizeof(is->tuple.numfree) / sizeof(is->tuple.numfree[0]));
    EXPECT(kListMax, sizeof(is->list.free_list) / sizeof(is->list.free_list[0]));
    EXPECT(kDictMax, sizeof(is->dict_state.free_list) / sizeof(is->dict_state.free_list[0]));
    EXPECT(kDictMax,
           sizeof(is->dict_state.keys_free_list) / sizeof(is->dict_state.keys_free_list[0]));
    EXPECT(4, sizeof(is->float_state.numfree));
    EXPECT(4, sizeof(is->list.numfree));
    EXPECT(4, sizeof(is->dict_state.numfree));
    EXPECT(4, sizeof(is->dict_state.keys_numfree));
  }
  EXPECT(kTupleMax, PyTuple_MAXFREELIST);
  EXPECT(kListMax, PyList_MAXFREELIST);
  EXPECT(kDictMax, PyDict_MAXFREELIST);
  EXPECT(kObType, offsetof(PyObject, ob_type));
  EXPECT(kObSize, offsetof(PyVarObject, ob_size));
  EXPECT(kTupleItem0, offsetof(PyTupleObject, ob_item));
  EXPECT(kDictKeys, offsetof(PyDictObject, ma_keys));
  EXPECT(kTpDealloc, offsetof(PyTypeObject, tp_dealloc));
#elif PY_VERSION_HEX < 0x030E0000
  /* 3.13: the key tables' free list only. */
  EXPECT(kFreeLists313.version, PY_VERSION_HEX & 0xFFFF0000);
  EXPECT(kFreeLists313.keys_items,
         offsetof(PyInterpreterState, object_state.freelists.dictkeys.items));
  EXPECT(kFreeLists313.keys_numfree,
         offsetof(PyInterpreterState, object_state.freelists.dictkeys.numfree));
  {
    PyInterpreterState* is = NULL;
    EXPECT(kDictMax, sizeof(is->object_state.freelists.dictkeys.items) /
                         sizeof(is->object_state.freelists.dictkeys.items[0]));
    EXPECT(4, sizeof(is->object_state.freelists.dictkeys.numfree));
  }
  EXPECT(kDictMax, PyDict_MAXFREELIST);
  EXPECT(kDictKeys, offsetof(PyDictObject, ma_keys));
#endif
  if (failures == 0) printf("pyframes layout ok (CPython %s)\n", PY_VERSION);
  return failures == 0 ? 0 : 1;
}
