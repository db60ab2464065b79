#include "src/analysis/live_model.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/analysis/device_replay.h"
#include "src/analysis/frame_resolver.h"
#include "src/analysis/replay.h"
#include "src/analysis/trend.h"
#include "src/reader/tailer.h"

namespace memstep::analysis {
namespace {

constexpr size_t kRecentAlerts = 5;

// The last `cap` values, oldest first.
class Window {
 public:
  explicit Window(size_t cap) : cap_(cap) {}
  void Push(double v) {
    values_.push_back(v);
    if (values_.size() > cap_) values_.pop_front();
  }
  size_t size() const { return values_.size(); }
  double Slope() const {
    return TheilSenSlope(std::vector<double>(values_.begin(), values_.end()));
  }
  double front() const { return values_.front(); }
  double back() const { return values_.back(); }

 private:
  size_t cap_;
  std::deque<double> values_;
};

std::string LocalHost() {
  char host[256];
  if (gethostname(host, sizeof(host)) != 0) return "";
  host[sizeof(host) - 1] = '\0';
  return host;
}

}  // namespace

const char* AlertRuleName(uint8_t rule) {
  switch (rule) {
    case format::kAlertGrowth:
      return "growth";
    case format::kAlertPeak:
      return "peak";
    case format::kAlertStagePeak:
      return "stage_peak";
    case format::kAlertDevicePeak:
      return "device_peak";
    default:
      return "unknown";
  }
}

// One trace and what was learned from it so far.
struct LiveModel::Tracked {
  explicit Tracked(std::string path) : tailer(std::move(path)) {}

  // Once the header is read: who the process is.
  void Start(bool symbolize);
  // The new events: heap and device replays, stage peaks, step ends.
  void ApplyEvents();
  // A step ended: the exact counters and the site estimates join the windows.
  void EndStep(const reader::Event& e, const format::Counters& c);
  // The new alerts: counts by rule and the last few.
  void ApplyAlerts();
  // What the windows say now: growth, speed, stages, the top growing sites.
  void Summarize(size_t top_sites);
  // The `top_sites` largest positive slopes over the site window.
  std::vector<LiveSite> TopSites(size_t top_sites);
  // "function (file:line)" of a site; `symbolized` false when it should be
  // asked again later.
  std::string SiteName(uint64_t key, bool* symbolized);
  // Exited (trailer), gone (killed: `dead` and read to the end) or running.
  void SetState(bool dead);

  reader::TraceTailer tailer;
  std::unique_ptr<FrameResolver> resolver;  // over tailer.trace(), once its header is read
  HeapReplay heap;
  DeviceReplay device;
  Window host_live{kGrowthWindow};
  Window device_live{kGrowthWindow};
  Window step_end_ts{kGrowthWindow};
  // Site history at step ends: key = site index, device sites | 1 << 63.
  absl::flat_hash_map<uint64_t, Window> site_history;
  absl::flat_hash_map<uint64_t, std::string> site_names;  // same key
  std::map<std::string, LiveStage> stages;
  LiveProcess p;
};

LiveModel::LiveModel(std::string dir, LiveOptions options)
    : dir_(std::move(dir)), options_(options), local_host_(LocalHost()) {}

LiveModel::~LiveModel() = default;

bool LiveModel::ended() const {
  if (processes_.empty()) return false;
  for (const LiveProcess& p : processes_) {
    if (p.state != LiveProcess::State::kExited && p.state != LiveProcess::State::kGone &&
        p.state != LiveProcess::State::kUnreadable) {
      return false;
    }
  }
  return true;
}

uint64_t LiveModel::steps_done() const {
  uint64_t n = 0;
  for (const LiveProcess& p : processes_) n += p.steps_done;
  return n;
}

absl::Status LiveModel::Refresh() {
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) {
    struct stat st;
    if (stat(dir_.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(dir_, ": not a directory"));
    }
    return absl::NotFoundError(absl::StrCat(dir_, ": ", strerror(errno)));
  }
  while (dirent* ent = readdir(d)) {
    const std::string name = ent->d_name;
    if (!absl::EndsWith(name, ".trace") || tracked_.count(name) != 0) continue;
    auto t = std::make_unique<Tracked>(absl::StrCat(dir_, "/", name));
    t->p.path = t->tailer.path();
    tracked_.emplace(name, std::move(t));
  }
  closedir(d);
  last_bytes_read_ = 0;
  caught_up_ = true;
  processes_.clear();
  for (auto& [name, t] : tracked_) {
    Update(*t);
    processes_.push_back(t->p);
  }
  return absl::OkStatus();
}

