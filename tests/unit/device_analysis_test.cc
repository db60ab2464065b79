// Device memory in the offline analysis and the report: the exact replay
// (device_replay.h), per-step, per-stage and per-device figures, device call
// sites and their growth, failed allocations, DEV_INFO and PyTorch counters,
// the device gates, and the text and JSON sections. Planted facts, exact to
// the byte (tests/unit/device_trace.h).

#include "src/analysis/device_analysis.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/analysis/analysis.h"
#include "src/analysis/device_replay.h"
#include "src/analysis/gates.h"
#include "src/report/report.h"
#include "tests/unit/device_trace.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"

namespace memstep::analysis {
namespace {

using ::testing::HasSubstr;
using testing::kDevGiB;
using testing::kDevMiB;
using testing::kDevSteps;
using ::testing::Not;
using testing::PlantedActivations;
using testing::PlantedDeviceLiveEnd;
using testing::PlantedDevicePeak;
using testing::PlantedForwardPeak;
constexpr uint64_t kMiB = kDevMiB;

// --- DeviceReplay ------------------------------------------------------------

reader::Event DevAlloc(uint8_t kind, int32_t device, uint64_t addr, uint64_t size, uint64_t stack) {
  reader::Event e;
  e.tag = format::kTagDevAlloc;
  e.kind = kind;
  e.device = device;
  e.addr = addr;
  e.size = size;
  e.stack = stack;
  e.api = format::kApiCudaMalloc;
  e.sampled = 1;  // p = 1: every allocation a sample, as the sites below expect
  return e;
}

reader::Event DevFree(uint8_t kind, int32_t device, uint64_t addr, uint64_t size) {
  reader::Event e = DevAlloc(kind, device, addr, size, 0);
  e.tag = format::kTagDevFree;
  return e;
}

const DeviceReplay::SiteAcc* FindSite(const DeviceReplay& r, uint8_t kind, uint64_t stack) {
  for (const auto& s : r.sites()) {
    if (s.key.kind == kind && s.key.stack == stack) return &s;
  }
  return nullptr;
}

TEST(DeviceReplayTest, WorkedExampleOfTheHeader) {
  DeviceReplay r;
  ASSERT_TRUE(r.Apply(DevAlloc(format::kDevDevice, 0, 0xA, 8 * kMiB, 5)));
  EXPECT_EQ(r.live(format::kDevDevice, 0), 8 * kMiB);
  EXPECT_EQ(r.resident(0), 8 * kMiB);
  r.Apply(DevAlloc(format::kDevPinnedHost, -1, 0xB, 2 * kMiB, 6));
  EXPECT_EQ(r.pinned(), 2 * kMiB);
  EXPECT_EQ(r.resident_total(), 8 * kMiB);  // pinned host memory is not on the device
  r.Apply(DevAlloc(format::kDevVmm, 0, 1, 20 * kMiB, 7));
  EXPECT_EQ(r.resident(0), 28 * kMiB);
  // The same numeric value as the VMM handle, another kind: another allocation.
  r.Apply(DevAlloc(format::kDevDevice, 0, 1, 4 * kMiB, 5));
  EXPECT_EQ(r.resident(0), 32 * kMiB);
  r.Apply(DevFree(format::kDevDevice, 0, 0xA, 8 * kMiB));
  EXPECT_EQ(r.resident(0), 24 * kMiB);
  EXPECT_EQ(FindSite(r, format::kDevDevice, 5)->live_bytes, 4 * kMiB);
  EXPECT_EQ(FindSite(r, format::kDevDevice, 5)->live_count, 1u);
  r.Apply(DevFree(format::kDevVmm, 0, 1, 20 * kMiB));
  EXPECT_EQ(r.resident(0), 4 * kMiB);
  EXPECT_EQ(FindSite(r, format::kDevVmm, 7)->live_bytes, 0u);
  // Never seen, size recorded: applied to (device, 0), floored at 0.
  r.Apply(DevFree(format::kDevDevice, 0, 0xBB, 3 * kMiB));
  EXPECT_EQ(r.resident(0), 1 * kMiB);
  EXPECT_EQ(FindSite(r, format::kDevDevice, 5)->live_bytes, 4 * kMiB);  // no site to charge
  r.Apply(DevFree(format::kDevDevice, 0, 0xBC, 100 * kMiB));
  EXPECT_EQ(r.resident(0), 0u);
  EXPECT_EQ(r.unmatched_frees(), 2u);
  // Never seen, no size: ignored.
  r.Apply(DevFree(format::kDevDevice, 0, 0xCC, 0));
  EXPECT_EQ(r.ignored_frees(), 1u);
  // Alloc, free, alloc/free traffic of device 0: live = alloc - free.
  const DeviceReplay::Traffic& t = r.devices().at(0);
  EXPECT_EQ(t.alloc_bytes - t.free_bytes, r.resident(0));
  EXPECT_EQ(t.alloc_count, 3u);
}

TEST(DeviceReplayTest, ReallocatedAddressAndFreeOnAnotherDevice) {
  DeviceReplay r;
  r.Apply(DevAlloc(format::kDevDevice, 1, 0xD, 4 * kMiB, 3));
  r.Apply(DevAlloc(format::kDevDevice, 1, 0xD, 6 * kMiB, 3));  // its FREE was lost
  EXPECT_EQ(r.resident(1), 6 * kMiB);
  EXPECT_EQ(FindSite(r, format::kDevDevice, 3)->alloc_count, 2u);
  EXPECT_EQ(FindSite(r, format::kDevDevice, 3)->live_count, 1u);
  // The free names device -1 (unknown): the allocation's own device is used.
  r.Apply(DevFree(format::kDevDevice, -1, 0xD, 6 * kMiB));
  EXPECT_EQ(r.resident(1), 0u);
  EXPECT_EQ(r.resident(-1), 0u);
  EXPECT_EQ(r.unmatched_frees(), 0u);
  // Managed and pool memory are resident; unknown kinds count nowhere.
  r.Apply(DevAlloc(format::kDevManaged, 1, 0xE, kMiB, 4));
  r.Apply(DevAlloc(format::kDevPool, 1, 0xF, kMiB, 4));
  r.Apply(DevAlloc(9, 1, 0x10, 50 * kMiB, 4));
  EXPECT_EQ(r.resident(1), 2 * kMiB);
  EXPECT_EQ(r.sites().size(), 4u);
  reader::Event step;
  step.tag = format::kTagStep;
  EXPECT_FALSE(r.Apply(step));
}

TEST(TorchCounterTest, ParseTorchCounter) {
  int32_t device = -5;
  std::string stat;
  ASSERT_TRUE(ParseTorchCounter("torch.cuda:0.allocated_bytes", &device, &stat));
  EXPECT_EQ(device, 0);
  EXPECT_EQ(stat, "allocated_bytes");
  ASSERT_TRUE(ParseTorchCounter("torch.cuda:12.num_ooms", &device, &stat));
  EXPECT_EQ(device, 12);
  EXPECT_EQ(stat, "num_ooms");
  for (const char* bad : {"torch.cuda:.x", "torch.cuda:0.", "torch.cuda:a.x", "torch.cuda:0", "rss",
                          "torch.cuda:-1.x", "torch.cuda:99999999999.x"}) {
    EXPECT_FALSE(ParseTorchCounter(bad, &device, &stat)) << bad;
  }
}

// --- The planted device trace -------------------------------------------------

class DeviceAnalysisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::WriteFile(dir_.File("d.trace"), testing::PlantedDeviceTrace()));
    options_.symbolize = false;
    options_.memory_limit = 1024 * kMiB;
    absl::StatusOr<Report> r = AnalyzeRun(dir_.path(), options_);
    ASSERT_TRUE(r.ok()) << r.status();
    report_ = *std::move(r);
  }

  const Site* SiteOf(SiteKind kind, uint64_t stack) const {
    for (const Site& s : report_.sites) {
      if (s.kind == kind && s.stack_id == stack) return &s;
    }
    return nullptr;
  }

  testing::TempDir dir_;
  Options options_;
  Report report_;
};

