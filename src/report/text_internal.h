// Helpers shared by the text report's files (text_report.cc: host sections
// and the layout; text_device.cc: device sections). Internal to src/report.

#ifndef MEMSTEP_SRC_REPORT_TEXT_INTERNAL_H_
#define MEMSTEP_SRC_REPORT_TEXT_INTERNAL_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "src/analysis/analysis.h"
#include "src/report/report.h"

namespace memstep::report::internal {

// "12.0 MiB (12,582,912 bytes)" where the exact number matters.
std::string ExactBytes(uint64_t bytes);
// "1.234 s"
std::string Seconds(double s);
// "45 s", "12 min", "3.5 h", "2.0 d"
std::string Duration(double s);
// "+256 KiB/step [95% CI 200 KiB, 300 KiB]"
std::string Rate(const analysis::Growth& g);
// Frames innermost first, one per line, at most o.frames (0: all).
void AppendFrames(const std::vector<analysis::Frame>& frames, const ReportOptions& o,
                  std::string& out);
// The host sites (device: the device and pinned host sites) with live bytes,
// at the peak or at the end, largest first, at most o.top; *total: the live
// bytes of all of that side's sites, *any: whether it has any site at all.
std::vector<const analysis::Site*> TopSites(const analysis::Report& r, const ReportOptions& o,
                                            bool device, bool at_peak, double* total, bool* any);
// One ranked line's start: "  #RANK  LIVE  SHARE%  ".
std::string SiteRankCells(int rank, double live, double total);
// Indices of the rows of a step table to show (SIZE_MAX marks "..."): all
// when there are at most o.max_step_rows, else the first and last
// o.edge_rows and the o.peak_rows with the largest `peaks`, in order.
std::vector<size_t> PickRows(const std::vector<uint64_t>& peaks, const ReportOptions& o);
// A site's one-line name: its first frame that is not an allocator's or
// memstep's own (the innermost frame when all are); `no_frames` without frames.
std::string SiteName(const analysis::Site& s, const char* no_frames);
// The LEAK and BOUNDED_GROWTH sites in the order every report lists them
// (LEAK first, then by rate), and the other sites by class: class name ->
// (sites, live bytes at the end).
struct GrowthGroups {
  std::vector<const analysis::Site*> growing;
  std::map<std::string, std::pair<size_t, double>> others;
};
GrowthGroups GroupByGrowth(const std::vector<analysis::Site>& sites);
using analysis::IsHost;
using analysis::SiteKind;
using analysis::SiteKindName;

// Device sections (text_device.cc); each prints nothing without device data.
// Per process, one line per device's growth verdict (after the heap line).
void AppendDeviceGrowth(const analysis::ProcessSummary& p, std::string& out);
// " [device, device 0, cudaMalloc]" for a device site, "" for a host one.
std::string DeviceSiteTag(const analysis::Site& s);
// "  device 0 full in N steps (T)" for a device site's projection.
std::string DeviceProjection(const analysis::Site& s);
// Out-of-memory moments and snapshots on request (text_snapshot.cc): the
// headline "out of memory at step N, stage S, requested X, free Y of Z".
std::string SnapshotHeadline(const analysis::MemorySnapshot& m);
void AppendMemorySnapshots(const analysis::Report& r, const ReportOptions& o, std::string& out);
void AppendDeviceFailures(const analysis::Report& r, const ReportOptions& o, std::string& out);
void AppendDeviceStagePeaks(const analysis::Report& r, std::string& out);
void AppendDeviceMemory(const analysis::Report& r, std::string& out);
// Extra step-table cells: header and one row ("" when the process has no
// device data).
std::string DeviceStepHeader(const analysis::ProcessSummary& p);
std::string DeviceStepCells(const analysis::ProcessSummary& p, const analysis::StepRow& s);
// Per device, the driver's and PyTorch's view at each step end (when the
// trace has DEV_INFO records or torch.cuda counters).
void AppendDeviceSteps(const analysis::Report& r, const analysis::ProcessSummary& p,
                       const ReportOptions& o, std::string& out);
void AppendDeviceSites(const analysis::Report& r, const ReportOptions& o, bool at_peak,
                       std::string& out);

}  // namespace memstep::report::internal

#endif  // MEMSTEP_SRC_REPORT_TEXT_INTERNAL_H_
