// Where preload/python/pyframes.cc finds a thread's Python frames, per CPython
// version (release builds: no Py_TRACE_REFS). The offsets are LP64 ones and
// hold on x86-64 and aarch64 Linux alike: both lay out C structs the same way
// (same sizes and alignments of pointers, longs and ints, little-endian
// bit-fields), and nothing here depends on registers or the stack.
//
//   3.10  PyThreadState.frame -> PyFrameObject, ->f_back; f_code; f_lasti
//         (an instruction index, -1 before the first); co_name; line table
//         in the PEP 626 format.
//   3.11  PyThreadState.cframe -> _PyCFrame.current_frame ->
//   3.12  _PyInterpreterFrame, ->previous; f_code; prev_instr (the
//         instruction executing); owner; co_qualname; location table.
//   3.13  PyThreadState.current_frame -> _PyInterpreterFrame, ->previous;
//         f_executable (a code object, or None for the C-stack entry frame);
//         instr_ptr; owner. Read from the offsets the interpreter publishes
//         in _PyRuntime.debug_offsets (_Py_DebugOffsets, cookie "xdebugpy"),
//         see Layout313FromDebugOffsets; the table below is the header's, used
//         for the one field not published (_co_firsttraceable) and by tests.
//
// The tables are plain constants (no Python header is needed to build
// libmemstep.so); tests/python/pyframes_layout_test.c checks the table of the
// headers it is compiled against (CMake: /usr/include/python3.11;
// tests/python/cpython_versions.sh: each pyenv version's include/python3.X),
// and at run time pyframes.cc checks PyCode_Type.tp_basicsize against
// code_basicsize before it reads anything (a debug or trace-refs build, whose
// objects are laid out differently, fails that check).
// Plain C as well as C++ (the layout test is C).