TEST_F(DeviceAnalysisTest, StepRowsAreExact) {
  ASSERT_EQ(report_.steps.size(), static_cast<size_t>(kDevSteps));
  for (uint64_t s = 0; s < kDevSteps; ++s) {
    const StepRow& row = report_.steps[s];
    SCOPED_TRACE(s);
    EXPECT_EQ(row.live_bytes_end, kMiB);  // the host columns are the host's
    ASSERT_EQ(row.devices.size(), 2u);
    const DeviceStep& d0 = row.devices[0];
    EXPECT_EQ(d0.device, 0);
    EXPECT_EQ(d0.live_bytes_end, PlantedDeviceLiveEnd(s));
    EXPECT_EQ(d0.peak_bytes, PlantedDevicePeak(s));
    EXPECT_EQ(d0.stage_peaks.at("forward"), PlantedForwardPeak(s));
    EXPECT_EQ(d0.stage_peaks.at("backward"), PlantedDevicePeak(s));
    EXPECT_EQ(row.devices[1].device, 1);
    EXPECT_EQ(row.devices[1].live_bytes_end, 10 * kMiB);
    EXPECT_EQ(row.devices[1].peak_bytes, 10 * kMiB);
    EXPECT_EQ(row.device_live_bytes_end, PlantedDeviceLiveEnd(s) + 10 * kMiB);
    EXPECT_EQ(row.device_peak_bytes, PlantedDevicePeak(s) + 10 * kMiB);
    EXPECT_EQ(row.pinned_host_live_bytes_end, 64 * kMiB);
    EXPECT_EQ(row.pinned_host_peak_bytes, 64 * kMiB);
    // Activations, the leak and the pool block; the VMM handle in step 10.
    EXPECT_EQ(d0.alloc_count, s == 10 ? 4u : 3u);
    EXPECT_EQ(d0.alloc_bytes, PlantedActivations(s) + 3 * kMiB + (s == 10 ? 20 * kMiB : 0));
    EXPECT_EQ(d0.free_count, s == 11 ? 3u : 2u);
    EXPECT_EQ(d0.free_bytes, PlantedActivations(s) + kMiB + (s == 11 ? 20 * kMiB : 0));
    EXPECT_EQ(d0.failures, s == 50 || s == 55 ? 1u : 0u);
    EXPECT_EQ(d0.peak_by_kind.at("device_pool"), kMiB);
    EXPECT_EQ(d0.live_by_kind.at("device_pool"), 0u);
  }
  EXPECT_EQ(report_.steps[10].devices[0].live_by_kind.at("device_vmm"), 20 * kMiB);
  EXPECT_EQ(report_.steps[11].devices[0].peak_by_kind.at("device_vmm"), 20 * kMiB);
  EXPECT_EQ(report_.steps[11].devices[0].live_by_kind.at("device_vmm"), 0u);
  EXPECT_EQ(report_.steps[9].devices[0].live_by_kind.count("device_vmm"), 0u);  // not seen yet
}

TEST_F(DeviceAnalysisTest, DriverInfoAndTorchCountersPerStep) {
  for (uint64_t s = 0; s < kDevSteps; ++s) {
    SCOPED_TRACE(s);
    const DeviceStep& d0 = report_.steps[s].devices[0];
    ASSERT_TRUE(d0.has_info);
    EXPECT_EQ(d0.driver_total_bytes, testing::kDevTotal);
    EXPECT_EQ(d0.driver_used_bytes, PlantedDeviceLiveEnd(s) + testing::kDevContext);
    EXPECT_EQ(d0.driver_free_bytes, testing::kDevTotal - d0.driver_used_bytes);
    EXPECT_EQ(d0.pool_reserved_bytes, 4 * kMiB);
    EXPECT_EQ(d0.pool_used_bytes, 0u);
    const TorchCudaStats& t = d0.torch;
    const int64_t live = static_cast<int64_t>(PlantedDeviceLiveEnd(s));
    EXPECT_EQ(t.allocated_bytes, live);  // step 30: the last value before STEP end
    EXPECT_EQ(t.reserved_bytes, live + 8 * static_cast<int64_t>(kMiB));
    EXPECT_EQ(t.cache_slack(), 8 * static_cast<int64_t>(kMiB));
    EXPECT_EQ(t.inactive_split_bytes, 2 * static_cast<int64_t>(kMiB));
    EXPECT_EQ(t.requested_bytes, live - static_cast<int64_t>(kMiB));
    EXPECT_EQ(t.num_alloc_retries, static_cast<int64_t>(s / 10));
    EXPECT_EQ(t.alloc_retries_in_step, s > 0 && s % 10 == 0 ? 1 : 0);
    EXPECT_EQ(t.num_ooms, s >= 50 ? 1 : 0);
    EXPECT_EQ(t.ooms_in_step, s == 50 ? 1 : 0);
    EXPECT_EQ(t.allocated_bytes_peak, -1);  // not pushed
    const DeviceStep& d1 = report_.steps[s].devices[1];
    EXPECT_FALSE(d1.has_info);
    EXPECT_FALSE(d1.torch.any());
  }
}

