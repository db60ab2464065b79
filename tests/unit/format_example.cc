// Prints the worked example of docs/format.md: a tiny trace written with the
// real encoder (TraceBuilder over format.h's RecordEncoder), as a hex dump.
// format_example_test checks that docs/format.md shows exactly this dump.

#include <cstdio>
#include <string>

#include "tests/unit/trace_builder.h"

int main() {
  using namespace memstep;
  reader::TraceHeaderInfo info;
  info.pid = 4242;
  info.ppid = 1;
  info.start_mono_ns = 0x1000;
  info.start_real_ns = 0x2000;
  info.sample_interval = 524288;
  info.tlvs = {{format::kTlvCmdline, std::string("a.out\0", 6)}};
  reader::TraceBuilder b(info, format::kCodecRaw);
  b.String(1, "/a.out");
  b.Mapping(1, 0, 0x400000, 0x402000, 0, 1, "");
  b.Stack(1, {0x401136});
  b.Flush(format::kChunkDict);
  b.Alloc(/*ts=*/300, /*stack=*/1, /*addr=*/0x4052a0, /*size=*/100, /*interval=*/524288);
  b.Free(/*ts=*/400, /*addr=*/0x4052a0);
  b.Flush(format::kChunkData);
  b.Trailer(500, format::Counters{100, 1, 100, 1, 0, 100, 0, 0}, true);
  b.Flush(format::kChunkTrailer);
  const std::vector<uint8_t>& bytes = b.Finish();
  for (size_t i = 0; i < bytes.size(); i += 16) {
    printf("%04zx:", i);
    for (size_t j = i; j < i + 16 && j < bytes.size(); ++j) printf(" %02x", bytes[j]);
    printf("\n");
  }
  return 0;
}
