// A planted trace with device memory, shared by device_analysis_test.cc and
// report_cli_test.cc. Every number below is exact and asserted by the tests.
//
// pid 9, 60 steps of 0.5 s (step s begins at s seconds). Device 0 (MiB):
//   before step 0   model 100 (stack 1, cudaMalloc), device 1: 10 (stack 8),
//                   pinned host 64 (stack 4, cudaHostAlloc), host heap 1 (stack 9)
//   forward         activations 30 (stack 2; 200 in step 25), leak 2 (stack 3, never freed)
//   backward        pool 1 (stack 6, cudaMallocAsync), then activations and pool freed;
//                   step 10: VMM 20 (stack 5, cuMemCreate handle 0x77), released in step 11
//   step end        counters torch.cuda:0.*: allocated = live, reserved = live + 8,
//                   inactive_split 2, requested = live - 1, num_alloc_retries = s / 10,
//                   num_ooms 0 (1 from step 50); step 30 also pushes allocated = 1 early
//                   (the last value before STEP end wins)
//   after step end  DEV_INFO device 0: total 80 GiB, used = live + 500, pool 4 reserved, 0 used
//   failures        step 50 backward: cudaMalloc 4 GiB (stack 7, error 2);
//                   step 55 forward: cuMemAlloc_v2 8 GiB (stack 3, error 2)
// Resident bytes of device 0: live at the end of step s = 100 + 2 (s + 1) (+20 in step
// 10); peak in step s = 100 + 2 s + act + 3 (+20 in step 11), the run's peak 353 MiB
// in step 25 (backward), the forward peak 352 MiB in step 25.

#ifndef MEMSTEP_TESTS_UNIT_DEVICE_TRACE_H_
#define MEMSTEP_TESTS_UNIT_DEVICE_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "src/format/format.h"
#include "tests/unit/trace_builder.h"

namespace memstep::testing {

inline constexpr uint64_t kDevMiB = 1024 * 1024;
inline constexpr uint64_t kDevGiB = 1024 * kDevMiB;
inline constexpr int kDevSteps = 60;
inline constexpr uint64_t kDevTotal = 80 * kDevGiB;
inline constexpr uint64_t kDevContext = 500 * kDevMiB;

// Activations of step s.
inline uint64_t PlantedActivations(uint64_t s) { return (s == 25 ? 200 : 30) * kDevMiB; }

// Device 0 resident bytes live at the end of step s.
inline uint64_t PlantedDeviceLiveEnd(uint64_t s) {
  return (100 + 2 * (s + 1) + (s == 10 ? 20 : 0)) * kDevMiB;
}

// Device 0 resident peak within step s (in backward), and within forward.
inline uint64_t PlantedDevicePeak(uint64_t s) {
  return (100 + 2 * s + 3 + (s == 11 ? 20 : 0)) * kDevMiB + PlantedActivations(s);
}
inline uint64_t PlantedForwardPeak(uint64_t s) { return PlantedDevicePeak(s) - kDevMiB; }

inline std::vector<uint8_t> PlantedDeviceTrace() {
  namespace f = format;
  reader::TraceHeaderInfo info;
  info.pid = 9;
  reader::TraceBuilder b(info);
  b.String(1, "forward");
  b.String(2, "backward");
  const char* const kStats[] = {"allocated_bytes", "reserved_bytes",    "inactive_split_bytes",
                                "requested_bytes", "num_alloc_retries", "num_ooms"};
  for (uint64_t i = 0; i < 6; ++i) b.String(10 + i, std::string("torch.cuda:0.") + kStats[i]);
  for (uint64_t s = 1; s <= 9; ++s) b.Stack(s, {0x1000 * s});
  format::Counters host{};
  host.alloc_bytes = host.live_bytes = host.peak_bytes = kDevMiB;
  uint64_t ts = 1;
  b.Alloc(ts++, 9, 0x5000, kDevMiB);
  b.DevAlloc(ts++, 1, f::kDevDevice, 0, 0xA0000000, 100 * kDevMiB, f::kApiCudaMalloc);
  b.DevAlloc(ts++, 8, f::kDevDevice, 1, 0xB0000000, 10 * kDevMiB, f::kApiCudaMalloc);
  b.DevAlloc(ts++, 4, f::kDevPinnedHost, -1, 0x7f0000000000, 64 * kDevMiB, f::kApiCudaHostAlloc);
  uint64_t addr = 0xC0000000;
  for (uint64_t s = 0; s < kDevSteps; ++s) {
    ts = s * 1000000000 + 1;
    b.Step(ts++, s, 0, host);
    if (s == 30) b.Counter(ts++, 10, 1);
    b.Stage(ts++, 1, s, 0, host);
    const uint64_t act = addr++;
    b.DevAlloc(ts++, 2, f::kDevDevice, 0, act, PlantedActivations(s), f::kApiCudaMalloc, 0, s, 1);
    b.DevAlloc(ts++, 3, f::kDevDevice, 0, addr++, 2 * kDevMiB, f::kApiCudaMalloc, 0, s, 1);
    if (s == 55) b.DevFail(ts++, 3, f::kDevDevice, 0, 8 * kDevGiB, f::kApiCuMemAlloc, 2, s, 1);
    b.Stage(ts++, 1, s, 1, host);
    b.Stage(ts++, 2, s, 0, host);
    const uint64_t pool = addr++;
    b.DevAlloc(ts++, 6, f::kDevPool, 0, pool, kDevMiB, f::kApiCudaMallocAsync, 0, s, 2);
    if (s == 50) b.DevFail(ts++, 7, f::kDevDevice, 0, 4 * kDevGiB, f::kApiCudaMalloc, 2, s, 2);
    b.DevFree(ts++, f::kDevDevice, 0, act, PlantedActivations(s), f::kApiCudaFree);
    b.DevFree(ts++, f::kDevPool, 0, pool, kDevMiB, f::kApiCudaFreeAsync);
    if (s == 10)
      b.DevAlloc(ts++, 5, f::kDevVmm, 0, 0x77, 20 * kDevMiB, f::kApiCuMemCreate, 0, s, 2);
    if (s == 11) b.DevFree(ts++, f::kDevVmm, 0, 0x77, 20 * kDevMiB, f::kApiCuMemRelease);
    b.Stage(ts++, 2, s, 1, host);
    const int64_t live = static_cast<int64_t>(PlantedDeviceLiveEnd(s));
    const int64_t mib = static_cast<int64_t>(kDevMiB);
    b.Counter(ts++, 10, live);
    b.Counter(ts++, 11, live + 8 * mib);
    b.Counter(ts++, 12, 2 * mib);
    b.Counter(ts++, 13, live - mib);
    b.Counter(ts++, 14, static_cast<int64_t>(s / 10));
    b.Counter(ts++, 15, s >= 50 ? 1 : 0);
    b.Step(s * 1000000000 + 500000001, s, 1, host);
    ts = s * 1000000000 + 500000002;
    b.DevInfo(ts++, s, 0, kDevTotal - (PlantedDeviceLiveEnd(s) + kDevContext), kDevTotal,
              4 * kDevMiB, 0);
  }
  b.Counter(ts++, 10, 7);  // after the last step: belongs to no step
  return b.Finish();
}

}  // namespace memstep::testing

#endif  // MEMSTEP_TESTS_UNIT_DEVICE_TRACE_H_
