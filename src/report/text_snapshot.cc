// The text report's "Out of memory" section: one block per MEM_SNAPSHOT
// (analysis::MemorySnapshot), first line
//   out of memory at step 12, stage forward, requested 2.0 GiB, free 512 MiB of 80 GiB: top sites
//   ...
// then the device sites and the host sites live at that moment, largest
// first, each with its estimate, interval (sampled sites) and innermost frame.

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/report/text_internal.h"

namespace memstep::report::internal {
namespace {

using analysis::MemorySnapshot;
using analysis::PeakSite;
using analysis::Report;
using analysis::Site;

const Site* FindSite(const Report& r, uint64_t id) {
  for (const Site& s : r.sites) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

void AppendSiteLines(const Report& r, const std::vector<PeakSite>& sites, const ReportOptions& o,
                     std::string& out) {
  const size_t shown = std::min<size_t>(sites.size(), o.top > 0 ? o.top : sites.size());
  for (size_t i = 0; i < shown; ++i) {
    const PeakSite& p = sites[i];
    absl::StrAppend(&out, "      ", HumanBytes(p.live_bytes));
    if (p.live_bytes_high >= 0) {
      absl::StrAppend(&out, " [", HumanBytes(p.live_bytes_low), ", ", HumanBytes(p.live_bytes_high),
                      "]");
    }
    const Site* site = FindSite(r, p.site_id);
    if (site == nullptr) {
      absl::StrAppend(&out, "  stack ", p.stack_id, "\n");
      continue;
    }
    absl::StrAppend(&out, "  site #", site->id, " ", SiteKindName(site->kind), "\n");
    ReportOptions few = o;  // a few frames each: the full stacks are in the site tables
    few.frames = o.frames > 0 && o.frames < 3 ? o.frames : 3;
    AppendFrames(site->frames, few, out);
  }
}

}  // namespace

std::string SnapshotHeadline(const MemorySnapshot& m) {
  std::string out = m.out_of_memory ? "out of memory" : "memory snapshot";
  absl::StrAppend(&out, " at step ", m.step, ", stage ", m.stage.empty() ? "-" : m.stage);
  if (m.out_of_memory) absl::StrAppend(&out, ", requested ", ExactBytes(m.requested));
  if (!m.free_source.empty()) {
    absl::StrAppend(&out, ", free ", HumanBytes(static_cast<double>(m.free_bytes)));
    if (m.total_bytes > 0) {
      absl::StrAppend(&out, " of ", HumanBytes(static_cast<double>(m.total_bytes)));
    }
    if (m.free_source == "step_end") absl::StrAppend(&out, " (at the last step end)");
  } else {
    absl::StrAppend(&out, ", free unknown");
  }
  return out;
}

void AppendMemorySnapshots(const Report& r, const ReportOptions& o, std::string& out) {
  if (r.memory_snapshots.empty()) return;
  absl::StrAppend(&out, "\nOut of memory and memory snapshots: ", r.memory_snapshots.size(), "\n");
  for (const MemorySnapshot& m : r.memory_snapshots) {
    absl::StrAppend(&out, "  ", SnapshotHeadline(m), ": top sites ...\n");
    absl::StrAppend(&out, "    ", Seconds(m.time_s), "  cause ", m.cause);
    if (!m.api.empty()) absl::StrAppend(&out, " (", m.api, ")");
    if (r.processes.size() > 1) absl::StrAppend(&out, "  pid ", m.pid);
    absl::StrAppend(&out, "\n    device ",
                    m.device < 0 ? std::string("(all)") : absl::StrCat(m.device), ": ",
                    ExactBytes(m.device_resident_bytes), " resident (exact)\n");
    AppendSiteLines(r, m.device_sites, o, out);
    absl::StrAppend(&out, "    host heap: ", HumanBytes(m.host_live_bytes), " live (estimated)\n");
    AppendSiteLines(r, m.host_sites, o, out);
  }
}

}  // namespace memstep::report::internal