void LiveModel::Update(Tracked& t) {
  LiveProcess& p = t.p;
  if (p.state == LiveProcess::State::kUnreadable || p.state == LiveProcess::State::kExited) return;
  // Ended without a trailer (killed), decided before reading: whatever the
  // poll below reads is then all the process ever wrote.
  const bool dead = p.host == local_host_ && p.pid != 0 &&
                    kill(static_cast<pid_t>(p.pid), 0) != 0 && errno == ESRCH;
  absl::Status polled = t.tailer.Poll();
  last_bytes_read_ += t.tailer.last_bytes_read();
  if (!polled.ok()) {
    p.state = LiveProcess::State::kUnreadable;
    p.problem = std::string(polled.message());
    return;
  }
  if (!t.tailer.header_ready()) return;
  if (t.resolver == nullptr) {
    t.Start(options_.symbolize);
    caught_up_ = false;  // once more, now that the pid is known (is it still running?)
  }
  if (!t.tailer.reached_end()) caught_up_ = false;
  t.ApplyEvents();
  t.ApplyAlerts();
  if (t.tailer.last_bytes_read() > 0) t.Summarize(options_.top_sites);
  t.SetState(dead);
}

void LiveModel::Tracked::Start(bool symbolize) {
  const reader::Trace& tr = tailer.trace();
  resolver = std::make_unique<FrameResolver>(tr, symbolize);
  heap.set_rounding(HostRoundingOf(tr));
  p.host = tr.hostname;
  p.rank = tr.RankValue("RANK");
  p.pid = tr.header.pid;
  p.command = tr.cmdline.substr(0, tr.cmdline.find('\0'));
  p.start_real_ns = tr.header.start_real_ns;
  p.state = LiveProcess::State::kRunning;
}

void LiveModel::Tracked::ApplyEvents() {
  const reader::Trace& tr = tailer.trace();
  for (const reader::Event& e : tr.events) {
    if (!device.Apply(e)) heap.Apply(e);
    if (e.tag != format::kTagStep && e.tag != format::kTagStage) continue;
    const format::Counters& c = tr.counters[e.counters];
    p.host_live = c.live_bytes;
    p.mmap_live = c.mmap_live_bytes;
    if (c.rss_bytes != 0) p.rss = c.rss_bytes;
    if (e.tag == format::kTagStage) {
      if (e.phase != 1) continue;
      LiveStage& s = stages[tr.String(e.str)];
      s.name = tr.String(e.str);
      s.step = e.step;
      s.last_peak = c.peak_bytes;
      s.max_peak = std::max(s.max_peak, c.peak_bytes);
      continue;
    }
    p.has_step = true;
    p.step = e.step;
    if (e.phase == 1) EndStep(e, c);
  }
  p.device_live = device.resident_total();
  p.device_peak = std::max(p.device_peak, p.device_live);
  if (tr.max_ts != 0) p.last_record_real_ns = p.start_real_ns + tr.max_ts;
  if (!tailer.corrupt().empty()) p.problem = tailer.corrupt();
}

void LiveModel::Tracked::EndStep(const reader::Event& e, const format::Counters& c) {
  ++p.steps_done;
  p.step_peak = c.peak_bytes;
  p.max_step_peak = std::max(p.max_step_peak, c.peak_bytes);
  host_live.Push(static_cast<double>(c.live_bytes));
  device_live.Push(static_cast<double>(device.resident_total()));
  step_end_ts.Push(static_cast<double>(e.ts));
  const auto& hs = heap.sites();
  for (size_t i = 0; i < hs.size(); ++i) {
    if (hs[i].live_bytes <= 0 && !site_history.contains(i)) continue;
    site_history.try_emplace(i, kSiteWindow).first->second.Push(hs[i].live_bytes);
  }
  const auto& ds = device.sites();
  for (size_t i = 0; i < ds.size(); ++i) {
    const uint64_t key = i | (uint64_t{1} << 63);
    if (ds[i].live_bytes <= 0 && !site_history.contains(key)) continue;
    site_history.try_emplace(key, kSiteWindow).first->second.Push(ds[i].live_bytes);
  }
}

