// libFuzzer entry point for the trace reader. Built with clang by
// scripts/fuzz.sh (-DMEMSTEP_FUZZ=ON), which runs it in CI over a seed corpus
// of real traces; tests/unit/reader_mutation_test.cc runs the same entry point
// over deterministic mutations, and tests/fuzz/fuzz_regress_test.cc over
// tests/fuzz/regress/reader/, with GCC in every CI run.
#include <cstddef>
#include <cstdint>

#include "src/reader/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  memstep::reader::ReaderOptions options;
  options.max_records = 1 << 20;
  // The first byte picks CRC checking on or off: off lets mutations reach
  // the decompressor and the record decoder.
  if (size > 0) {
    options.verify_crc = (data[0] & 1) == 0;
    ++data;
    --size;
  }
  auto trace = memstep::reader::ParseTrace(data, size, options);
  if (trace.ok()) {
    // Touch what the analysis touches.
    for (const auto& e : trace->events) (void)trace->String(e.str);
  }
  return 0;
}