TEST_F(DeviceAnalysisTest, DeviceSummariesGrowthAndProjection) {
  ASSERT_EQ(report_.processes.size(), 1u);
  const ProcessSummary& p = report_.processes[0];
  EXPECT_TRUE(p.has_device_data());
  EXPECT_EQ(p.device_peak_bytes, PlantedDevicePeak(25));
  EXPECT_EQ(p.device_peak_bytes, 353 * kMiB);
  EXPECT_EQ(p.pinned_host_peak_bytes, 64 * kMiB);
  EXPECT_EQ(p.pinned_host_live_bytes_end, 64 * kMiB);
  EXPECT_EQ(p.device_failures, 2u);
  EXPECT_EQ(p.device_unmatched_frees, 0u);
  EXPECT_EQ(p.device_ignored_frees, 0u);
  EXPECT_EQ(p.peak_bytes, kMiB);  // the host peak is the host's
  ASSERT_EQ(p.devices.size(), 2u);
  const DeviceSummary& d0 = p.devices[0];
  EXPECT_EQ(d0.device, 0);
  EXPECT_EQ(d0.peak_bytes, 353 * kMiB);
  EXPECT_EQ(d0.peak_step, 25);
  EXPECT_NEAR(d0.peak_time_s, 25.0, 1e-6);
  EXPECT_EQ(d0.live_bytes_end, PlantedDeviceLiveEnd(59));
  EXPECT_EQ(d0.peak_by_kind.at("device"), 352 * kMiB);
  EXPECT_EQ(d0.peak_by_kind.at("device_vmm"), 20 * kMiB);
  EXPECT_EQ(d0.peak_by_kind.at("device_pool"), kMiB);
  EXPECT_EQ(d0.live_by_kind_end.at("device"), 220 * kMiB);
  EXPECT_EQ(d0.alloc_count, 1u + 3 * kDevSteps + 1);
  EXPECT_EQ(d0.free_count, 2u * kDevSteps + 1);
  EXPECT_EQ(d0.alloc_bytes - d0.free_bytes, d0.live_bytes_end);
  EXPECT_EQ(d0.failures, 2u);
  EXPECT_EQ(d0.total_bytes, testing::kDevTotal);
  EXPECT_EQ(d0.used_bytes_end, 720 * kMiB);
  EXPECT_EQ(d0.live_growth.cls, GrowthClass::kLeak) << d0.live_growth.reason;
  EXPECT_DOUBLE_EQ(d0.live_growth.slope, 2.0 * kMiB);
  // (80 GiB - 720 MiB used) / 2 MiB per step; steps of 0.5 s.
  EXPECT_DOUBLE_EQ(d0.steps_to_limit, 40600);
  EXPECT_DOUBLE_EQ(d0.seconds_to_limit, 20300);
  const DeviceSummary& d1 = p.devices[1];
  EXPECT_EQ(d1.peak_bytes, 10 * kMiB);
  EXPECT_EQ(d1.peak_step, -1);  // allocated before the first step
  EXPECT_EQ(d1.total_bytes, 0u);
  EXPECT_NE(d1.live_growth.cls, GrowthClass::kLeak);
  EXPECT_EQ(d1.steps_to_limit, -1);
}

TEST_F(DeviceAnalysisTest, DeviceSitesAreExact) {
  EXPECT_EQ(report_.sites.size(), 8u);  // 7 device sites and the host one
  const Site* leak = SiteOf(SiteKind::kDevice, 3);
  ASSERT_NE(leak, nullptr);
  EXPECT_EQ(leak->device, 0);
  EXPECT_EQ(leak->api, "cudaMalloc");
  EXPECT_EQ(leak->samples, 60u);
  EXPECT_EQ(leak->live_bytes_end, 120.0 * kMiB);
  EXPECT_EQ(leak->live_count_end, 60.0);
  EXPECT_EQ(leak->live_bytes_at_peak, 52.0 * kMiB);  // 26 leaked by step 25's backward
  for (uint64_t s = 0; s < kDevSteps; ++s) {
    EXPECT_EQ(leak->live_bytes_by_step[s], 2.0 * (s + 1) * kMiB) << s;
  }
  EXPECT_EQ(leak->growth.cls, GrowthClass::kLeak) << leak->growth.reason;
  EXPECT_DOUBLE_EQ(leak->growth.slope, 2.0 * kMiB);
  EXPECT_DOUBLE_EQ(leak->steps_to_limit, 40600);
  EXPECT_EQ(leak->id, 1u);  // the largest live at the end

  const Site* act = SiteOf(SiteKind::kDevice, 2);
  ASSERT_NE(act, nullptr);
  EXPECT_EQ(act->alloc_bytes, static_cast<double>(59 * 30 * kMiB + 200 * kMiB));
  EXPECT_EQ(act->live_bytes_end, 0.0);
  EXPECT_EQ(act->live_bytes_at_peak, 200.0 * kMiB);
  EXPECT_EQ(act->growth.cls, GrowthClass::kNoTrend);
  EXPECT_EQ(SiteOf(SiteKind::kDevice, 1)->live_bytes_at_peak, 100.0 * kMiB);
  EXPECT_EQ(SiteOf(SiteKind::kDevice, 1)->growth.cls, GrowthClass::kNoTrend);

  const Site* vmm = SiteOf(SiteKind::kDeviceVmm, 5);
  ASSERT_NE(vmm, nullptr);
  EXPECT_EQ(vmm->api, "cuMemCreate");
  EXPECT_EQ(vmm->live_bytes_by_step[10], 20.0 * kMiB);
  EXPECT_EQ(vmm->live_bytes_by_step[11], 0.0);
  EXPECT_EQ(vmm->live_bytes_at_peak, 0.0);
  const Site* pool = SiteOf(SiteKind::kDevicePool, 6);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->api, "cudaMallocAsync");
  EXPECT_EQ(pool->live_bytes_at_peak, 1.0 * kMiB);  // the run's peak is inside backward
  const Site* pinned = SiteOf(SiteKind::kPinnedHost, 4);
  ASSERT_NE(pinned, nullptr);
  EXPECT_EQ(pinned->device, -1);
  EXPECT_EQ(pinned->live_bytes_at_peak, 64.0 * kMiB);
  EXPECT_EQ(pinned->api, "cudaHostAlloc");
  const Site* other = SiteOf(SiteKind::kDevice, 8);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(other->device, 1);
  EXPECT_EQ(other->live_bytes_at_peak, 10.0 * kMiB);
  const Site* host = SiteOf(SiteKind::kHost, 9);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->device, -1);
  EXPECT_EQ(host->live_bytes_end, 1.0 * kMiB);
}

uint64_t Median(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;  // even count
}

TEST_F(DeviceAnalysisTest, StagePeaksPerDevice) {
  ASSERT_EQ(report_.stage_peaks.size(), 6u);
  EXPECT_EQ(report_.stage_peaks[0].kind, SiteKind::kHost);
  EXPECT_EQ(report_.stage_peaks[1].kind, SiteKind::kHost);
  const StagePeak& bwd0 = report_.stage_peaks[2];
  const StagePeak& bwd1 = report_.stage_peaks[3];
  const StagePeak& fwd0 = report_.stage_peaks[4];
  EXPECT_EQ(bwd0.stage, "backward");
  EXPECT_EQ(bwd0.kind, SiteKind::kDevice);
  EXPECT_EQ(bwd0.device, 0);
  EXPECT_EQ(bwd1.device, 1);
  EXPECT_EQ(fwd0.stage, "forward");
  EXPECT_EQ(fwd0.device, 0);

  std::vector<uint64_t> fwd, bwd;
  for (uint64_t s = 0; s < kDevSteps; ++s) {
    fwd.push_back(PlantedForwardPeak(s));
    bwd.push_back(PlantedDevicePeak(s));
  }
  EXPECT_EQ(fwd0.peak_bytes_max, 352 * kMiB);
  EXPECT_EQ(fwd0.step_of_max, 25u);
  EXPECT_EQ(fwd0.peak_bytes_median, Median(fwd));
  EXPECT_EQ(fwd0.steps, static_cast<uint64_t>(kDevSteps));
  EXPECT_EQ(fwd0.top_source, "exact");
  ASSERT_EQ(fwd0.top_sites.size(), 3u);  // the pool block is not live in forward
  EXPECT_EQ(fwd0.top_sites[0].site_id, SiteOf(SiteKind::kDevice, 2)->id);
  EXPECT_EQ(fwd0.top_sites[0].live_bytes, 200.0 * kMiB);
  EXPECT_EQ(fwd0.top_sites[1].stack_id, 1u);
  EXPECT_EQ(fwd0.top_sites[1].live_bytes, 100.0 * kMiB);
  EXPECT_EQ(fwd0.top_sites[2].stack_id, 3u);
  EXPECT_EQ(fwd0.top_sites[2].live_bytes, 52.0 * kMiB);
  EXPECT_EQ(fwd0.top_sites[2].live_count, 26.0);

  EXPECT_EQ(bwd0.peak_bytes_max, 353 * kMiB);
  EXPECT_EQ(bwd0.step_of_max, 25u);
  EXPECT_EQ(bwd0.peak_bytes_median, Median(bwd));
  ASSERT_EQ(bwd0.top_sites.size(), 4u);
  EXPECT_EQ(bwd0.top_sites[3].site_id, SiteOf(SiteKind::kDevicePool, 6)->id);
  EXPECT_EQ(bwd1.peak_bytes_max, 10 * kMiB);
  ASSERT_EQ(bwd1.top_sites.size(), 1u);
  EXPECT_EQ(bwd1.top_sites[0].site_id, SiteOf(SiteKind::kDevice, 8)->id);
}

