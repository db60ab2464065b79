// Folded stacks ("a;b;c 1234"): the input of flamegraph.pl, inferno and
// speedscope. One line per distinct stack of the chosen view, root first.
//
// Worked example: a host site whose stack, innermost first, is
//   malloc_wrapper (inlined into) load_batch, train_step, main
// with 1,572,864.4 estimated bytes live at the end, and a device site of
// device 0 allocated from main with 2 MiB, print for --view live-end
//   [device 0];main 2097152
//   [host];main;train_step;load_batch;malloc_wrapper 1572864
// (sorted by stack; identical stacks summed before rounding).

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/report/formats.h"

namespace memstep::report {
namespace {

using analysis::GrowthClass;
using analysis::Report;
using analysis::Site;

// A frame name without the separators of the format: ';' separates frames,
// and a line ends at a newline; the count follows the last blank, so blanks
// inside names are fine.
std::string FoldedFrame(const std::string& name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    if (c == ';') {
      out += ',';
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out.empty() ? "?" : out;
}

std::string KindFrame(analysis::SiteKind kind, int32_t device) {
  if (analysis::IsHost(kind) || device < 0) return absl::StrCat("[", SiteKindName(kind), "]");
  return absl::StrCat("[", SiteKindName(kind), " ", device, "]");
}

class Folder {
 public:
  explicit Folder(const Report& r) : report_(r) {
    for (const analysis::ProcessSummary& p : r.processes) {
      std::string root = absl::StrCat("[pid ", p.pid);
      if (!p.rank.empty()) absl::StrAppend(&root, " rank ", FoldedFrame(p.rank));
      process_root_[p.pid] = absl::StrCat(root, "]");
    }
  }

  void Add(uint32_t pid, const std::string& kind_frame, const std::vector<analysis::Frame>* frames,
           uint64_t stack_id, double value) {
    if (!(value > 0)) return;
    std::vector<std::string> parts;
    if (report_.processes.size() > 1) parts.push_back(process_root_[pid]);
    parts.push_back(kind_frame);
    if (frames == nullptr) {
      parts.push_back(absl::StrCat("[stack ", stack_id, "]"));
    } else if (frames->empty()) {
      parts.push_back("[no stack]");
    } else {
      for (auto f = frames->rbegin(); f != frames->rend(); ++f) {
        parts.push_back(FoldedFrame(f->function));
      }
    }
    lines_[absl::StrJoin(parts, ";")] += value;
  }

  std::string Finish() const {
    std::string out;
    for (const auto& [stack, value] : lines_) {
      const long long v = std::llround(value);
      if (v > 0) absl::StrAppend(&out, stack, " ", v, "\n");
    }
    return out;
  }

 private:
  const Report& report_;
  absl::flat_hash_map<uint32_t, std::string> process_root_;
  std::map<std::string, double> lines_;
};

}  // namespace

absl::StatusOr<FoldedView> ParseFoldedView(const std::string& text) {
  FoldedView v;
  if (text == "live-end") return v;
  if (text == "peak") {
    v.kind = FoldedView::Kind::kPeak;
    return v;
  }
  if (absl::StartsWith(text, "stage:") && text.size() > 6) {
    v.kind = FoldedView::Kind::kStage;
    v.stage = text.substr(6);
    return v;
  }
  if (absl::StartsWith(text, "class:")) {
    const std::string name = absl::AsciiStrToUpper(text.substr(6));
    v.kind = FoldedView::Kind::kClass;
    for (GrowthClass c : {GrowthClass::kLeak, GrowthClass::kBoundedGrowth, GrowthClass::kWarmupOnly,
                          GrowthClass::kNoTrend, GrowthClass::kInsufficient}) {
      if (name == analysis::GrowthClassName(c) ||
          (name == "BOUNDED" && c == GrowthClass::kBoundedGrowth)) {
        v.cls = c;
        return v;
      }
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--view: '", text,
      "' is not a view; expected live-end, peak, stage:NAME or class:CLASS (CLASS: LEAK, "
      "BOUNDED_GROWTH, WARMUP_ONLY, NO_TREND, INSUFFICIENT)"));
}

absl::StatusOr<std::string> FormatFolded(const Report& report, const FoldedView& view) {
  Folder folder(report);
  if (view.kind == FoldedView::Kind::kStage) {
    absl::flat_hash_map<uint64_t, const Site*> by_id;
    for (const Site& s : report.sites) by_id[s.id] = &s;
    bool found = false;
    std::vector<std::string> names;
    for (const analysis::StagePeak& sp : report.stage_peaks) {
      if (names.empty() || names.back() != sp.stage) names.push_back(sp.stage);
      if (sp.stage != view.stage) continue;
      found = true;
      const std::string kind = KindFrame(sp.kind, sp.device);
      for (const analysis::PeakSite& ps : sp.top_sites) {
        auto it = by_id.find(ps.site_id);
        folder.Add(sp.pid, kind, it != by_id.end() ? &it->second->frames : nullptr, ps.stack_id,
                   ps.live_bytes);
      }
    }
    if (!found) {
      std::sort(names.begin(), names.end());
      names.erase(std::unique(names.begin(), names.end()), names.end());
      const std::string known = names.empty()
                                    ? " (it has no stages)"
                                    : absl::StrCat(" (stages: ", absl::StrJoin(names, ", "), ")");
      return absl::NotFoundError(absl::StrCat("--view stage:", view.stage, ": no stage '",
                                              view.stage, "' in the trace", known));
    }
    return folder.Finish();
  }
  for (const Site& s : report.sites) {
    if (view.kind == FoldedView::Kind::kClass && s.growth.cls != view.cls) continue;
    const double value =
        view.kind == FoldedView::Kind::kPeak ? s.live_bytes_at_peak : s.live_bytes_end;
    folder.Add(s.pid, KindFrame(s.kind, s.device), &s.frames, s.stack_id, value);
  }
  return folder.Finish();
}

}  // namespace memstep::report