void LiveModel::Tracked::ApplyAlerts() {
  for (const reader::Alert& a : tailer.trace().alerts) {
    LiveAlert la;
    la.step = a.step;
    la.rule = AlertRuleName(a.rule);
    la.stage = a.stage;
    la.value = a.value;
    la.threshold = a.threshold;
    ++p.alerts_by_rule[la.rule];
    ++p.alerts_total;
    p.recent_alerts.push_back(std::move(la));
    if (p.recent_alerts.size() > kRecentAlerts) p.recent_alerts.erase(p.recent_alerts.begin());
  }
}

void LiveModel::Tracked::Summarize(size_t top_sites) {
  p.growth_points = host_live.size();
  p.growth_per_step = host_live.Slope();
  p.device_growth_per_step = device_live.Slope();
  p.steps_per_second = 0;
  if (step_end_ts.size() >= 2 && step_end_ts.back() > step_end_ts.front()) {
    p.steps_per_second = static_cast<double>(step_end_ts.size() - 1) * 1e9 /
                         (step_end_ts.back() - step_end_ts.front());
  }
  p.stages.clear();
  for (const auto& [name, s] : stages) p.stages.push_back(s);
  p.top_sites = TopSites(top_sites);
}

std::vector<LiveSite> LiveModel::Tracked::TopSites(size_t top_sites) {
  std::vector<std::pair<double, uint64_t>> ranked;
  for (const auto& [key, w] : site_history) {
    if (w.size() < 3) continue;
    const double slope = w.Slope();
    if (slope > 0) ranked.emplace_back(slope, key);
  }
  const size_t k = std::min(ranked.size(), top_sites);
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<long>(k), ranked.end(),
                    [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  std::vector<LiveSite> sites;
  for (size_t i = 0; i < k; ++i) {
    const uint64_t key = ranked[i].second;
    LiveSite s;
    s.device = (key >> 63) != 0;
    const size_t index = static_cast<size_t>(key & ~(uint64_t{1} << 63));
    s.growth_per_step = ranked[i].first;
    s.live_bytes = s.device ? device.sites()[index].live_bytes : heap.sites()[index].live_bytes;
    // Names are kept once symbolized; until then (its STACK record or its
    // module's MAPPING not read yet, no symbols) it is asked again.
    auto it = site_names.find(key);
    if (it != site_names.end()) {
      s.name = it->second;
    } else {
      bool symbolized = false;
      s.name = SiteName(key, &symbolized);
      if (symbolized) site_names.emplace(key, s.name);
    }
    sites.push_back(std::move(s));
  }
  return sites;
}

std::string LiveModel::Tracked::SiteName(uint64_t key, bool* symbolized) {
  const bool is_device = (key >> 63) != 0;
  const size_t index = static_cast<size_t>(key & ~(uint64_t{1} << 63));
  const uint64_t stack =
      is_device ? device.sites()[index].key.stack : heap.sites()[index].key.stack;
  const uint64_t ts = is_device ? device.sites()[index].first_ts : heap.sites()[index].first_ts;
  std::vector<Frame> frames = resolver->Resolve(stack, ts, is_device);
  std::string name = absl::StrCat("stack#", stack);
  if (!frames.empty()) {
    const Frame& f = frames.front();
    name = f.function;
    if (!f.file.empty()) absl::StrAppend(&name, " (", Basename(f.file), ":", f.line, ")");
    if (!is_device && heap.sites()[index].key.kind == HeapReplay::Kind::kMmap) {
      absl::StrAppend(&name, " [mmap]");
    }
  }
  *symbolized = !frames.empty() && frames.front().symbolized;
  return name;
}

void LiveModel::Tracked::SetState(bool dead) {
  const reader::Trace& tr = tailer.trace();
  if (tr.has_trailer) {
    p.state = LiveProcess::State::kExited;
    p.clean_exit = tr.trailer.clean_exit;
  } else if (dead && tailer.reached_end()) {
    p.state = LiveProcess::State::kGone;
  }
}

}  // namespace memstep::analysis
