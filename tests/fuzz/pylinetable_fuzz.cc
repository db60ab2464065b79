// libFuzzer entry point for CPython's line-table decoders
// (preload/python/pylinetable.h), which the injected library runs at sample
// time on bytes it reads from a live interpreter: they must never read past
// the table, overflow, or return a line other than -1 or a value in
// [0, INT32_MAX]. Built with clang by scripts/fuzz.sh;
// tests/fuzz/fuzz_regress_test.cc runs it over tests/fuzz/regress/pylinetable/
// with GCC in every CI run.
//
// Input: 4 bytes of co_firstlineno, 4 bytes of the byte offset asked for (both
// little-endian, signed), then the table. The table is copied into a buffer
// of exactly its size, so that AddressSanitizer sees any read past its end.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "preload/python/pylinetable.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void CheckLine(int line) { Check(line == -1 || line >= 0); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  int32_t first, offset;
  memcpy(&first, data, 4);
  memcpy(&offset, data + 4, 4);
  std::vector<uint8_t> table(data + 8, data + size);
  using namespace memstep::preload::pyline;  // NOLINT
  const uint8_t* t = table.empty() ? nullptr : table.data();
  CheckLine(Line310(t, table.size(), first, offset));
  CheckLine(Line311(t, table.size(), first, offset));
  // Every offset of the table's span, as the sampler may ask any of them.
  for (int64_t off = -2; off < static_cast<int64_t>(2 * table.size() + 4); off += 2) {
    CheckLine(Line310(t, table.size(), first, off));
    CheckLine(Line311(t, table.size(), first, off));
  }
  return 0;
}
