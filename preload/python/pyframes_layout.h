// CPython 3.11 structure offsets (x86-64) that preload/python/pyframes.cc reads.
// tests/python/pyframes_layout_test.c checks every one against the installed
// CPython headers (built when python3.11-dev is present). Plain constants: no
// Python header is needed to build libmemstep.so.

#ifndef MEMSTEP_PRELOAD_PYFRAMES_LAYOUT_H_
#define MEMSTEP_PRELOAD_PYFRAMES_LAYOUT_H_

#include <stddef.h>

#ifdef __cplusplus
namespace memstep::preload::py311 {
#define MEMSTEP_PY311_CONST inline constexpr size_t
#else
#define MEMSTEP_PY311_CONST static const size_t
#endif

MEMSTEP_PY311_CONST kTstateCframe = 56;        // PyThreadState.cframe
MEMSTEP_PY311_CONST kCframeCurrentFrame = 8;   // _PyCFrame.current_frame
MEMSTEP_PY311_CONST kFrameCode = 32;           // _PyInterpreterFrame.f_code
MEMSTEP_PY311_CONST kFramePrevious = 48;       // _PyInterpreterFrame.previous
MEMSTEP_PY311_CONST kFramePrevInstr = 56;      // _PyInterpreterFrame.prev_instr
MEMSTEP_PY311_CONST kFrameOwner = 69;          // _PyInterpreterFrame.owner
MEMSTEP_PY311_CONST kCodeFilename = 112;       // PyCodeObject.co_filename
MEMSTEP_PY311_CONST kCodeQualname = 128;       // PyCodeObject.co_qualname
MEMSTEP_PY311_CONST kCodeFirstTraceable = 168; // PyCodeObject._co_firsttraceable
MEMSTEP_PY311_CONST kCodeAdaptive = 184;       // PyCodeObject.co_code_adaptive
MEMSTEP_PY311_CONST kAsciiLength = 16;         // PyASCIIObject.length
MEMSTEP_PY311_CONST kAsciiState = 32;          // PyASCIIObject.state
MEMSTEP_PY311_CONST kAsciiSize = 48;           // sizeof(PyASCIIObject): compact ASCII data
MEMSTEP_PY311_CONST kCompactUtf8Length = 48;   // PyCompactUnicodeObject.utf8_length
MEMSTEP_PY311_CONST kCompactUtf8 = 56;         // PyCompactUnicodeObject.utf8
// state bits (little-endian bit-fields): interned:2, kind:3, compact:1, ascii:1.
MEMSTEP_PY311_CONST kStateCompactBit = 5;
MEMSTEP_PY311_CONST kStateAsciiBit = 6;
MEMSTEP_PY311_CONST kOwnedByGenerator = 1;     // FRAME_OWNED_BY_GENERATOR
MEMSTEP_PY311_CONST kPy311 = 0x030B0000;       // Py_Version & 0xFFFF0000

#undef MEMSTEP_PY311_CONST
#ifdef __cplusplus
}  // namespace memstep::preload::py311
#endif

#endif  // MEMSTEP_PRELOAD_PYFRAMES_LAYOUT_H_