TEST_F(DeviceAnalysisTest, FailedAllocations) {
  ASSERT_EQ(report_.device_failures.size(), 2u);
  const DeviceFailure& a = report_.device_failures[0];
  EXPECT_EQ(a.pid, 9u);
  EXPECT_EQ(a.step, 50u);
  EXPECT_EQ(a.stage, "backward");
  EXPECT_EQ(a.size, 4 * kDevGiB);
  EXPECT_EQ(a.kind, SiteKind::kDevice);
  EXPECT_EQ(a.api, "cudaMalloc");
  EXPECT_EQ(a.error, 2u);
  EXPECT_EQ(a.error_name, "out of memory");
  EXPECT_EQ(a.device, 0);
  EXPECT_EQ(a.stack_id, 7u);
  EXPECT_EQ(a.site_id, 0u);  // nothing was ever allocated from there
  ASSERT_EQ(a.frames.size(), 1u);
  EXPECT_EQ(a.frames[0].function, "0x7000");
  EXPECT_NEAR(a.time_s, 50.0, 1e-6);
  const DeviceFailure& b = report_.device_failures[1];
  EXPECT_EQ(b.step, 55u);
  EXPECT_EQ(b.stage, "forward");
  EXPECT_EQ(b.size, 8 * kDevGiB);
  EXPECT_EQ(b.api, "cuMemAlloc_v2");
  EXPECT_EQ(b.site_id, SiteOf(SiteKind::kDevice, 3)->id);
}

// --- Gates ------------------------------------------------------------------

GateResult Evaluate(Report& r, const std::string& expression) {
  absl::StatusOr<Gate> g = ParseGate(expression);
  EXPECT_TRUE(g.ok()) << g.status();
  EvaluateGates({*g}, &r);
  return r.gates.at(0);
}

TEST_F(DeviceAnalysisTest, DeviceGates) {
  GateResult g = Evaluate(report_, "device_peak > 300MiB");
  EXPECT_FALSE(g.passed);
  EXPECT_EQ(g.metric, "device_peak");
  EXPECT_EQ(g.value, 353.0 * kMiB);
  EXPECT_EQ(g.detail, "device 0, pid 9, step 25");
  EXPECT_TRUE(Evaluate(report_, "device_peak > 353M").passed);
  EXPECT_FALSE(Evaluate(report_, "device_peak >= 353M").passed);

  g = Evaluate(report_, "device_peak(forward) >= 352M");
  EXPECT_FALSE(g.passed);
  EXPECT_EQ(g.value, 352.0 * kMiB);
  EXPECT_EQ(g.detail, "device 0, step 25, pid 9");
  EXPECT_TRUE(Evaluate(report_, "device_peak(forward) > 352M").passed);
  EXPECT_EQ(Evaluate(report_, "device_peak( backward ) > 1G").value, 353.0 * kMiB);
  g = Evaluate(report_, "device_peak(optimizer) > 1G");
  EXPECT_FALSE(g.passed);  // a typo cannot pass
  EXPECT_EQ(g.detail, "no stage 'optimizer' in the trace");
  // The host's peak(STAGE) still sees the host heap only.
  EXPECT_EQ(Evaluate(report_, "peak(forward) > 1G").value, 1.0 * kMiB);

  g = Evaluate(report_, "device_growth > 1MiB/step");
  EXPECT_FALSE(g.passed);
  EXPECT_EQ(g.value, 2.0 * kMiB);
  EXPECT_THAT(g.detail, HasSubstr("LEAK device site #1 (pid 9)"));
  EXPECT_TRUE(Evaluate(report_, "device_growth > 2M").passed);
  // `growth` is the host's: no host LEAK here. `leaks` counts every kind.
  g = Evaluate(report_, "growth > 0");
  EXPECT_TRUE(g.passed);
  EXPECT_EQ(g.detail, "no LEAK");
  EXPECT_EQ(Evaluate(report_, "leaks > 0").value, 1.0);
}

TEST(DeviceGateParseTest, Grammar) {
  absl::StatusOr<Gate> g = ParseGate("device_peak(forward) >= 2GiB");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->metric, "device_peak");
  EXPECT_EQ(g->stage, "forward");
  EXPECT_EQ(g->threshold, 2.0 * kDevGiB);
  g = ParseGate("device_growth > 1.5MiB/step");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->threshold, 1.5 * kMiB);
  for (const char* bad : {"device_peak > 1G/step", "device_growth(forward) > 1", "device_peek > 1",
                          "device_peak() > 1", "device_peak(fwd > 1"}) {
    EXPECT_FALSE(ParseGate(bad).ok()) << bad;
  }
}

// --- Host-only traces and unmatched frees -------------------------------------

std::vector<uint8_t> HostTrace(bool with_device_frees) {
  reader::TraceBuilder b;
  b.String(1, "forward");
  b.Stack(1, {0x1000});
  format::Counters c{};
  c.live_bytes = c.peak_bytes = kMiB;
  b.Alloc(1, 1, 0x10, kMiB);
  for (uint64_t s = 0; s < 3; ++s) {
    b.Step(10 * s + 2, s, 0, c);
    b.Stage(10 * s + 3, 1, s, 0, c);
    b.Stage(10 * s + 4, 1, s, 1, c);
    b.Step(10 * s + 5, s, 1, c);
  }
  if (with_device_frees) {
    b.DevAlloc(40, 1, format::kDevDevice, 0, 0xA, 4 * kMiB, format::kApiCudaMalloc);
    b.DevFree(41, format::kDevDevice, 0, 0xB, kMiB, format::kApiCudaFree);  // applied
    b.DevFree(42, format::kDevDevice, 0, 0xC, 0, format::kApiCudaFree);     // ignored
    b.DevFree(43, format::kDevPinnedHost, -1, 0xD, 0, format::kApiCudaFreeHost);
  }
  return b.Finish();
}

