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
  // The streaming reader over the same bytes: the scan, then one re-read of
  // the bulk events through the reorder window.
  memstep::reader::StreamOptions stream;
  stream.reader = options;
  auto scanned = memstep::reader::ScanTrace(data, size, stream);
  if (scanned.ok()) {
    memstep::reader::EventStream events(data, scanned->data_begin, scanned->data_end, stream);
    memstep::reader::Event e;
    uint64_t n = 0;
    while (events.Next(&e)) ++n;
    // Every bulk record the scan counted comes back (the file did not change).
    if (events.status().ok() && n != scanned->bulk_events) __builtin_trap();
  }
  return 0;
}
