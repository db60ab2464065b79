// CPython line tables: the source line of a bytecode offset, decoded from the
// code object's co_linetable bytes. Pure functions: no allocation, no locks,
// no C++ runtime, async-signal-safe; they read only the `len` bytes given
// (a truncated or corrupt table gives -1 or a wrong line, never a read past
// its end nor an overflow). pyframes.cc calls them at sample time on the line
// table of each frame's code object; tests/preload/pylinetable_test.cc checks
// them against the lines the real interpreters report (fixtures in
// tests/preload/data/pylinetable_3*.txt) and against random mutations.
//
// Both take a byte offset into the code (instruction index * 2, as
// PyCode_Addr2Line does) and return the line, or -1 where the instruction has
// no line (CPython's None), the offset lies past the table or the line would
// be negative or above INT32_MAX (only a corrupt table does that). A negative
// offset (a 3.10 frame that has not started: f_lasti == -1) gives
// co_firstlineno, as PyCode_Addr2Line does.
//
// CPython 3.10 (PEP 626, Objects/lnotab_notes.txt): pairs of bytes
// (bytecode delta: unsigned, line delta: signed). Each pair covers the next
// `bytecode delta` bytes of code; its line is the running line (from
// co_firstlineno) plus `line delta`, or none when the line delta is -128
// (the running line is then unchanged). Pairs of bytecode delta 0 only move
// the running line (a jump of more than 127 lines takes several).
//   Example, co_firstlineno 4: 06 01  08 01  02 80  -> bytes 0..5 line 5,
//   6..13 line 6, 14..15 none.
//
// CPython 3.11 to 3.13 (the location table, Objects/locations.md): entries
// that each start with a byte 1CCCCLLL: LLL + 1 code units (2 bytes each) of
// code, CCCC the form of what follows:
//   0..9    short form: same line, one byte of columns;
//   10..12  one-line form: line + (CCCC - 10), two bytes of columns;
//   13      no columns: a signed varint line delta;
//   14      long form: a signed varint line delta, then varints for the end
//           line delta and the two columns;
//   15      no location: none (the running line is unchanged).
// A varint is 6-bit groups, least significant first, bit 6 set on all but
// the last; a signed varint is a varint v standing for v >> 1, negated when
// v & 1. The running line starts at co_firstlineno.
//   Example, co_firstlineno 4: 80 00  e8 .. ..  f8 -> code unit 0 line 4 (the
//   RESUME), unit 1 line 5, unit 2 none.

#ifndef MEMSTEP_PRELOAD_PYTHON_PYLINETABLE_H_
#define MEMSTEP_PRELOAD_PYTHON_PYLINETABLE_H_

#include <stddef.h>
#include <stdint.h>

namespace memstep::preload::pyline {

inline int ClampLine(int64_t line) {
  return line < -1 || line > INT32_MAX ? -1 : static_cast<int>(line);
}

// CPython 3.10's co_linetable.
inline int Line310(const uint8_t* table, size_t len, int firstlineno, int64_t offset) {
  if (offset < 0) return ClampLine(firstlineno);
  int64_t start = 0;
  int64_t line = firstlineno;  // 64 bits: a corrupt table cannot overflow it
  for (size_t i = 0; i + 1 < len; i += 2) {
    const int64_t end = start + table[i];
    const int ldelta = static_cast<int8_t>(table[i + 1]);
    int64_t cur = -1;
    if (ldelta != -128) {
      line += ldelta;
      cur = line;
    }
    if (offset >= start && offset < end) return ClampLine(cur);
    start = end;
  }
  return -1;
}

// Reads a varint at table[*i] (bounds-checked); false when it runs off the end.
inline bool ReadVarint(const uint8_t* table, size_t len, size_t* i, uint32_t* out) {
  uint32_t v = 0;
  for (unsigned shift = 0; shift < 32; shift += 6) {
    if (*i >= len) return false;
    const uint8_t b = table[(*i)++];
    v |= static_cast<uint32_t>(b & 63) << shift;
    if ((b & 64) == 0) {
      *out = v;
      return true;
    }
  }
  return false;
}

inline bool ReadSignedVarint(const uint8_t* table, size_t len, size_t* i, int* out) {
  uint32_t v;
  if (!ReadVarint(table, len, i, &v)) return false;
  *out = (v & 1) != 0 ? -static_cast<int>(v >> 1) : static_cast<int>(v >> 1);
  return true;
}

// CPython 3.11, 3.12 and 3.13's co_linetable (the location table).
inline int Line311(const uint8_t* table, size_t len, int firstlineno, int64_t offset) {
  if (offset < 0) return ClampLine(firstlineno);
  const int64_t unit = offset / 2;
  int64_t start = 0;
  int64_t line = firstlineno;  // 64 bits: a corrupt table cannot overflow it
  size_t i = 0;
  while (i < len) {
    const uint8_t head = table[i++];
    if ((head & 0x80) == 0) return -1;  // not at an entry's first byte: corrupt
    const int code = (head >> 3) & 15;
    const int64_t end = start + (head & 7) + 1;
    bool none = false;
    if (code == 15) {
      none = true;
    } else if (code == 13 || code == 14) {
      int delta;
      if (!ReadSignedVarint(table, len, &i, &delta)) return -1;
      line += delta;
      if (code == 14) {
        uint32_t skip;
        for (int k = 0; k < 3; ++k) {
          if (!ReadVarint(table, len, &i, &skip)) return -1;
        }
      }
    } else if (code >= 10) {
      line += code - 10;
      i += 2;
    } else {
      i += 1;
    }
    if (unit >= start && unit < end) return none ? -1 : ClampLine(line);
    start = end;
  }
  return -1;
}

}  // namespace memstep::preload::pyline

#endif  // MEMSTEP_PRELOAD_PYTHON_PYLINETABLE_H_