#ifndef MEMSTEP_PRELOAD_PYFRAMES_LAYOUT_H_
#define MEMSTEP_PRELOAD_PYFRAMES_LAYOUT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
namespace memstep::preload::pylayout {
#define MEMSTEP_PY_CONST inline constexpr
#else
#define MEMSTEP_PY_CONST static const
#endif

enum MemstepPyChain {
  kChainFrameObject = 1,  // 3.10: PyFrameObject, f_back
  kChainCframe = 2,       // 3.11, 3.12: tstate->cframe->current_frame, previous
  kChainDirect = 3,       // 3.13: tstate->current_frame, previous
};
enum MemstepPyLines {
  kLines310 = 1,  // pylinetable.h Line310
  kLines311 = 2,  // pylinetable.h Line311 (3.11 to 3.13)
};

struct MemstepPyLayout {
  uint32_t version;              // PY_VERSION_HEX & 0xFFFF0000
  uint32_t chain;                // MemstepPyChain
  uint32_t lines;                // MemstepPyLines
  uint32_t tstate_frame;         // PyThreadState.frame / .cframe / .current_frame
  uint32_t cframe_current;       // _PyCFrame.current_frame (kChainCframe)
  uint32_t frame_code;           // f_code / f_executable
  uint32_t frame_previous;       // f_back / previous
  uint32_t frame_instr;          // f_lasti (int) / prev_instr / instr_ptr
  uint32_t frame_owner;          // owner (char; 3.11+)
  uint32_t code_filename;        // co_filename
  uint32_t code_name;            // co_name (3.10) / co_qualname
  uint32_t code_firstlineno;     // co_firstlineno (int)
  uint32_t code_linetable;       // co_linetable (bytes)
  uint32_t code_firsttraceable;  // _co_firsttraceable (int; 3.11+; 0: unknown)
  uint32_t code_adaptive;        // co_code_adaptive: the instructions (3.11+)
  uint32_t code_basicsize;       // PyCode_Type.tp_basicsize
  uint32_t bytes_size;           // PyVarObject.ob_size
  uint32_t bytes_data;           // PyBytesObject.ob_sval
  uint32_t str_length;           // PyASCIIObject.length
  uint32_t str_state;            // PyASCIIObject.state
  uint32_t str_ascii_data;       // sizeof(PyASCIIObject): compact ASCII data
  uint32_t str_utf8_length;      // PyCompactUnicodeObject.utf8_length
  uint32_t str_utf8;             // PyCompactUnicodeObject.utf8
  uint32_t ob_type;              // PyObject.ob_type
  uint32_t type_basicsize;       // PyTypeObject.tp_basicsize
  uint32_t owned_by_generator;   // FRAME_OWNED_BY_GENERATOR (3.11+)
  uint32_t owned_by_cstack;      // FRAME_OWNED_BY_CSTACK (3.12+; 0: none)
};

// PyASCIIObject.state bits (little-endian bit-fields, the same 3.10 to 3.13):
// interned:2, kind:3, compact:1, ascii:1.
MEMSTEP_PY_CONST uint32_t kStateCompactBit = 5;
MEMSTEP_PY_CONST uint32_t kStateAsciiBit = 6;

MEMSTEP_PY_CONST struct MemstepPyLayout kLayout310 = {0x030A0000, kChainFrameObject,
                                                      kLines310,  24,
                                                      0,          32,
                                                      24,         96,
                                                      0,          104,
                                                      112,        40,
                                                      120,        0,
                                                      0,          176,
                                                      16,         32,
                                                      16,         32,
                                                      48,         48,
                                                      56,         8,
                                                      32,         0,
                                                      0};
MEMSTEP_PY_CONST struct MemstepPyLayout kLayout311 = {
    0x030B0000, kChainCframe, kLines311, 56, 8,  32, 48, 56, 69, 112, 128, 72, 136, 168,
    184,        184,          16,        32, 16, 32, 48, 48, 56, 8,   32,  1,  0};
MEMSTEP_PY_CONST struct MemstepPyLayout kLayout312 = {
    0x030C0000, kChainCframe, kLines311, 56, 0,  0,  8,  56, 70, 112, 128, 68, 136, 176,
    192,        192,          16,        32, 16, 32, 40, 40, 48, 8,   32,  1,  3};
MEMSTEP_PY_CONST struct MemstepPyLayout kLayout313 = {
    0x030D0000, kChainDirect, kLines311, 72, 0,  0,  8,  56, 70, 112, 128, 68, 136, 184,
    200,        200,          16,        32, 16, 32, 40, 40, 48, 8,   32,  1,  3};

// _Py_DebugOffsets of CPython 3.13 (Include/internal/pycore_runtime.h): the
// byte offsets, inside that struct, of the u64 fields pyframes.cc reads.
MEMSTEP_PY_CONST char kDebugCookie[8] = {'x', 'd', 'e', 'b', 'u', 'g', 'p', 'y'};
MEMSTEP_PY_CONST uint32_t kDbgVersion = 8;
MEMSTEP_PY_CONST uint32_t kDbgFreeThreaded = 16;
MEMSTEP_PY_CONST uint32_t kDbgTstateCurrentFrame = 184;
MEMSTEP_PY_CONST uint32_t kDbgFramePrevious = 232;
MEMSTEP_PY_CONST uint32_t kDbgFrameExecutable = 240;
MEMSTEP_PY_CONST uint32_t kDbgFrameInstrPtr = 248;
MEMSTEP_PY_CONST uint32_t kDbgFrameOwner = 264;
MEMSTEP_PY_CONST uint32_t kDbgCodeSize = 272;
MEMSTEP_PY_CONST uint32_t kDbgCodeFilename = 280;
MEMSTEP_PY_CONST uint32_t kDbgCodeQualname = 296;
MEMSTEP_PY_CONST uint32_t kDbgCodeLinetable = 304;
MEMSTEP_PY_CONST uint32_t kDbgCodeFirstlineno = 312;
MEMSTEP_PY_CONST uint32_t kDbgCodeAdaptive = 344;
MEMSTEP_PY_CONST uint32_t kDbgObType = 360;
MEMSTEP_PY_CONST uint32_t kDbgBytesSize = 520;
MEMSTEP_PY_CONST uint32_t kDbgBytesData = 528;
MEMSTEP_PY_CONST uint32_t kDbgStrState = 544;
MEMSTEP_PY_CONST uint32_t kDbgStrLength = 552;
MEMSTEP_PY_CONST uint32_t kDbgStrAsciiSize = 560;
MEMSTEP_PY_CONST uint32_t kDbgSize313 = 584;  // sizeof(_Py_DebugOffsets), 3.13

#undef MEMSTEP_PY_CONST
#ifdef __cplusplus
}  // namespace memstep::preload::pylayout
#endif