// 60 steps in which the caching allocator maps one more 20 MiB segment per
// step (resident bytes grow 20 MiB/step), with PyTorch's statistics at every
// step end: allocated bytes (tensors) growing 20 MiB/step (a tensor leak) or
// flat; the free memory trapped in split blocks growing or flat.
enum class Torch { kTensorsGrow, kCacheGrows, kSplitsGrow };
std::vector<uint8_t> CachingTrace(Torch mode) {
  reader::TraceBuilder b;
  b.String(1, "torch.cuda:0.allocated_bytes");
  b.String(2, "torch.cuda:0.reserved_bytes");
  b.String(3, "torch.cuda:0.inactive_split_bytes");
  b.Stack(1, {0x1000});
  format::Counters c{};
  uint64_t ts = 1;
  for (uint64_t s = 0; s < 60; ++s) {
    b.Step(ts++, s, 0, c);
    b.DevAlloc(ts++, 1, format::kDevDevice, 0, 0x7f0000000000 + s * (32 * kMiB), 20 * kMiB,
               format::kApiCudaMalloc, 0, s);
    const int64_t reserved = static_cast<int64_t>((s + 1) * 20 * kMiB);
    const int64_t allocated = mode == Torch::kTensorsGrow
                                  ? reserved - static_cast<int64_t>(kMiB)
                                  : static_cast<int64_t>(15 * kMiB + (s % 3) * kMiB);
    const int64_t split = mode == Torch::kSplitsGrow ? static_cast<int64_t>(s * 8 * kMiB)
                                                     : static_cast<int64_t>(2 * kMiB);
    b.Counter(ts++, 1, allocated);
    b.Counter(ts++, 2, reserved);
    b.Counter(ts++, 3, split);
    b.Step(ts++, s, 1, c);
  }
  return b.Finish();
}

TEST(DeviceCachingTest, TensorsOrCacheOrFragmentation) {
  const struct {
    Torch mode;
    const char* verdict;
    const char* text;
  } cases[] = {{Torch::kTensorsGrow, "leak", "-> tensors leak"},
               {Torch::kCacheGrows, "caching", "-> CACHING"},
               {Torch::kSplitsGrow, "fragmentation", "-> FRAGMENTATION"}};
  for (const auto& c : cases) {
    testing::TempDir dir;
    ASSERT_TRUE(testing::WriteFile(dir.File("c.trace"), CachingTrace(c.mode)));
    Options o;
    o.symbolize = false;
    absl::StatusOr<Report> r = AnalyzeRun(dir.path(), o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->processes[0].devices.size(), 1u);
    const DeviceSummary& d = r->processes[0].devices[0];
    EXPECT_EQ(d.live_growth.cls, GrowthClass::kLeak) << d.live_growth.reason;
    EXPECT_DOUBLE_EQ(d.live_growth.slope, 20.0 * kMiB);
    ASSERT_TRUE(d.has_torch_growth);
    EXPECT_EQ(d.growth_verdict, c.verdict);
    EXPECT_EQ(d.torch_allocated_growth.cls,
              c.mode == Torch::kTensorsGrow ? GrowthClass::kLeak : GrowthClass::kNoTrend)
        << d.torch_allocated_growth.reason;
    EXPECT_THAT(report::FormatText(*r), HasSubstr(c.text));
    EXPECT_THAT(report::FormatJson(*r),
                HasSubstr(std::string("\"growth_verdict\":\"") + c.verdict + "\""));
  }
}

TEST(PoolCounterTest, ParsePoolCounter) {
  int32_t device = 0;
  std::string pool, stat;
  ASSERT_TRUE(ParsePoolCounter("cuda.pool:0.0x5a00.reserved_bytes", &device, &pool, &stat));
  EXPECT_EQ(device, 0);
  EXPECT_EQ(pool, "0x5a00");
  EXPECT_EQ(stat, "reserved_bytes");
  ASSERT_TRUE(ParsePoolCounter("cuda.graph:-1.used_bytes", &device, &pool, &stat));
  EXPECT_EQ(device, -1);
  EXPECT_EQ(pool, "");
  EXPECT_EQ(stat, "used_bytes");
  ASSERT_TRUE(
      ParsePoolCounter("cuda.pool:-1.0x5a00.release_threshold_bytes", &device, &pool, &stat));
  EXPECT_EQ(device, -1);
  EXPECT_EQ(stat, "release_threshold_bytes");
  for (const char* bad :
       {"cuda.graph:0.release_threshold_bytes", "cuda.pool:0.0x5a00.trim_to_bytes",
        "cuda.multicast:0.0x5a00.bound_bytes", "cuda.pool:0.reserved_bytes",
        "cuda.pool:0.5a00.used_bytes", "cuda.pool:0.0x.used_bytes", "cuda.pool:0.0xZZ.used_bytes",
        "cuda.graph:0.0x1.used_bytes", "cuda.graph:0.free_bytes", "cuda.graph:x.used_bytes",
        "cuda.graph:-2.used_bytes", "torch.cuda:0.allocated_bytes"}) {
    EXPECT_FALSE(ParsePoolCounter(bad, &device, &pool, &stat)) << bad;
  }
}

// The library's counters of a created pool and of graph memory, written at
// step ends and after a trim within a step: each step row shows the latest.
TEST(PoolCounterTest, StepRowsTextAndJson) {
  reader::TraceBuilder b;
  b.String(1, "cuda.pool:0.0x5a00.reserved_bytes");
  b.String(2, "cuda.pool:0.0x5a00.used_bytes");
  b.String(3, "cuda.graph:0.reserved_bytes");
  b.String(4, "cuda.graph:0.used_bytes");
  b.String(5, "cuda.pool:0.0x5a00.release_threshold_bytes");
  b.String(6, "cuda.pool:0.0x5b00.release_threshold_bytes");
  b.Stack(1, {0x1000});
  format::Counters c{};
  uint64_t ts = 1;
  b.DevAlloc(ts++, 1, format::kDevPool, 0, 0x7f0000000000, 3 * kMiB, format::kApiCudaMallocAsync,
             0x5a00, 0);
  // As the library writes them: the step-end read follows the step's END
  // record and its DEV_INFO; a trim's read comes within a step.
  for (uint64_t s = 0; s < 3; ++s) {
    b.Step(ts++, s, 0, c);
    if (s == 2) b.Counter(ts++, 1, static_cast<int64_t>(1 * kMiB));  // after a trim
    b.Step(ts++, s, 1, c);
    b.DevInfo(ts++, s, 0, 70 * kMiB, 80 * kMiB);
    b.Counter(ts++, 1, static_cast<int64_t>((6 + s) * kMiB));
    b.Counter(ts++, 2, static_cast<int64_t>(3 * kMiB));
    b.Counter(ts++, 3, static_cast<int64_t>(8 * kMiB));
    b.Counter(ts++, 4, static_cast<int64_t>(5 * kMiB));
    // 4 MiB: steps 0 and 1 keep 3 and 4 MiB freed (within), step 2 keeps 5.
    b.Counter(ts++, 5, static_cast<int64_t>(4 * kMiB));
    b.Counter(ts++, 6, -1);  // UINT64_MAX as the record's int64: no limit
  }
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(dir.File("p.trace"), b.Finish()));
  Options o;
  o.symbolize = false;
  absl::StatusOr<Report> r = AnalyzeRun(dir.path(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->steps.size(), 3u);
  for (uint64_t s = 0; s < 3; ++s) {
    ASSERT_EQ(r->steps[s].devices.size(), 1u);
    const DeviceStep& d = r->steps[s].devices[0];
    ASSERT_EQ(d.created_pools.count("0x5a00"), 1u);
    EXPECT_EQ(d.created_pools.at("0x5a00").reserved, static_cast<int64_t>((6 + s) * kMiB));
    EXPECT_EQ(d.created_pools.at("0x5a00").used, static_cast<int64_t>(3 * kMiB));
    EXPECT_EQ(d.created_pools.at("0x5a00").release_threshold, static_cast<int64_t>(4 * kMiB));
    EXPECT_EQ(d.created_pools.at("0x5a00").within_threshold(), s < 2 ? 1 : 0);
    EXPECT_EQ(d.created_pools.at("0x5b00").release_threshold, INT64_MAX);
    EXPECT_EQ(d.created_pools.at("0x5b00").within_threshold(), -1);  // reserved, used unknown
    EXPECT_EQ(d.graph.reserved, static_cast<int64_t>(8 * kMiB));
    EXPECT_EQ(d.graph.used, static_cast<int64_t>(5 * kMiB));
  }
  const std::string text = report::FormatText(*r);
  EXPECT_THAT(text, HasSubstr("pools rsv  pools used   graph rsv  graph used"));
  EXPECT_THAT(text, HasSubstr("created memory pools, graph memory"));
  const std::string json = report::FormatJson(*r);
  EXPECT_THAT(json, HasSubstr("\"created_pools\":{\"0x5a00\":{\"reserved_bytes\":8388608,"
                              "\"used_bytes\":3145728,\"release_threshold_bytes\":4194304,"
                              "\"cached_bytes\":5242880,\"within_release_threshold\":false},"
                              "\"0x5b00\":{\"reserved_bytes\":null,\"used_bytes\":null,"
                              "\"release_threshold_bytes\":9223372036854775807,"
                              "\"cached_bytes\":null,\"within_release_threshold\":null}}"));
  EXPECT_THAT(json, HasSubstr("\"graph_memory\":{\"reserved_bytes\":8388608,"
                              "\"used_bytes\":5242880}"));
}

