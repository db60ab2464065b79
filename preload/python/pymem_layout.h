// pymalloc's pool header, as CPython 3.10-3.13 lay it out on 64-bit targets
// (Objects/obmalloc.c, struct pool_header; not in any installed header):
//
//   offset  0  union { block* _padding; uint count; } ref  (blocks in use)
//   offset  8  block* freeblock
//   offset 16  pool_header* nextpool
//   offset 24  pool_header* prevpool
//   offset 32  uint arenaindex
//   offset 36  uint szidx          (block size = (szidx + 1) * 16)
//   offset 40  uint nextoffset     (bytes to the next never-used block)
//   offset 44  uint maxnextoffset  (POOL_SIZE - block size)
//   48 bytes, the first block at offset 48 (POOL_OVERHEAD).
//
// The pool of a block is its address rounded down to POOL_SIZE (16 KiB with
// the radix tree, CPython's default since 3.10; 4 KiB without). pymem.cc
// checks all of this against blocks it allocates before hooking anything
// (HeaderMatches); tests/preload checks HeaderMatches and BlockSize.
// Freestanding: no allocation, no C++ runtime.

#ifndef MEMSTEP_PRELOAD_PYTHON_PYMEM_LAYOUT_H_
#define MEMSTEP_PRELOAD_PYTHON_PYMEM_LAYOUT_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

namespace memstep::preload::pymem {

inline constexpr size_t kPoolCount = 0;
inline constexpr size_t kPoolSzidx = 36;
inline constexpr size_t kPoolNextOffset = 40;
inline constexpr size_t kPoolMaxNextOffset = 44;
inline constexpr size_t kPoolHeaderSize = 48;  // == POOL_OVERHEAD
inline constexpr size_t kAlignmentShift = 4;   // ALIGNMENT 16
inline constexpr size_t kSmallRequestThreshold = 512;

// The block size of size class `szidx`.
inline size_t BlockSize(uint32_t szidx) { return (size_t{szidx} + 1) << kAlignmentShift; }

// The size class pymalloc serves a request of `n` bytes (1..512) from.
inline uint32_t SizeClass(size_t n) { return static_cast<uint32_t>((n - 1) >> kAlignmentShift); }

inline uint32_t HeaderU32(const uint8_t* hdr, size_t off) {
  uint32_t v;
  memcpy(&v, hdr + off, sizeof(v));
  return v;
}

// Whether the kPoolHeaderSize bytes `hdr` are the header of a pool of
// `pool_size` bytes that holds, `offset` bytes from its start, a live block
// handed out for a request of `requested` bytes (1..512).
inline bool HeaderMatches(const uint8_t* hdr, size_t pool_size, size_t offset, size_t requested) {
  if (requested == 0 || requested > kSmallRequestThreshold) return false;
  const uint32_t szidx = HeaderU32(hdr, kPoolSzidx);
  if (szidx != SizeClass(requested)) return false;
  const size_t bs = BlockSize(szidx);
  if (offset < kPoolHeaderSize || offset + bs > pool_size) return false;
  if ((offset - kPoolHeaderSize) % bs != 0) return false;
  if (HeaderU32(hdr, kPoolMaxNextOffset) != pool_size - bs) return false;
  const uint32_t next = HeaderU32(hdr, kPoolNextOffset);
  if (next < offset + bs || next > pool_size) return false;
  const uint32_t count = HeaderU32(hdr, kPoolCount);
  return count >= 1 && count <= (pool_size - kPoolHeaderSize) / bs;
}

}  // namespace memstep::preload::pymem

#endif  // MEMSTEP_PRELOAD_PYTHON_PYMEM_LAYOUT_H_
