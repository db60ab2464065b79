// libFuzzer entry point for the trace reader. Build with clang and
// -DMEMSTEP_FUZZ=ON; tests/unit/reader_mutation_test.cc runs the same entry
// point over deterministic mutations so every CI run exercises it.
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
