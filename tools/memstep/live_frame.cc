// The frame of `memstep top` (live_view.h): a header, one row per process,
// then the growing sites, stage peaks and recent alerts.

#include <time.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/report/report.h"
#include "tools/memstep/live_view.h"

namespace memstep::cli {
namespace {

using analysis::LiveModel;
using analysis::LiveProcess;

std::string Bytes(double b) { return report::HumanBytes(b); }

std::string Rate(double b) { return absl::StrCat(b > 0 ? "+" : "", report::HumanBytes(b)); }

const char* StateName(const LiveProcess& p) {
  switch (p.state) {
    case LiveProcess::State::kStarting:
      return "starting";
    case LiveProcess::State::kRunning:
      return "running";
    case LiveProcess::State::kExited:
      return p.clean_exit ? "exited" : "exited*";
    case LiveProcess::State::kGone:
      return "gone";
    case LiveProcess::State::kUnreadable:
      return "unreadable";
  }
  return "?";
}

// "r3 pid 4242 host" (the rank when the process has one).
std::string Who(const LiveProcess& p) {
  std::string who = p.rank.empty() ? "" : absl::StrCat("r", p.rank, " ");
  absl::StrAppend(&who, "pid ", p.pid);
  return who;
}

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Cuts a line to `width` columns (bytes: the frame is ASCII but for names,
// which are cut the same way).
void Fit(std::string* line, size_t width) {
  if (width > 0 && line->size() > width) line->resize(width);
}

// The device columns only when a process has device memory, so that a
// host-only job fits 80 columns.
bool AnyDevice(const std::vector<LiveProcess>& ps) {
  bool device = false;
  for (const LiveProcess& p : ps) device |= p.device_peak > 0;
  return device;
}

// The title line, the status line (running, ended, alerts), a blank line
// and the process table's column titles.
std::vector<std::string> Header(const LiveModel& model, const std::string& clock) {
  const std::vector<LiveProcess>& ps = model.processes();
  size_t running = 0;
  uint64_t alerts = 0;
  for (const LiveProcess& p : ps) {
    running += p.state == LiveProcess::State::kRunning || p.state == LiveProcess::State::kStarting;
    alerts += p.alerts_total;
  }
  std::vector<std::string> head;
  head.push_back(absl::StrCat("memstep top  ", model.dir(), "  ", clock));
  std::string status;
  if (ps.empty()) {
    status = "waiting: no traces in the run directory yet";
  } else if (model.ended()) {
    status = absl::StrCat("RUN ENDED: ", ps.size(), ps.size() == 1 ? " process" : " processes",
                          ", none running (final state)");
  } else {
    status = absl::StrCat("running: ", running, " of ", ps.size(),
                          ps.size() == 1 ? " process" : " processes");
  }
  absl::StrAppend(&status, "   alerts: ", alerts, "   q quits");
  head.push_back(status);
  head.push_back("");
  std::string title = absl::StrFormat("%-26s %-8s %7s %6s %10s %12s %10s", "PROCESS", "STATE",
                                      "STEP", "STEP/S", "HOST LIVE", "GROWTH/STEP", "STEP PEAK");
  if (AnyDevice(ps)) {
    absl::StrAppend(&title, absl::StrFormat(" %11s %12s", "DEVICE LIVE", "DEV GROWTH"));
  }
  head.push_back(absl::StrCat(title, " ALERTS"));
  return head;
}

// One row per process (and a line for its problem, if any).
std::vector<std::string> ProcessRows(const std::vector<LiveProcess>& ps) {
  const bool device = AnyDevice(ps);
  std::vector<std::string> rows;
  for (const LiveProcess& p : ps) {
    std::string who = absl::StrCat(Who(p), " ", Basename(p.command));
    if (who.size() > 26) who.resize(26);
    if (p.state == LiveProcess::State::kUnreadable || p.state == LiveProcess::State::kStarting) {
      rows.push_back(absl::StrFormat("%-26s %-8s %s", who, StateName(p),
                                     p.problem.empty() ? Basename(p.path) : p.problem));
      continue;
    }
    std::string row =
        absl::StrFormat("%-26s %-8s %7s %6s %10s %12s %10s", who, StateName(p),
                        p.has_step ? absl::StrCat(p.step) : "-",
                        p.steps_per_second > 0 ? absl::StrFormat("%.1f", p.steps_per_second) : "-",
                        Bytes(static_cast<double>(p.host_live)),
                        p.growth_points >= 2 ? Rate(p.growth_per_step) : "-",
                        p.steps_done > 0 ? Bytes(static_cast<double>(p.step_peak)) : "-");
    if (device) {
      absl::StrAppend(&row,
                      absl::StrFormat(" %11s %12s", Bytes(static_cast<double>(p.device_live)),
                                      p.growth_points >= 2 ? Rate(p.device_growth_per_step) : "-"));
    }
    rows.push_back(absl::StrFormat("%s %6d", row, p.alerts_total));
    if (!p.problem.empty()) rows.push_back(absl::StrCat("  ", p.problem));
  }
  return rows;
}

void AppendGrowingSites(const std::vector<LiveProcess>& ps, std::vector<std::string>& tail) {
  bool any_sites = false;
  for (const LiveProcess& p : ps) any_sites |= !p.top_sites.empty();
  if (!any_sites) return;
  tail.push_back("");
  tail.push_back(absl::StrCat("GROWING SITES (slope over the last ", analysis::kSiteWindow,
                              " steps; live estimate)"));
  for (const LiveProcess& p : ps) {
    for (const analysis::LiveSite& s : p.top_sites) {
      tail.push_back(absl::StrFormat("  %-12s %13s/step %11s  %s%s", Who(p),
                                     Rate(s.growth_per_step), Bytes(s.live_bytes),
                                     s.device ? "[device] " : "", s.name));
    }
  }
}

void AppendStagePeaks(const std::vector<LiveProcess>& ps, std::vector<std::string>& tail) {
  bool any_stages = false;
  for (const LiveProcess& p : ps) any_stages |= !p.stages.empty();
  if (!any_stages) return;
  tail.push_back("");
  tail.push_back("STAGE PEAKS (latest / largest)");
  for (const LiveProcess& p : ps) {
    std::string line = absl::StrFormat("  %-12s", Who(p));
    for (const analysis::LiveStage& s : p.stages) {
      absl::StrAppend(&line, "  ", s.name, " ", Bytes(static_cast<double>(s.last_peak)), " / ",
                      Bytes(static_cast<double>(s.max_peak)));
    }
    if (!p.stages.empty()) tail.push_back(line);
  }
}

void AppendRecentAlerts(const std::vector<LiveProcess>& ps, std::vector<std::string>& tail) {
  uint64_t alerts = 0;
  for (const LiveProcess& p : ps) alerts += p.alerts_total;
  if (alerts == 0) return;
  tail.push_back("");
  tail.push_back("RECENT ALERTS");
  for (const LiveProcess& p : ps) {
    for (const analysis::LiveAlert& a : p.recent_alerts) {
      std::string what = a.rule == "growth"
                             ? absl::StrCat(Bytes(static_cast<double>(a.value)), "/step > ",
                                            Bytes(static_cast<double>(a.threshold)), "/step")
                             : absl::StrCat(Bytes(static_cast<double>(a.value)), " > ",
                                            Bytes(static_cast<double>(a.threshold)));
      tail.push_back(absl::StrFormat("  %-12s step %-8d %s%s: %s", Who(p), a.step, a.rule,
                                     a.stage.empty() ? "" : absl::StrCat("(", a.stage, ")"), what));
    }
  }
}

// Fits the height: the header stays, then the processes (the last line says
// how many did not fit), then the details; each line cut to `width`.
std::vector<std::string> FitScreen(std::vector<std::string> head, std::vector<std::string> rows,
                                   const std::vector<std::string>& tail, size_t width,
                                   size_t height) {
  std::vector<std::string> out = std::move(head);
  size_t room = height == 0 ? SIZE_MAX : (height > out.size() ? height - out.size() : 0);
  if (rows.size() > room) {
    const size_t keep = room > 0 ? room - 1 : 0;
    const size_t more = rows.size() - keep;
    rows.resize(keep);
    if (room > 0) rows.push_back(absl::StrCat("... ", more, " more lines (a taller terminal)"));
  }
  out.insert(out.end(), rows.begin(), rows.end());
  room -= std::min(room, rows.size());
  for (size_t i = 0; i < tail.size() && i < room; ++i) out.push_back(tail[i]);
  for (std::string& line : out) Fit(&line, width);
  if (height > 0 && out.size() > height) out.resize(height);
  return out;
}

}  // namespace

std::vector<std::string> RenderFrame(const LiveModel& model, size_t width, size_t height,
                                     const std::string& clock) {
  const std::vector<LiveProcess>& ps = model.processes();
  std::vector<std::string> tail;
  AppendGrowingSites(ps, tail);
  AppendStagePeaks(ps, tail);
  AppendRecentAlerts(ps, tail);
  return FitScreen(Header(model, clock), ProcessRows(ps), tail, width, height);
}

}  // namespace memstep::cli