TEST(DeviceHostOnlyTest, NoDeviceDataNoDeviceOutput) {
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(dir.File("h.trace"), HostTrace(false)));
  Options o;
  o.symbolize = false;
  absl::StatusOr<Report> r = AnalyzeRun(dir.path(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->processes[0].has_device_data());
  EXPECT_TRUE(r->processes[0].devices.empty());
  for (const StepRow& s : r->steps) EXPECT_TRUE(s.devices.empty());
  ASSERT_EQ(r->stage_peaks.size(), 1u);
  EXPECT_EQ(r->stage_peaks[0].kind, SiteKind::kHost);
  EXPECT_TRUE(r->device_failures.empty());
  const std::string text = report::FormatText(*r);
  EXPECT_THAT(text, Not(HasSubstr("evice")));
  EXPECT_THAT(text, Not(HasSubstr("dev live")));
  GateResult g = Evaluate(*r, "device_peak > 0");
  EXPECT_TRUE(g.passed);
  EXPECT_EQ(g.detail, "no device memory recorded");
  g = Evaluate(*r, "device_peak(forward) > 0");
  EXPECT_TRUE(g.passed);
  EXPECT_EQ(g.detail, "no device memory in stage 'forward'");
  EXPECT_EQ(Evaluate(*r, "device_growth > 0").detail, "no device LEAK");
}

