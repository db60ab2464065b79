// Usable size of a glibc malloc block read from its chunk header, inline.
//
// Contract: only valid for a live block returned by glibc 2.36's allocator
// (the caller checks that the real malloc is libc.so.6's). No call, no lock:
// one load. Layout (malloc/malloc.c): the size field sits 8 bytes before the
// user pointer; its low 3 bits are flags (PREV_INUSE 1, IS_MMAPPED 2,
// NON_MAIN_ARENA 4). malloc_usable_size() returns chunksize - 16 for mmapped
// chunks and chunksize - 8 otherwise (the next chunk's prev_size field is
// usable while the block is in use). Equality with malloc_usable_size() is
// checked by tests/preload/preload_units_test.cc for many sizes.

#ifndef MEMSTEP_PRELOAD_GLIBC_CHUNK_H_
#define MEMSTEP_PRELOAD_GLIBC_CHUNK_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace memstep::preload {

inline constexpr uint64_t kGlibcIsMmapped = 0x2;
inline constexpr uint64_t kGlibcFlagMask = 0x7;

// The chunk's size field, flags included.
inline uint64_t GlibcSizeField(const void* p) {
  uint64_t field;
  memcpy(&field, static_cast<const char*>(p) - 8, sizeof(field));
  return field;
}

// Size of a chunk whose IS_MMAPPED flag is clear: its usable size is 8 bytes
// less (the fast paths test the flag and take the general form below for
// mmapped chunks).
inline uint64_t GlibcHeapChunk(uint64_t field) { return field & ~kGlibcFlagMask; }

inline size_t GlibcUsableSize(const void* p) {
  const uint64_t field = GlibcSizeField(p);
  // chunk - 8, or chunk - 16 when mmapped; branch-free: (field & 2) << 2 is 8
  // exactly when IS_MMAPPED is set.
  uint64_t chunk = field & ~kGlibcFlagMask;
  return static_cast<size_t>(chunk - 8 - ((field & kGlibcIsMmapped) << 2));
}

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_GLIBC_CHUNK_H_
