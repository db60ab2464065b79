/* Checks preload/python/pyframes_layout.h against the installed CPython 3.11
 * headers: every offset memstep reads in place must be the real one. Built
 * only where python3.11-dev's internal headers exist. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#include <stddef.h>
#include <stdio.h>

#include "preload/python/pyframes_layout.h"

static int failures = 0;
#define EXPECT(name, actual)                                                       \
  do {                                                                             \
    if ((size_t)(actual) != (size_t)(name)) {                                      \
      printf("%s: memstep has %zu, CPython %zu\n", #name, (size_t)(name), (size_t)(actual)); \
      ++failures;                                                                  \
    }                                                                              \
  } while (0)

int main(void) {
  EXPECT(kTstateCframe, offsetof(PyThreadState, cframe));
  EXPECT(kCframeCurrentFrame, offsetof(_PyCFrame, current_frame));
  EXPECT(kFrameCode, offsetof(_PyInterpreterFrame, f_code));
  EXPECT(kFramePrevious, offsetof(_PyInterpreterFrame, previous));
  EXPECT(kFramePrevInstr, offsetof(_PyInterpreterFrame, prev_instr));
  EXPECT(kFrameOwner, offsetof(_PyInterpreterFrame, owner));
  EXPECT(kCodeFilename, offsetof(PyCodeObject, co_filename));
  EXPECT(kCodeQualname, offsetof(PyCodeObject, co_qualname));
  EXPECT(kCodeFirstTraceable, offsetof(PyCodeObject, _co_firsttraceable));
  EXPECT(kCodeAdaptive, offsetof(PyCodeObject, co_code_adaptive));
  EXPECT(kAsciiLength, offsetof(PyASCIIObject, length));
  EXPECT(kAsciiState, offsetof(PyASCIIObject, state));
  EXPECT(kAsciiSize, sizeof(PyASCIIObject));
  EXPECT(kCompactUtf8Length, offsetof(PyCompactUnicodeObject, utf8_length));
  EXPECT(kCompactUtf8, offsetof(PyCompactUnicodeObject, utf8));
  EXPECT(kOwnedByGenerator, FRAME_OWNED_BY_GENERATOR);
  EXPECT(kPy311, PY_VERSION_HEX & 0xFFFF0000);
  /* The state bit-fields: set compact and ascii, read the word. */
  PyASCIIObject probe = {0};
  probe.state.compact = 1;
  unsigned int word;
  memcpy(&word, (char*)&probe + kAsciiState, sizeof(word));
  EXPECT(1u << kStateCompactBit, word);
  probe.state.compact = 0;
  probe.state.ascii = 1;
  memcpy(&word, (char*)&probe + kAsciiState, sizeof(word));
  EXPECT(1u << kStateAsciiBit, word);
  if (failures == 0) printf("pyframes layout ok (CPython %s)\n", PY_VERSION);
  return failures == 0 ? 0 : 1;
}
