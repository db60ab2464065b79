// The HTML report's flame graphs (html_internal.h WriteFlames): each site's
// stack, root first under its memory kind (and process, with more than one),
// merged into one tree per view; siblings below kFlameMinFraction of the
// view's total merged into "[N smaller frames]", stacks cut kFlameMaxDepth
// frames below the kind frame. Views: live at the end (host: malloc family
// and mmap; device), then each stage peak's sites (the first kMaxFlames).

#include <algorithm>
#include <cmath>
#include <map>

#include "src/report/html_internal.h"

namespace memstep::report::html {
namespace {

using analysis::ProcessSummary;
using analysis::Report;
using analysis::Site;
using analysis::SiteKind;

constexpr size_t kMaxFlames = 48;      // flame graphs (end, then stage peaks)
constexpr size_t kFlameMaxDepth = 48;  // frames below the kind frame
constexpr double kFlameMinFraction = 0.002;

// A flame graph's tree: stacks merged root first.
class FlameTree {
 public:
  FlameTree() { nodes_.push_back({"all", 0, {}}); }
  void Add(const std::vector<std::string>& path, double value) {
    if (!(value > 0)) return;
    size_t at = 0;
    nodes_[0].value += value;
    for (const std::string& name : path) {
      auto [it, inserted] = nodes_[at].children.try_emplace(name, nodes_.size());
      if (inserted) nodes_.push_back({name, 0, {}});
      at = it->second;
      nodes_[at].value += value;
    }
  }
  double total() const { return nodes_[0].value; }
  // [name, value, [children...]] with small siblings merged.
  void Write(JsonWriter& j) const { Write(0, 0, nodes_[0].value * kFlameMinFraction, j); }

 private:
  struct Node {
    std::string name;
    double value;
    std::map<std::string, size_t> children;
  };
  void Write(size_t at, size_t depth, double min_value, JsonWriter& j) const {
    const Node& node = nodes_[at];
    j.BeginArray();
    j.String(node.name);
    j.Double(std::round(node.value));
    j.BeginArray();
    if (depth < kFlameMaxDepth + 2) {
      std::vector<size_t> kids;
      for (const auto& [name, index] : node.children) kids.push_back(index);
      std::stable_sort(kids.begin(), kids.end(),
                       [&](size_t a, size_t b) { return nodes_[a].value > nodes_[b].value; });
      double rest = 0;
      size_t merged = 0;
      for (size_t k : kids) {
        if (nodes_[k].value >= min_value) {
          Write(k, depth + 1, min_value, j);
        } else {
          rest += nodes_[k].value;
          ++merged;
        }
      }
      if (merged > 0 && std::round(rest) > 0) {
        j.BeginArray();
        j.String(merged == 1 ? "[1 smaller frame]" : absl::StrCat("[", merged, " smaller frames]"));
        j.Double(std::round(rest));
        j.BeginArray();
        j.EndArray();
        j.EndArray();
      }
    }
    j.EndArray();
    j.EndArray();
  }
  std::vector<Node> nodes_;
};

std::vector<std::string> StackPath(const Report& r, uint32_t pid, const std::string& kind,
                                   const Site* site, uint64_t stack_id) {
  std::vector<std::string> path;
  if (r.processes.size() > 1) {
    std::string root = absl::StrCat("[pid ", pid);
    for (const ProcessSummary& p : r.processes) {
      if (p.pid == pid && !p.rank.empty()) absl::StrAppend(&root, " rank ", p.rank);
    }
    path.push_back(root + "]");
  }
  path.push_back(absl::StrCat("[", kind, "]"));
  if (site == nullptr) {
    path.push_back(absl::StrCat("[stack ", stack_id, "]"));
  } else if (site->frames.empty()) {
    path.push_back("[no stack]");
  } else {
    for (auto f = site->frames.rbegin(); f != site->frames.rend(); ++f) path.push_back(f->function);
  }
  return path;
}

void WriteFlame(const std::string& title, const char* group, const FlameTree& tree, JsonWriter& j) {
  j.BeginObject();
  j.Field("title", title);
  j.Field("group", group);
  j.Field("total", std::round(tree.total()));
  j.Key("tree");
  tree.Write(j);
  j.EndObject();
}

}  // namespace

void WriteFlames(const Report& r, JsonWriter& j) {
  std::map<uint64_t, const Site*> by_id;
  for (const Site& s : r.sites) by_id[s.id] = &s;
  j.Key("flames");
  j.BeginArray();
  FlameTree host_end, device_end;
  for (const Site& s : r.sites) {
    const bool host = analysis::IsHost(s.kind);
    (host ? host_end : device_end)
        .Add(StackPath(r, s.pid, KindName(s.kind, s.device), &s, s.stack_id), s.live_bytes_end);
  }
  size_t written = 0, stage_written = 0;
  if (host_end.total() > 0 || device_end.total() == 0) {
    WriteFlame("host: live at the end", "end", host_end, j);
    ++written;
  }
  if (device_end.total() > 0) {
    WriteFlame("device: live at the end", "end", device_end, j);
    ++written;
  }
  for (const analysis::StagePeak& sp : r.stage_peaks) {
    if (written >= kMaxFlames) break;
    FlameTree tree;
    const std::string kind = KindName(sp.kind, sp.device);
    for (const analysis::PeakSite& ps : sp.top_sites) {
      auto it = by_id.find(ps.site_id);
      const Site* site = it == by_id.end() ? nullptr : it->second;
      tree.Add(StackPath(r, sp.pid, site != nullptr ? KindName(site->kind, site->device) : kind,
                         site, ps.stack_id),
               ps.live_bytes);
    }
    std::string title = absl::StrCat(sp.kind == SiteKind::kHost ? "host" : kind, ": stage ",
                                     sp.stage, " at its peak (step ", sp.step_of_max, ")");
    if (r.processes.size() > 1) absl::StrAppend(&title, ", pid ", sp.pid);
    WriteFlame(title, "stage", tree, j);
    ++written;
    ++stage_written;
  }
  j.EndArray();
  j.Field("flames_left_out", D(r.stage_peaks.size() - stage_written));
}

}  // namespace memstep::report::html
