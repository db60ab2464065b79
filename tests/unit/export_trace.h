// A small deterministic trace for the export tests (export_test.cc,
// report_cli_test.cc): every allocation recorded (interval 0, p = 1), so
// every estimate is exact and the golden files hold round numbers.
//
// pid 42, RANK=3, start 1700000000.000000000 s; module /opt/app/train at
// [0x400000, 0x500000), load bias 0x400000. Before step 0: 10 MiB of model
// (stack 3) and 256 MiB on device 0 (stack 4, cudaMalloc). 40 steps of 1 ms:
//   stage "forward":            64 KiB leaked (stack 1, 3 frames, the leaf
//                               inlined), 1 MiB churn (stack 2)
//   stage "opt;im,\"zer\"":     frees the churn (a name every format must escape)
// RSS = 2 x live. A growth ALERT at step 30; a failed 1 GiB cudaMalloc (out
// of memory) in step 35.

#ifndef MEMSTEP_TESTS_UNIT_EXPORT_TRACE_H_
#define MEMSTEP_TESTS_UNIT_EXPORT_TRACE_H_

#include <cstdint>
#include <vector>

#include "tests/unit/trace_builder.h"

namespace memstep::testing {

inline std::vector<uint8_t> ExportTrace() {
  namespace f = ::memstep::format;
  constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;
  reader::TraceHeaderInfo info;
  info.pid = 42;
  info.start_mono_ns = 0;
  info.start_real_ns = 1700000000000000000ull;
  info.tlvs.push_back({f::kTlvCmdline, std::string("train\0--steps\0"
                                                   "40\0",
                                                   17)});
  info.tlvs.push_back({f::kTlvRankEnv, std::string("RANK=3\0", 7)});
  reader::TraceBuilder b(info);
  b.String(1, "forward");
  b.String(2, "opt;im,\"zer\"");
  b.String(3, "/opt/app/train");
  b.Mapping(1, 0, 0x400000, 0x500000, 0x400000, 3, "");
  b.Stack(1, {0x401010, 0x401020, 0x401030});
  b.Stack(2, {0x402010, 0x401030});
  b.Stack(3, {0x403010});
  b.Stack(4, {0x404010, 0x401030});
  uint64_t allocs = 0, frees = 0;
  auto counters = [&](uint64_t live, uint64_t peak, uint64_t alloc, uint64_t freed) {
    f::Counters c{};
    c.live_bytes = live;
    c.peak_bytes = peak;
    c.alloc_bytes = alloc;
    c.alloc_count = allocs;
    c.free_bytes = freed;
    c.free_count = frees;
    c.rss_bytes = 2 * live;
    return c;
  };
  uint64_t ts = 1000;
  uint64_t addr = 0x10000000;
  uint64_t live = 10 * kMiB, alloc = 10 * kMiB, freed = 0;
  b.Alloc(ts++, 3, addr++, 10 * kMiB);
  allocs = 1;
  b.DevAlloc(ts++, 4, f::kDevDevice, 0, 0xA0000000, 256 * kMiB, f::kApiCudaMalloc);
  for (uint64_t step = 0; step < 40; ++step) {
    ts = 1000000 * (step + 1);
    b.Step(ts, step, 0, counters(live, live, alloc, freed));
    b.Stage(ts + 100000, 1, step, 0, counters(live, live, alloc, freed));
    b.Alloc(ts + 200000, 1, addr++, 64 * kKiB, 0, 0, step, 1);
    const uint64_t churn = addr++;
    b.Alloc(ts + 300000, 2, churn, kMiB, 0, 0, step, 1);
    live += 64 * kKiB + kMiB;
    alloc += 64 * kKiB + kMiB;
    allocs += 2;
    const uint64_t peak = live;
    b.Stage(ts + 400000, 1, step, 1, counters(live, peak, alloc, freed));
    b.Stage(ts + 500000, 2, step, 0, counters(live, peak, alloc, freed));
    b.Free(ts + 600000, churn);
    live -= kMiB;
    freed += kMiB;
    ++frees;
    b.Stage(ts + 700000, 2, step, 1, counters(live, peak, alloc, freed));
    if (step == 35) {
      b.DevFail(ts + 750000, 4, f::kDevDevice, 0, 1024 * kMiB, f::kApiCudaMalloc, 2, step, 1);
    }
    b.Step(ts + 800000, step, 1, counters(live, peak, alloc, freed));
    if (step == 30) b.Alert(ts + 850000, step, f::kAlertGrowth, 64 * kKiB, 32 * kKiB, 0, 1);
  }
  b.Trailer(ts + 900000, counters(live, live + kMiB, alloc, freed), true);
  return b.Finish();
}

}  // namespace memstep::testing

#endif  // MEMSTEP_TESTS_UNIT_EXPORT_TRACE_H_
