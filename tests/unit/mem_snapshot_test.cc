// Device sampling and memory snapshots in the offline analysis: weighted
// device samples next to counted-only allocations (exact totals, Horvitz-
// Thompson sites), and the MEM_SNAPSHOT rows with what was live by site at
// their moment (mem_snapshot.h), in the report's text and JSON. Planted
// facts, exact where the analysis is exact.

#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "src/analysis/analysis.h"
#include "src/report/report.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"

namespace memstep::analysis {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kT = 8 * kMiB;  // the samples' interval

// Planted (device 0, MiB): step 0 allocates 1 sampled 64 MiB block at stack 1
// (p = 1 - exp(-(64 MiB + 1)/8 MiB)), 10 counted-only 1 MiB blocks, and one
// sampled 1 MiB block at stack 2 (weight 1/p of p = 1 - exp(-(1 MiB+1)/8 MiB));
// host: one 4 KiB sample at stack 3 (T 512 KiB). Then in step 1, stage
// forward: DEV_FAIL of 1 GiB and a MEM_SNAPSHOT (free 100 MiB of 1000 MiB);
// then step 1 frees everything but the 64 MiB, and a signal snapshot follows.
std::vector<uint8_t> Trace() {
  namespace f = format;
  reader::TraceHeaderInfo info;
  info.pid = 7;
  reader::TraceBuilder b(info);
  b.String(1, "forward");
  for (uint64_t s = 1; s <= 4; ++s) b.Stack(s, {0x1000 * s});
  format::Counters host{};
  uint64_t ts = 1;
  b.Step(ts++, 0, 0, host);
  b.Alloc(ts++, 3, 0x5000, 4096, 512 << 10);
  b.DevAlloc(ts++, 1, f::kDevDevice, 0, 0xA0000000, 64 * kMiB, f::kApiCudaMalloc, 0, 0, 0, 1, kT);
  for (uint64_t i = 0; i < 10; ++i) {
    b.DevAlloc(ts++, 0, f::kDevDevice, 0, 0xB0000000 + i * kMiB, kMiB, f::kApiCudaMalloc, 0, 0, 0,
               1, 0, /*sampled=*/false);
  }
  b.DevAlloc(ts++, 2, f::kDevDevice, 0, 0xC0000000, kMiB, f::kApiCudaMalloc, 0, 0, 0, 1, kT);
  b.Step(ts++, 0, 1, host);
  b.Step(ts++, 1, 0, host);
  b.Stage(ts++, 1, 1, 0, host);
  b.DevFail(ts++, 4, f::kDevDevice, 0, 1024 * kMiB, f::kApiCudaMalloc, 2, 1, 1);
  b.MemSnapshot(ts++, f::kMemSnapDeviceOom, 0, 1024 * kMiB, 100 * kMiB, 1000 * kMiB, 1, 1,
                f::kApiCudaMalloc, 2);
  b.Stage(ts++, 1, 1, 1, host);
  for (uint64_t i = 0; i < 10; ++i) {
    b.DevFree(ts++, f::kDevDevice, 0, 0xB0000000 + i * kMiB, kMiB, f::kApiCudaFree);
  }
  b.DevFree(ts++, f::kDevDevice, 0, 0xC0000000, kMiB, f::kApiCudaFree);
  b.DevInfo(ts++, 1, 0, 900 * kMiB, 1000 * kMiB);
  b.Step(ts++, 1, 1, host);
  b.MemSnapshot(ts++, f::kMemSnapSignal, -1, 0, 0, 0, 1);
  b.Trailer(ts++, host, true);
  return b.Finish();
}

double Weight(uint64_t size) {
  return 1 / -std::expm1(-(static_cast<double>(size) + 1) / static_cast<double>(kT));
}

class MemSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::WriteFile(dir_.File("s.trace"), Trace()));
    Options o;
    o.symbolize = false;
    absl::StatusOr<Report> r = AnalyzeRun(dir_.path(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    report_ = *std::move(r);
  }
  const Site* SiteOf(uint64_t stack) const {
    for (const Site& s : report_.sites) {
      if (s.stack_id == stack) return &s;
    }
    return nullptr;
  }
  testing::TempDir dir_;
  Report report_;
};