TEST(DeviceHostOnlyTest, FreesOfUnseenAllocations) {
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(dir.File("h.trace"), HostTrace(true)));
  Options o;
  o.symbolize = false;
  absl::StatusOr<Report> r = AnalyzeRun(dir.path(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  const ProcessSummary& p = r->processes[0];
  EXPECT_EQ(p.device_unmatched_frees, 1u);
  EXPECT_EQ(p.device_ignored_frees, 2u);
  ASSERT_EQ(p.devices.size(), 1u);
  EXPECT_EQ(p.devices[0].live_bytes_end, 3 * kMiB);
  EXPECT_EQ(p.devices[0].peak_bytes, 4 * kMiB);
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_THAT(r->warnings[0], HasSubstr(": 2 device frees of allocations memstep never saw"));
  EXPECT_THAT(report::FormatText(*r),
              HasSubstr("1 device frees of allocations memstep never saw, applied with their "
                        "recorded sizes"));
}

// Device stacks lose their leading memstep and CUDA library frames (the API
// is reported as `api`); host stacks keep CUDA frames; a device stack made
// only of CUDA frames keeps them.
TEST(DeviceFramesTest, CudaEntryFramesStripped) {
  reader::TraceBuilder b;
  b.String(1, "/usr/lib/libmemstep.so");
  b.String(2, "/opt/cuda/lib64/libcudart.so.13");
  b.String(3, "/opt/app/train");
  b.String(4, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
  // Load bias 0: "module+0xOFFSET" shows the ip itself.
  b.Mapping(1, 0, 0x1000, 0x2000, 0, 1, "");
  b.Mapping(2, 0, 0x3000, 0x4000, 0, 2, "");
  b.Mapping(3, 0, 0x5000, 0x6000, 0, 3, "");
  b.Mapping(4, 0, 0x7000, 0x8000, 0, 4, "");
  b.Stack(1, {0x1100, 0x7100, 0x3100, 0x5100});  // memstep, driver, runtime, the caller
  b.Stack(2, {0x1100, 0x3200, 0x7200});          // only CUDA frames
  b.DevAlloc(1, 1, format::kDevDevice, 0, 0xA, kMiB, format::kApiCuMemAlloc);
  b.DevAlloc(2, 2, format::kDevDevice, 0, 0xB, kMiB, format::kApiCuMemAlloc);
  b.Alloc(3, 1, 0x10, 4096);
  b.DevFail(4, 1, format::kDevDevice, 0, kMiB, format::kApiCuMemAlloc, 2);
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(dir.File("f.trace"), b.Finish()));
  Options o;
  o.symbolize = false;
  absl::StatusOr<Report> r = AnalyzeRun(dir.path(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto functions = [&](SiteKind kind, uint64_t stack) {
    std::vector<std::string> out;
    for (const Site& s : r->sites) {
      if (s.kind != kind || s.stack_id != stack) continue;
      for (const Frame& f : s.frames) out.push_back(f.function);
    }
    return out;
  };
  EXPECT_THAT(functions(SiteKind::kDevice, 1), ::testing::ElementsAre("train+0x5100"));
  EXPECT_THAT(functions(SiteKind::kDevice, 2),
              ::testing::ElementsAre("libcudart.so.13+0x3200", "libcuda.so.1+0x7200"));
  EXPECT_THAT(
      functions(SiteKind::kHost, 1),
      ::testing::ElementsAre("libcuda.so.1+0x7100", "libcudart.so.13+0x3100", "train+0x5100"));
  ASSERT_EQ(r->device_failures.size(), 1u);
  ASSERT_EQ(r->device_failures[0].frames.size(), 1u);
  EXPECT_EQ(r->device_failures[0].frames[0].function, "train+0x5100");
}

// --- Text and JSON ------------------------------------------------------------

TEST_F(DeviceAnalysisTest, TextSections) {
  const std::string text = report::FormatText(report_);
  EXPECT_THAT(text, HasSubstr("peak 1.00 MiB  device peak 353 MiB\n"));
  EXPECT_THAT(text, HasSubstr("    device 0 resident (exact): LEAK  +2.00 MiB/step [95% CI "
                              "2.00 MiB, 2.00 MiB]  device 0 full in 40,600 steps (5.6 h)"));
  EXPECT_THAT(text, HasSubstr("  site #1 LEAK [device, device 0, cudaMalloc]  +2.00 MiB/step"));
  EXPECT_THAT(text, HasSubstr("Device allocation failures: 2\n  step 50 (backward)  50.000 s  "
                              "cudaMalloc 4.00 GiB (4,294,967,296 bytes)  [device, device 0]  "
                              "error 2 (out of memory)\n        0x7000\n"));
  EXPECT_THAT(text, HasSubstr("error 2 (out of memory)  site #1\n"));
  EXPECT_THAT(text, HasSubstr("\nDevice stage peaks (exact resident device bytes; top sites "
                              "exact)\n"));
  EXPECT_THAT(text, HasSubstr("  forward                 0     352 MiB       25"));
  EXPECT_THAT(text, HasSubstr("      200 MiB  site #"));
  EXPECT_THAT(text, HasSubstr("  pid 9 device 0: peak 353 MiB (370,147,328 bytes) at step 25, "
                              "25.000 s; live at end 220 MiB (230,686,720 bytes)\n"));
  EXPECT_THAT(text, HasSubstr("driver: total 80.0 GiB, used 720 MiB at the last step end"));
  EXPECT_THAT(text, HasSubstr("182 allocations (2.22 GiB), 121 frees (2.00 GiB), 2 failed"));
  EXPECT_THAT(text, HasSubstr("pinned host memory: peak 64.0 MiB"));
  // Steps table: device columns at the end; step 0 is 102 + 10 MiB live, 133 + 10 peak.
  EXPECT_THAT(text, HasSubstr("RSS    dev live    dev peak      pinned\n"));
  EXPECT_THAT(text, HasSubstr("           -     112 MiB     143 MiB    64.0 MiB\n"));
  // The device 0 table: driver used = live + 500 MiB, reserved = live + 8 MiB.
  EXPECT_THAT(text, HasSubstr("device 0 per step (pid 9): resident bytes, the driver's view, "
                              "PyTorch's caching allocator\n"));
  EXPECT_THAT(text, HasSubstr("reserved   allocated       slack inact.split  share retries  OOMs"));
  EXPECT_THAT(text,
              HasSubstr("        25     152 MiB     353 MiB     652 MiB    4.00 MiB         "
                        "0 B     160 MiB     152 MiB    8.00 MiB    2.00 MiB   1.2%       0"));
  // Host tables keep to host sites; device sites have their own.
  EXPECT_THAT(text, HasSubstr("Top 1 call sites by live bytes at end (estimated from samples)"));
  EXPECT_THAT(text, HasSubstr("Top 4 device call sites by live bytes at end (exact)\n  #1      "
                              "120 MiB   40.8%  60 live allocs  device  device 0  cudaMalloc  60 "
                              "allocations, 120 MiB in total  site #1\n"));
  EXPECT_THAT(text, HasSubstr("Top 6 device call sites at their device's peak"));
}

TEST_F(DeviceAnalysisTest, JsonFields) {
  const std::string json = report::FormatJson(report_);
  EXPECT_THAT(json,
              HasSubstr("\"device_peak_bytes\":370147328,\"pinned_host_live_bytes_end\":"
                        "67108864,\"pinned_host_peak_bytes\":67108864,\"device_failures\":2"));
  EXPECT_THAT(json, HasSubstr("\"devices\":[{\"device\":0,\"peak_bytes\":370147328,"
                              "\"peak_time_s\":"));
  EXPECT_THAT(json, HasSubstr("\"total_bytes\":85899345920,\"used_bytes_end\":754974720"));
  EXPECT_THAT(json, HasSubstr("\"steps_to_limit\":40600,\"seconds_to_limit\":20300"));
  // Step 10 of device 0: 142 MiB live with the VMM handle.
  EXPECT_THAT(json, HasSubstr("{\"device\":0,\"live_bytes_end\":148897792,\"peak_bytes\":"
                              "160432128,\"live_by_kind\":{\"device\":127926272,\"device_pool\":0,"
                              "\"device_vmm\":20971520}"));
  EXPECT_THAT(json, HasSubstr("\"torch\":{\"allocated_bytes\":148897792,\"reserved_bytes\":"
                              "157286400,\"inactive_split_bytes\":2097152,\"requested_bytes\":"
                              "147849216,\"num_alloc_retries\":1,\"num_ooms\":0,"
                              "\"allocated_bytes_peak\":null,\"reserved_bytes_peak\":null,"
                              "\"cache_slack_bytes\":8388608,"));
  EXPECT_THAT(json, HasSubstr("\"alloc_retries_in_step\":1,\"ooms_in_step\":0}"));
  EXPECT_THAT(json, HasSubstr("\"driver\":{\"free_bytes\":85226160128,\"total_bytes\":"
                              "85899345920,\"used_bytes\":673185792,\"pool_reserved_bytes\":"
                              "4194304,\"pool_used_bytes\":0}"));
  EXPECT_THAT(json, HasSubstr("\"driver\":null,\"torch\":null"));  // device 1
  EXPECT_THAT(json, HasSubstr("\"device_failures\":[{\"pid\":9,\"time_s\":"));
  EXPECT_THAT(json, HasSubstr("\"size\":4294967296,\"kind\":\"device\",\"api\":\"cudaMalloc\","
                              "\"error\":2,\"error_name\":\"out of memory\",\"device\":0,"
                              "\"stack_id\":7,\"site_id\":0,\"frames\":[{\"function\":\"0x7000\""));
  EXPECT_THAT(json, HasSubstr("\"stage\":\"forward\",\"kind\":\"device\",\"peak_bytes_max\":"
                              "369098752,\"step_of_max\":25,"));
  EXPECT_THAT(json, HasSubstr("\"top_source\":\"exact\",\"device\":0,\"top_sites\":"));
  EXPECT_THAT(json, HasSubstr("\"top_source\":\"replay\",\"device\":null,"));
  for (const char* kind : {"device", "device_vmm", "device_pool", "pinned_host", "host"}) {
    EXPECT_THAT(json, HasSubstr(std::string(",\"kind\":\"") + kind + "\",\"pid\":9,")) << kind;
  }
  EXPECT_THAT(json, HasSubstr("\"device\":0,\"api\":\"cuMemCreate\"}"));
  EXPECT_THAT(json, HasSubstr("\"device\":null,\"api\":\"cudaHostAlloc\"}"));
  EXPECT_THAT(json, HasSubstr("\"device\":null,\"api\":\"\"}"));  // the host site
}

TEST(PoolCounterTest, ParseTrimAndMulticastCounters) {
  int32_t device = 0;
  std::string object, stat;
  ASSERT_TRUE(ParsePoolTrimCounter("cuda.pool:1.0x5a00.trim_to_bytes", &device, &object));
  EXPECT_EQ(device, 1);
  EXPECT_EQ(object, "0x5a00");
  ASSERT_TRUE(
      ParseMulticastCounter("cuda.multicast:-1.0x6d63.size_bytes", &device, &object, &stat));
  EXPECT_EQ(device, -1);
  EXPECT_EQ(object, "0x6d63");
  EXPECT_EQ(stat, "size_bytes");
  ASSERT_TRUE(
      ParseMulticastCounter("cuda.multicast:3.0x6d63.bound_bytes", &device, &object, &stat));
  EXPECT_EQ(device, 3);
  EXPECT_EQ(stat, "bound_bytes");
  for (const char* bad :
       {"cuda.pool:0.0x5a00.reserved_bytes", "cuda.pool:0.trim_to_bytes",
        "cuda.pool:-2.0x5a00.trim_to_bytes", "cuda.multicast:0.0x5a00.trim_to_bytes"}) {
    EXPECT_FALSE(ParsePoolTrimCounter(bad, &device, &object)) << bad;
  }
  for (const char* bad : {"cuda.multicast:0.0x6d63.used_bytes", "cuda.multicast:0.6d63.size_bytes",
                          "cuda.multicast:x.0x6d63.size_bytes", "cuda.pool:0.0x6d63.size_bytes",
                          "cuda.multicast:0.0x6d63.bound_bytes.x"}) {
    EXPECT_FALSE(ParseMulticastCounter(bad, &device, &object, &stat)) << bad;
  }
}

// Release thresholds are listed when first read or changed (the library reads
// them again at every step end), trims with the reserved bytes read right
// after; multicast objects with their lifetime and bound bytes per device; a
// multicast handle reused after its release is a new object.
TEST(PoolCounterTest, PoolEventsAndMulticastObjects) {
  reader::TraceBuilder b;
  b.String(1, "cuda.pool:0.0x5a00.release_threshold_bytes");
  b.String(2, "cuda.pool:0.0x5a00.reserved_bytes");
  b.String(3, "cuda.pool:0.0x5a00.trim_to_bytes");
  b.String(4, "cuda.multicast:-1.0x6d63.size_bytes");
  b.String(5, "cuda.multicast:0.0x6d63.bound_bytes");
  b.String(6, "cuda.multicast:1.0x6d63.bound_bytes");
  b.Stack(1, {0x1000});
  format::Counters c{};
  uint64_t ts = 1;
  b.DevAlloc(ts++, 1, format::kDevPool, 0, 0x7f0000000000, 3 * kMiB, format::kApiCudaMallocAsync,
             0x5a00, 0);
  b.Counter(ts++, 1, static_cast<int64_t>(4 * kMiB));  // before any step
  b.Counter(ts++, 4, static_cast<int64_t>(2 * kMiB));  // the first object, before any step
  for (uint64_t s = 0; s < 4; ++s) {
    b.Step(ts++, s, 0, c);
    if (s == 1) {
      b.Counter(ts++, 5, static_cast<int64_t>(2 * kMiB));
      b.Counter(ts++, 6, static_cast<int64_t>(kMiB));
      b.Counter(ts++, 5, 0);
    }
    if (s == 2) {
      b.Counter(ts++, 1, -1);                          // no limit
      b.Counter(ts++, 3, static_cast<int64_t>(kMiB));  // a trim ...
      b.Counter(ts++, 1, -1);                          // ... and the pool read after it
      b.Counter(ts++, 2, static_cast<int64_t>(2 * kMiB));
      b.Counter(ts++, 6, 0);
      b.Counter(ts++, 4, 0);                               // released
      b.Counter(ts++, 4, static_cast<int64_t>(8 * kMiB));  // the handle reused
    }
    b.Step(ts++, s, 1, c);
    b.DevInfo(ts++, s, 0, 70 * kMiB, 80 * kMiB);
    b.Counter(ts++, 1, s < 2 ? static_cast<int64_t>(4 * kMiB) : -1);  // step-end reads
    b.Counter(ts++, 2, static_cast<int64_t>(6 * kMiB));
  }
  testing::TempDir dir;
  ASSERT_TRUE(testing::WriteFile(dir.File("p.trace"), b.Finish()));
  Options o;
  o.symbolize = false;
  absl::StatusOr<Report> r = AnalyzeRun(dir.path(), o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->processes.size(), 1u);
  const ProcessSummary& p = r->processes[0];
  ASSERT_EQ(p.pool_events.size(), 3u);
  EXPECT_EQ(p.pool_events[0].step, -1);
  EXPECT_FALSE(p.pool_events[0].trim);
  EXPECT_EQ(p.pool_events[0].bytes, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(p.pool_events[1].step, 2);
  EXPECT_FALSE(p.pool_events[1].trim);
  EXPECT_EQ(p.pool_events[1].bytes, INT64_MAX);
  EXPECT_EQ(p.pool_events[2].step, 2);
  EXPECT_TRUE(p.pool_events[2].trim);
  EXPECT_EQ(p.pool_events[2].device, 0);
  EXPECT_EQ(p.pool_events[2].pool, "0x5a00");
  EXPECT_EQ(p.pool_events[2].bytes, static_cast<int64_t>(kMiB));
  EXPECT_EQ(p.pool_events[2].reserved_after, static_cast<int64_t>(2 * kMiB));
  ASSERT_EQ(p.multicast.size(), 2u);
  const ProcessSummary::Multicast& m = p.multicast[0];
  EXPECT_EQ(m.object, "0x6d63");
  EXPECT_EQ(m.size_bytes, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(m.created_step, -1);
  EXPECT_TRUE(m.released);
  EXPECT_EQ(m.released_step, 2);
  EXPECT_EQ(m.bound_max, (std::map<int32_t, int64_t>{{0, 2 * kMiB}, {1, kMiB}}));
  EXPECT_EQ(m.bound_end, (std::map<int32_t, int64_t>{{0, 0}, {1, 0}}));
  EXPECT_EQ(p.multicast[1].size_bytes, static_cast<int64_t>(8 * kMiB));
  EXPECT_EQ(p.multicast[1].created_step, 2);
  EXPECT_FALSE(p.multicast[1].released);
  EXPECT_TRUE(p.multicast[1].bound_max.empty());
  const std::string text = report::FormatText(*r);
  EXPECT_THAT(text, HasSubstr("3 release thresholds and trims"));
  EXPECT_THAT(text, HasSubstr("release threshold no limit"));
  EXPECT_THAT(text, HasSubstr("trimmed to 1.00 MiB, reserved 2.00 MiB after"));
  EXPECT_THAT(text, HasSubstr("device 0 2.00 MiB (0 B), device 1 1.00 MiB (0 B)"));
  const std::string json = report::FormatJson(*r);
  EXPECT_THAT(json, HasSubstr("{\"step\":2,\"device\":0,\"pool\":\"0x5a00\",\"event\":\"trim\","
                              "\"trim_to_bytes\":1048576,\"reserved_bytes_after\":2097152}"));
  EXPECT_THAT(json, HasSubstr("\"bound_bytes_max\":{\"0\":2097152,\"1\":1048576}"));
  EXPECT_THAT(json, HasSubstr("\"pool_events_dropped\":0"));
}

}  // namespace
}  // namespace memstep::analysis