#ifdef __cplusplus
#include <string.h>

namespace memstep::preload::pylayout {

// The layout of a CPython 3.13 process from the `n` bytes of its
// _PyRuntime.debug_offsets (`dbg`): nullptr and *out filled, or why not (a
// static string). Published offsets are used as published; the one field the
// interpreter does not publish (_co_firsttraceable) is taken from kLayout313
// only when the published co_code_adaptive is the header's (the same code
// object layout), else left unknown (0: no frame is then taken as
// incomplete). Pure: tests/preload/pylinetable_test.cc feeds it bytes.
inline const char* Layout313FromDebugOffsets(const uint8_t* dbg, size_t n, MemstepPyLayout* out) {
  if (n < kDbgSize313 || memcmp(dbg, kDebugCookie, sizeof(kDebugCookie)) != 0) {
    return "its _PyRuntime does not start with the debug offsets (no \"xdebugpy\" cookie)";
  }
  auto u64 = [dbg](uint32_t off) {
    uint64_t v;
    memcpy(&v, dbg + off, sizeof(v));
    return v;
  };
  if ((u64(kDbgVersion) & 0xFFFF0000) != kLayout313.version) {
    return "its debug offsets are not those of CPython 3.13";
  }
  if (u64(kDbgFreeThreaded) != 0) return "it is a free-threaded build (no GIL)";
  static const uint32_t kFields[] = {
      kDbgTstateCurrentFrame, kDbgFramePrevious, kDbgFrameExecutable, kDbgFrameInstrPtr,
      kDbgFrameOwner,         kDbgCodeFilename,  kDbgCodeQualname,    kDbgCodeLinetable,
      kDbgCodeFirstlineno,    kDbgCodeAdaptive,  kDbgObType,          kDbgBytesSize,
      kDbgBytesData,          kDbgStrState,      kDbgStrLength,       kDbgStrAsciiSize};
  for (uint32_t f : kFields) {
    if (u64(f) == 0 && f != kDbgFrameExecutable) return "its debug offsets are incomplete";
    if (u64(f) > 4096) return "its debug offsets are out of range";
  }
  MemstepPyLayout l = kLayout313;
  auto o = [&u64](uint32_t off) { return static_cast<uint32_t>(u64(off)); };
  l.tstate_frame = o(kDbgTstateCurrentFrame);
  l.frame_previous = o(kDbgFramePrevious);
  l.frame_code = o(kDbgFrameExecutable);
  l.frame_instr = o(kDbgFrameInstrPtr);
  l.frame_owner = o(kDbgFrameOwner);
  l.code_filename = o(kDbgCodeFilename);
  l.code_name = o(kDbgCodeQualname);
  l.code_linetable = o(kDbgCodeLinetable);
  l.code_firstlineno = o(kDbgCodeFirstlineno);
  l.code_adaptive = o(kDbgCodeAdaptive);
  l.code_basicsize = l.code_adaptive;  // PyCode_Type.tp_basicsize, as in 3.11 and 3.12
  if (l.code_adaptive != kLayout313.code_adaptive) l.code_firsttraceable = 0;
  l.ob_type = o(kDbgObType);
  l.bytes_size = o(kDbgBytesSize);
  l.bytes_data = o(kDbgBytesData);
  l.str_state = o(kDbgStrState);
  l.str_length = o(kDbgStrLength);
  l.str_ascii_data = o(kDbgStrAsciiSize);
  // PyCompactUnicodeObject: the PyASCIIObject, then utf8_length, then utf8.
  l.str_utf8_length = l.str_ascii_data;
  l.str_utf8 = l.str_ascii_data + 8;
  *out = l;
  return nullptr;
}

}  // namespace memstep::preload::pylayout
#endif  // __cplusplus

#endif  // MEMSTEP_PRELOAD_PYFRAMES_LAYOUT_H_
