// Inputs for the HTML report's tests (html_report_test.cc, html_browser_test.py):
//  - HostileTrace(): a small trace whose stage name and Python function name
//    are markup (<script>, </script>, quotes, a comment opener), every
//    allocation recorded (p = 1): 40 steps, stage kHostileStage leaks 64 KiB
//    per step from the Python frame kHostileFunction.
//  - ScaleReport(steps, sites): an analysis::Report built directly, as large
//    as a long run (one process, every step with four stages and device 0;
//    `sites` call sites of 6 to 17 frames over a shared vocabulary, the first
//    kGrowingSites growing with a full per-step series, the rest with none),
//    to check that the page stays small and fast however big the run.

#ifndef MEMSTEP_TESTS_UNIT_HTML_TEST_DATA_H_
#define MEMSTEP_TESTS_UNIT_HTML_TEST_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/analysis/analysis.h"
#include "tests/unit/trace_builder.h"

namespace memstep::testing {

inline constexpr char kHostileStage[] = "</script><script>document.title='pwned'</script>\"a'&<!--";
inline constexpr char kHostileFunction[] = "<script>alert(\"x\")</script></script><!--\xE2\x80\xA8";

inline std::vector<uint8_t> HostileTrace() {
  namespace f = ::memstep::format;
  reader::TraceHeaderInfo info;
  info.pid = 7;
  info.start_real_ns = 1700000000000000000ull;
  info.tlvs.push_back({f::kTlvCmdline, std::string("<b>train</b>\0", 13)});
  reader::TraceBuilder b(info);
  b.String(1, kHostileStage);
  b.String(2, absl::StrCat(kHostileFunction, std::string("\0<i>x.py</i>\0", 13), "12"));
  b.Stack(1, {f::kPyFrameTag | 2});
  uint64_t live = 0, alloc = 0, allocs = 0;
  auto counters = [&] {
    f::Counters c{};
    c.live_bytes = live;
    c.peak_bytes = live;
    c.alloc_bytes = alloc;
    c.alloc_count = allocs;
    c.rss_bytes = 2 * live + (1 << 20);
    return c;
  };
  uint64_t ts = 0, addr = 0x10000000;
  for (uint64_t step = 0; step < 40; ++step) {
    ts = 1000000 * (step + 1);
    b.Step(ts, step, 0, counters());
    b.Stage(ts + 100000, 1, step, 0, counters());
    b.Alloc(ts + 200000, 1, addr++, 64 * 1024, 0, 0, step, 1);
    live += 64 * 1024;
    alloc += 64 * 1024;
    ++allocs;
    b.Stage(ts + 300000, 1, step, 1, counters());
    b.Step(ts + 400000, step, 1, counters());
  }
  b.Trailer(ts + 500000, counters(), true);
  return b.Finish();
}

inline constexpr size_t kGrowingSites = 60;

inline analysis::Report ScaleReport(size_t steps, size_t sites) {
  analysis::Report r;
  r.path = "synthetic-scale-run";
  r.memory_limit_bytes = uint64_t{64} << 30;
  analysis::ProcessSummary p;
  p.pid = 1000;
  p.cmdline = "python train.py";
  p.clean_exit = true;
  p.warmup_steps = 100;
  const char* const kStages[] = {"data", "forward", "backward", "optimizer"};
  r.steps.reserve(steps);
  uint64_t live = 1 << 30;
  for (size_t i = 0; i < steps; ++i) {
    analysis::StepRow s;
    s.pid = p.pid;
    s.step = i;
    live += (i % 7 == 0) ? 4096 : 0;  // a slow leak, with noise below
    s.live_bytes_end = live + (i * 2654435761u) % (1 << 20);
    s.peak_bytes = s.live_bytes_end + (512 << 20) + (i * 40503u) % (64 << 20);
    s.rss_bytes_end = s.peak_bytes + (256 << 20);
    for (int k = 0; k < 4; ++k) {
      s.stage_peaks[kStages[k]] = s.live_bytes_end + ((i + k * 3) % 5) * (100 << 20);
    }
    analysis::DeviceStep d;
    d.device = 0;
    d.live_bytes_end = (uint64_t{8} << 30) + (i % 1000) * 4096;
    d.peak_bytes = d.live_bytes_end + (uint64_t{3} << 30);
    d.torch.reserved_bytes = static_cast<int64_t>(d.peak_bytes + (uint64_t{1} << 30));
    s.devices.push_back(d);
    s.device_live_bytes_end = d.live_bytes_end;
    s.device_peak_bytes = d.peak_bytes;
    p.peak_bytes = std::max(p.peak_bytes, s.peak_bytes);
    p.rss_peak_bytes = std::max(p.rss_peak_bytes, s.rss_bytes_end);
    p.device_peak_bytes = std::max(p.device_peak_bytes, d.peak_bytes);
    r.steps.push_back(std::move(s));
  }
  p.live_bytes_end = r.steps.back().live_bytes_end;
  r.processes.push_back(p);
  r.sites.reserve(sites);
  for (size_t i = 0; i < sites; ++i) {
    analysis::Site s;
    s.id = i + 1;
    s.pid = p.pid;
    s.stack_id = i + 1;
    s.live_bytes_end = 1e9 / static_cast<double>(i + 1);
    s.live_bytes_at_peak = s.live_bytes_end;
    s.alloc_bytes = 2 * s.live_bytes_end;
    const size_t depth = 6 + i % 12;
    for (size_t k = 0; k < depth; ++k) {  // innermost first; roots shared
      analysis::Frame f;
      const size_t level = depth - 1 - k;
      f.function = absl::StrCat("module", level, "::function_", (i >> (2 * level)) % 97,
                                "(torch::Tensor const&)");
      f.file = absl::StrCat("/src/module", level, ".cc");
      f.line = static_cast<int>(10 + level);
      s.frames.push_back(std::move(f));
    }
    if (i < kGrowingSites) {
      s.growth.cls =
          i % 3 == 0 ? analysis::GrowthClass::kBoundedGrowth : analysis::GrowthClass::kLeak;
      s.growth.slope = 4096.0 / static_cast<double>(i + 1);
      s.growth.slope_low = s.growth.slope * 0.8;
      s.growth.slope_high = s.growth.slope * 1.2;
      s.growth.reason = "synthetic";
      s.live_bytes_by_step.resize(steps);
      for (size_t k = 0; k < steps; ++k) {
        s.live_bytes_by_step.Set(k, s.growth.slope * static_cast<double>(k));
      }
    } else {
      s.growth.cls = analysis::GrowthClass::kNoTrend;
    }
    r.sites.push_back(std::move(s));
  }
  for (int k = 0; k < 4; ++k) {
    for (bool device : {false, true}) {
      analysis::StagePeak sp;
      sp.pid = p.pid;
      sp.stage = kStages[k];
      sp.kind = device ? analysis::SiteKind::kDevice : analysis::SiteKind::kHost;
      sp.device = device ? 0 : -1;
      sp.peak_bytes_max = (uint64_t{2} << 30) + k * (uint64_t{100} << 20);
      sp.peak_bytes_median = sp.peak_bytes_max / 2;
      sp.step_of_max = steps / 2 + k;
      sp.steps = steps;
      for (size_t t = 0; t < 10; ++t) {
        sp.top_sites.push_back({t + 1, t + 1, 1e8 / static_cast<double>(t + 1), 1, 0, -1});
      }
      r.stage_peaks.push_back(sp);
    }
  }
  for (size_t a = 0; a < 500; ++a) {
    analysis::AlertRow al;
    al.pid = p.pid;
    al.step = a * (steps / 500);
    al.rule = "growth";
    al.value = 2 << 20;
    al.threshold = 1 << 20;
    al.site_id = 1;
    r.alerts.push_back(al);
  }
  return r;
}

}  // namespace memstep::testing

#endif  // MEMSTEP_TESTS_UNIT_HTML_TEST_DATA_H_
