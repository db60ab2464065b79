// The per-step table as CSV (RFC 4180): one row per step per process.
//
// Worked example (a process with stage "fwd" and no device records):
//   pid,rank,step,epoch,duration_s,live_bytes_end,peak_bytes,...,stage_peak:fwd\r\n
//   77,,0,,0.002000,10485760,11534336,...,11534336\r\n
// Columns: see kColumns below and docs/cli.md; device columns appear only
// when some process recorded device memory, one pair per device ordinal.

#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/report/formats.h"

namespace memstep::report {

std::string CsvField(const std::string& field) {
  bool quote = !field.empty() && (field.front() == ' ' || field.back() == ' ' ||
                                  field.front() == '\t' || field.back() == '\t');
  for (char c : field) quote |= c == ',' || c == '"' || c == '\r' || c == '\n';
  if (!quote) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

namespace {

constexpr const char* kColumns[] = {"pid",
                                    "rank",
                                    "step",
                                    "epoch",
                                    "duration_s",
                                    "live_bytes_end",
                                    "peak_bytes",
                                    "mmap_live_bytes_end",
                                    "rss_bytes_end",
                                    "alloc_bytes",
                                    "alloc_count",
                                    "free_bytes",
                                    "free_count",
                                    "device_live_bytes_end",
                                    "device_peak_bytes",
                                    "pinned_host_live_bytes_end",
                                    "pinned_host_peak_bytes"};

}  // namespace

std::string FormatCsv(const analysis::Report& report) {
  std::set<std::string> stages;
  std::set<int32_t> devices;
  for (const analysis::StepRow& s : report.steps) {
    for (const auto& [name, peak] : s.stage_peaks) stages.insert(name);
    for (const analysis::DeviceStep& d : s.devices) devices.insert(d.device);
  }
  absl::flat_hash_map<uint32_t, std::string> rank_of;
  for (const analysis::ProcessSummary& p : report.processes) rank_of[p.pid] = p.rank;

  std::string out;
  const char* sep = "";
  for (const char* c : kColumns) absl::StrAppend(&out, std::exchange(sep, ","), c);
  for (int32_t d : devices) {
    absl::StrAppend(&out, ",device", d, "_live_bytes_end,device", d, "_peak_bytes");
  }
  for (const std::string& st : stages) absl::StrAppend(&out, ",", CsvField("stage_peak:" + st));
  out += "\r\n";

  for (const analysis::StepRow& s : report.steps) {
    absl::StrAppend(&out, s.pid, ",", CsvField(rank_of[s.pid]), ",", s.step, ",");
    if (s.epoch >= 0) absl::StrAppend(&out, s.epoch);
    absl::StrAppend(&out, ",", absl::StrFormat("%.6f", s.duration_s), ",", s.live_bytes_end, ",",
                    s.peak_bytes, ",", s.mmap_live_bytes_end, ",", s.rss_bytes_end, ",",
                    s.alloc_bytes, ",", s.alloc_count, ",", s.free_bytes, ",", s.free_count, ",",
                    s.device_live_bytes_end, ",", s.device_peak_bytes, ",",
                    s.pinned_host_live_bytes_end, ",", s.pinned_host_peak_bytes);
    for (int32_t d : devices) {
      const analysis::DeviceStep* ds = nullptr;
      for (const analysis::DeviceStep& x : s.devices) {
        if (x.device == d) ds = &x;
      }
      if (ds != nullptr) {
        absl::StrAppend(&out, ",", ds->live_bytes_end, ",", ds->peak_bytes);
      } else {
        out += ",,";
      }
    }
    for (const std::string& st : stages) {
      auto it = s.stage_peaks.find(st);
      out += ',';
      if (it != s.stage_peaks.end()) absl::StrAppend(&out, it->second);
    }
    out += "\r\n";
  }
  return out;
}

}  // namespace memstep::report