TEST_F(MemSnapshotTest, TotalsExactSitesWeighted) {
  ASSERT_EQ(report_.processes.size(), 1u);
  const ProcessSummary& p = report_.processes[0];
  ASSERT_EQ(p.devices.size(), 1u);
  EXPECT_EQ(p.devices[0].alloc_bytes, 75 * kMiB);  // every allocation, sampled or not
  EXPECT_EQ(p.devices[0].alloc_count, 12u);
  EXPECT_EQ(p.devices[0].peak_bytes, 75 * kMiB);
  EXPECT_EQ(p.devices[0].live_bytes_end, 64 * kMiB);
  const Site* big = SiteOf(1);
  const Site* small = SiteOf(2);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(big->samples, 1u);
  EXPECT_NEAR(big->live_bytes_end, 64.0 * kMiB * Weight(64 * kMiB), 1);
  EXPECT_NEAR(small->alloc_bytes, 1.0 * kMiB * Weight(kMiB), 1);
  EXPECT_NEAR(small->alloc_count, Weight(kMiB), 1e-9);
  EXPECT_EQ(small->live_bytes_end, 0);
  // Sampled sites have intervals around their estimate.
  EXPECT_LE(big->live_bytes_end_low, big->live_bytes_end);
  EXPECT_GE(big->live_bytes_end_high, big->live_bytes_end);
  // The counted-only allocations are in no site.
  EXPECT_EQ(SiteOf(0), nullptr);
}

TEST_F(MemSnapshotTest, SnapshotRows) {
  ASSERT_EQ(report_.memory_snapshots.size(), 2u);
  const MemorySnapshot& oom = report_.memory_snapshots[0];
  EXPECT_EQ(oom.cause, "device_oom");
  EXPECT_TRUE(oom.out_of_memory);
  EXPECT_EQ(oom.step, 1u);
  EXPECT_EQ(oom.stage, "forward");
  EXPECT_EQ(oom.device, 0);
  EXPECT_EQ(oom.requested, 1024 * kMiB);
  EXPECT_EQ(oom.api, "cudaMalloc");
  EXPECT_EQ(oom.free_bytes, 100 * kMiB);
  EXPECT_EQ(oom.total_bytes, 1000 * kMiB);
  EXPECT_EQ(oom.free_source, "moment");
  EXPECT_EQ(oom.device_resident_bytes, 75 * kMiB);  // exact: the 64, the ten and the sampled 1
  ASSERT_EQ(oom.device_sites.size(), 2u);
  EXPECT_EQ(oom.device_sites[0].site_id, SiteOf(1)->id);
  EXPECT_NEAR(oom.device_sites[0].live_bytes, 64.0 * kMiB * Weight(64 * kMiB), 1);
  EXPECT_EQ(oom.device_sites[1].site_id, SiteOf(2)->id);
  ASSERT_EQ(oom.host_sites.size(), 1u);
  EXPECT_EQ(oom.host_sites[0].site_id, SiteOf(3)->id);
  EXPECT_GT(oom.host_live_bytes, 4096);

  const MemorySnapshot& sig = report_.memory_snapshots[1];
  EXPECT_EQ(sig.cause, "signal");
  EXPECT_FALSE(sig.out_of_memory);
  EXPECT_EQ(sig.device, 0);  // from the last DEV_INFO
  EXPECT_EQ(sig.free_source, "step_end");
  EXPECT_EQ(sig.free_bytes, 900 * kMiB);
  EXPECT_EQ(sig.device_resident_bytes, 64 * kMiB);
  ASSERT_EQ(sig.device_sites.size(), 1u);
}

TEST_F(MemSnapshotTest, TextAndJson) {
  report::ReportOptions o;
  const std::string text = report::FormatText(report_, o);
  EXPECT_NE(text.find("out of memory at step 1, stage forward, requested 1.00 GiB "
                      "(1,073,741,824 bytes), free 100 MiB of 1000 MiB: top sites ..."),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("memory snapshot at step 1, stage -, free 900 MiB of 1000 MiB (at the last "
                      "step end)"),
            std::string::npos)
      << text;
  const std::string json = report::FormatJson(report_, o);
  EXPECT_NE(json.find("\"memory_snapshots\":[{"), std::string::npos);
  EXPECT_NE(json.find("\"cause\":\"device_oom\""), std::string::npos);
  EXPECT_NE(json.find("\"free_source\":\"step_end\""), std::string::npos);
}

}  // namespace
}  // namespace memstep::analysis
