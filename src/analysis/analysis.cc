// AnalyzeRun: reads every trace of a run, replays each process (replay.h),
// builds its step table from the exact counters, symbolizes the sites' stacks
// and assembles the Report.
//
// Sites are kept per (process, kind, stack id): two stack ids whose
// symbolized frames happen to be identical stay two sites (this keeps ids
// stable and needs no symbolization to group; the writer deduplicates stacks
// by their instruction pointers already).
//
// Step rows come from STEP end records: live/peak/mmap/rss are the end
// record's counters; alloc/free deltas are end minus the matching STEP begin
// (or the previous boundary's counters when the begin was not recorded);
// stage peaks are the max of STAGE end peak_bytes per stage name and step.

#include "src/analysis/analysis.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/analysis/replay.h"
#include "src/reader/reader.h"
#ifdef MEMSTEP_HAVE_SYMBOLIZER
#include "src/symbolize/symbolizer.h"
#endif

namespace memstep::analysis {
namespace {

using reader::Event;
using reader::Trace;

uint64_t Sub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Allocator entry points stripped from the top of stacks when they are found
// in libc or libstdc++.
bool IsAllocatorFrame(const Frame& f) {
  const std::string base = Basename(f.module);
  if (!absl::StartsWith(base, "libc.so") && !absl::StartsWith(base, "libc-") &&
      !absl::StartsWith(base, "libstdc++")) {
    return false;
  }
  static const char* const kNames[] = {
      "malloc", "calloc", "realloc", "reallocarray", "free", "posix_memalign",
      "aligned_alloc", "memalign", "valloc", "pvalloc", "__libc_malloc", "__libc_calloc",
      "__libc_realloc", "__libc_memalign", "mmap", "mmap64", "__mmap", "munmap", "mremap",
      "__mremap", "operator new", "operator new[]"};
  for (const char* name : kNames) {
    if (f.function == name || absl::StartsWith(f.function, absl::StrCat(name, "("))) return true;
  }
  return false;
}

// Process and thread start-up frames at the bottom of every stack, dropped:
// they say nothing about who allocated.
bool IsStartupFrame(const Frame& f) {
  static const char* const kNames[] = {"_start", "__libc_start_main", "__libc_start_call_main",
                                       "start_thread", "clone", "clone3", "__clone",
                                       "__clone3", "__clone_internal"};
  for (const char* name : kNames) {
    if (f.function == name || absl::StartsWith(f.function, absl::StrCat(name, "@"))) return true;
  }
  return false;
}

class FrameResolver {
 public:
  FrameResolver(const Trace& trace, bool symbolize) : trace_(trace) {
#ifdef MEMSTEP_HAVE_SYMBOLIZER
    if (symbolize) symbolizer_ = std::make_unique<symbolize::Symbolizer>();
#else
    (void)symbolize;
#endif
  }

  // Frames of one stack, with memstep's and the allocator's frames stripped.
  std::vector<Frame> Resolve(uint64_t stack_id, uint64_t ts) {
    std::vector<Frame> out;
    auto it = trace_.stacks.find(stack_id);
    if (it == trace_.stacks.end()) return out;
    bool leading = true;
    for (uint64_t ip : it->second) {
      const std::vector<Frame>& frames = FramesOf(ip, ts);
      if (leading) {
        const Frame& outer = frames.back();
        if (absl::EndsWith(outer.module, "libmemstep.so") || IsAllocatorFrame(outer)) continue;
        leading = false;
      }
      out.insert(out.end(), frames.begin(), frames.end());
    }
    while (out.size() > 1 && IsStartupFrame(out.back())) out.pop_back();
    return out;
  }

 private:
  // The mapping covering `ip` that was loaded at `ts`, else the last one
  // covering it; -1 if none.
  int64_t MappingOf(uint64_t ip, uint64_t ts) const {
    int64_t fallback = -1;
    for (size_t i = 0; i < trace_.mappings.size(); ++i) {
      const reader::Mapping& m = trace_.mappings[i];
      if (ip < m.start || ip >= m.end) continue;
      if (m.ts <= ts && ts < m.gone_ts) return static_cast<int64_t>(i);
      fallback = static_cast<int64_t>(i);
    }
    return fallback;
  }

  const std::vector<Frame>& FramesOf(uint64_t ip, uint64_t ts) {
    const int64_t mi = MappingOf(ip, ts);
    auto [it, inserted] = cache_.try_emplace(std::make_pair(mi, ip));
    if (!inserted) return it->second;
    std::vector<Frame>& frames = it->second;
    if (mi < 0) {
      Frame f;
      f.ip = ip;
      f.function = absl::StrFormat("0x%x", ip);
      frames.push_back(f);
      return frames;
    }
    const reader::Mapping& m = trace_.mappings[mi];
    const uint64_t offset = ip - m.load_bias;
#ifdef MEMSTEP_HAVE_SYMBOLIZER
    if (symbolizer_ != nullptr) {
      symbolize::Module module{m.path, m.build_id, m.load_bias};
      for (const symbolize::SymbolFrame& s : symbolizer_->Symbolize(module, ip, true)) {
        Frame f;
        f.ip = ip;
        f.function = s.function;
        f.file = s.file;
        f.line = s.line;
        f.module = m.path;
        f.inlined = s.inlined;
        f.module_offset = offset;
        frames.push_back(std::move(f));
      }
    }
#endif
    if (frames.empty()) {
      Frame f;
      f.ip = ip;
      f.function = absl::StrFormat("%s+0x%x", Basename(m.path), offset);
      f.module = m.path;
      f.module_offset = offset;
      frames.push_back(std::move(f));
    }
    return frames;
  }

  const Trace& trace_;
#ifdef MEMSTEP_HAVE_SYMBOLIZER
  std::unique_ptr<symbolize::Symbolizer> symbolizer_;
#endif
  absl::flat_hash_map<std::pair<int64_t, uint64_t>, std::vector<Frame>> cache_;
};

struct ProcessResult {
  ProcessSummary summary;
  std::vector<StepRow> steps;
  std::vector<Site> sites;  // live_bytes_by_step indexed like `steps`
};

// Builds the step rows and the process totals from the exact counters.
void BuildSteps(const Trace& t, ProcessResult& r,
                absl::flat_hash_map<uint64_t, size_t>& row_of_step) {
  struct Begin {
    uint64_t ts;
    format::Counters c;
  };
  absl::flat_hash_map<uint64_t, Begin> begins;
  std::map<uint64_t, StepRow> rows;
  std::map<uint64_t, std::map<std::string, uint64_t>> stage_peaks;
  format::Counters prev{};  // counters at the previous STEP end
  const format::Counters* last = nullptr;
  uint64_t peak = 0;
  for (const Event& e : t.events) {
    if (e.tag != format::kTagStep && e.tag != format::kTagStage) continue;
    const format::Counters& c = t.counters[e.counters];
    last = &c;
    peak = std::max({peak, c.peak_bytes, c.live_bytes});
    if (e.tag == format::kTagStage) {
      if (e.phase == 1) {
        uint64_t& p = stage_peaks[e.step][t.String(e.str)];
        p = std::max(p, c.peak_bytes);
      }
      continue;
    }
    if (e.phase == 0) {
      begins[e.step] = Begin{e.ts, c};
      continue;
    }
    auto b = begins.find(e.step);
    const format::Counters& base = b != begins.end() ? b->second.c : prev;
    StepRow row;
    row.step = e.step;
    row.pid = t.header.pid;
    row.live_bytes_end = c.live_bytes;
    row.peak_bytes = c.peak_bytes;
    row.mmap_live_bytes_end = c.mmap_live_bytes;
    row.rss_bytes_end = c.rss_bytes;
    row.alloc_bytes = Sub(c.alloc_bytes, base.alloc_bytes);
    row.alloc_count = Sub(c.alloc_count, base.alloc_count);
    row.free_bytes = Sub(c.free_bytes, base.free_bytes);
    row.free_count = Sub(c.free_count, base.free_count);
    if (b != begins.end()) row.duration_s = static_cast<double>(Sub(e.ts, b->second.ts)) / 1e9;
    rows[e.step] = row;
    prev = c;
  }
  for (auto& [step, row] : rows) {
    auto sp = stage_peaks.find(step);
    if (sp != stage_peaks.end()) row.stage_peaks = sp->second;
    row_of_step[step] = r.steps.size();
    r.steps.push_back(std::move(row));
  }

  ProcessSummary& s = r.summary;
  const format::Counters* totals = t.has_trailer ? &t.trailer.counters : last;
  if (t.has_trailer) peak = std::max({peak, totals->peak_bytes, totals->live_bytes});
  if (totals != nullptr) {
    s.alloc_bytes = totals->alloc_bytes;
    s.alloc_count = totals->alloc_count;
    s.free_bytes = totals->free_bytes;
    s.free_count = totals->free_count;
    s.live_bytes_end = totals->live_bytes;
    s.mmap_live_bytes_end = totals->mmap_live_bytes;
    s.rss_bytes_end = totals->rss_bytes;
  }
  s.peak_bytes = peak;
}

void FillSummary(const Trace& t, const std::string& path, ProcessSummary& s) {
  s.pid = t.header.pid;
  s.ppid = t.header.ppid;
  s.fork_child = (t.header.flags & format::kFlagForkChild) != 0;
  s.trace_path = path;
  s.cmdline = t.cmdline;
  while (!s.cmdline.empty() && s.cmdline.back() == '\0') s.cmdline.pop_back();
  std::replace(s.cmdline.begin(), s.cmdline.end(), '\0', ' ');
  s.hostname = t.hostname;
  s.rank = t.RankValue("RANK");
  for (const reader::Lost& l : t.lost) {
    s.lost_records += l.records;
    s.lost_bytes += l.bytes;
  }
  const uint64_t end_ts = t.has_trailer ? std::max(t.trailer.ts, t.max_ts) : t.max_ts;
  s.duration_s = static_cast<double>(end_ts) / 1e9;
  s.clean_exit = t.has_trailer && t.trailer.clean_exit;
  s.truncated = t.truncated;
  s.truncated_at_offset = t.truncated_at_offset;
  s.unknown_refs = t.unknown_refs;
  s.sample_interval = static_cast<double>(t.header.sample_interval);
  for (const reader::Notice& n : t.notices) {
    s.notices.push_back(absl::StrCat("[", n.code, "] ", n.message));
  }
}

ProcessResult AnalyzeTrace(const Trace& t, const std::string& path, const Options& options) {
  ProcessResult r;
  FillSummary(t, path, r.summary);
  absl::flat_hash_map<uint64_t, size_t> row_of_step;
  BuildSteps(t, r, row_of_step);

  // Pass 1: the whole replay, per-step snapshots and the position of the peak.
  HeapReplay replay;
  std::vector<std::vector<double>> by_step;  // [site][row]
  double peak = -1;
  size_t peak_index = 0;
  uint64_t peak_ts = 0;
  for (size_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    replay.Apply(e);
    if (e.tag == format::kTagAlloc || e.tag == format::kTagMmap) ++r.summary.samples;
    if (replay.host_live_bytes() > peak) {
      peak = replay.host_live_bytes();
      peak_index = i;
      peak_ts = e.ts;
    }
    if (e.tag == format::kTagStep && e.phase == 1) {
      auto row = row_of_step.find(e.step);
      if (row == row_of_step.end()) continue;
      by_step.resize(replay.sites().size());
      for (size_t s = 0; s < replay.sites().size(); ++s) {
        by_step[s].resize(r.steps.size());
        by_step[s][row->second] = replay.sites()[s].live_bytes;
      }
    }
  }
  r.summary.est_live_bytes_end = replay.host_live_bytes();
  r.summary.est_peak_bytes = std::max(peak, 0.0);
  r.summary.est_peak_time_s = static_cast<double>(peak_ts) / 1e9;

  // Pass 2: replay up to the peak to snapshot what was live there.
  HeapReplay at_peak;
  for (size_t i = 0; i <= peak_index && i < t.events.size(); ++i) at_peak.Apply(t.events[i]);

  FrameResolver resolver(t, options.symbolize);
  const auto& acc = replay.sites();
  for (size_t i = 0; i < acc.size(); ++i) {
    const HeapReplay::Accumulator& a = acc[i];
    Site s;
    s.kind = a.key.kind == HeapReplay::Kind::kHost ? "host" : "mmap";
    s.pid = t.header.pid;
    s.stack_id = a.key.stack;
    s.frames = resolver.Resolve(a.key.stack, a.first_ts);
    s.samples = a.samples;
    s.alloc_bytes = a.alloc_bytes;
    s.alloc_count = a.alloc_count;
    s.live_bytes_end = std::max(a.live_bytes, 0.0);
    s.live_count_end = std::max(a.live_count, 0.0);
    if (i < at_peak.sites().size()) s.live_bytes_at_peak = std::max(at_peak.sites()[i].live_bytes, 0.0);
    s.live_bytes_by_step.assign(r.steps.size(), 0.0);
    if (i < by_step.size()) {
      for (size_t k = 0; k < by_step[i].size(); ++k) s.live_bytes_by_step[k] = by_step[i][k];
    }
    r.sites.push_back(std::move(s));
  }
  return r;
}

absl::StatusOr<std::vector<std::string>> ListTraces(const std::string& path, bool* is_dir) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": ", strerror(errno)));
  }
  *is_dir = S_ISDIR(st.st_mode);
  if (!*is_dir) return std::vector<std::string>{path};
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": ", strerror(errno)));
  std::vector<std::string> files;
  while (dirent* ent = readdir(dir)) {
    std::string name = ent->d_name;
    if (absl::EndsWith(name, ".trace")) files.push_back(absl::StrCat(path, "/", name));
  }
  closedir(dir);
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat(path, ": no memstep traces (*.trace) in directory"));
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

absl::StatusOr<Report> AnalyzeRun(const std::string& path, const Options& options) {
  bool is_dir = false;
  absl::StatusOr<std::vector<std::string>> files = ListTraces(path, &is_dir);
  if (!files.ok()) return files.status();

  Report report;
  report.path = path;
  std::vector<ProcessResult> results;
  for (const std::string& file : *files) {
    struct stat st;
    if (is_dir && stat(file.c_str(), &st) == 0 && st.st_size == 0) {
      report.warnings.push_back(absl::StrCat(file, ": empty trace (process ended before "
                                             "writing its header); skipped"));
      continue;
    }
    absl::StatusOr<Trace> trace = reader::ReadTraceFile(file);
    if (!trace.ok()) return trace.status();
    for (const std::string& w : trace->warnings) report.warnings.push_back(absl::StrCat(file, ": ", w));
    results.push_back(AnalyzeTrace(*trace, file, options));
    const ProcessSummary& p = results.back().summary;
    if (p.lost_records > 0) {
      report.warnings.push_back(absl::StrCat(
          file, ": ", p.lost_records, " records lost by the profiler (buffers full); "
          "sampled estimates are low"));
    }
  }
  if (results.empty()) {
    return absl::NotFoundError(absl::StrCat(path, ": no readable memstep traces"));
  }
  std::stable_sort(results.begin(), results.end(), [](const ProcessResult& a, const ProcessResult& b) {
    return a.summary.pid < b.summary.pid;
  });

  size_t total_steps = 0;
  for (const ProcessResult& r : results) total_steps += r.steps.size();
  for (ProcessResult& r : results) {
    const size_t offset = report.steps.size();
    for (Site& s : r.sites) {
      std::vector<double> global(total_steps, 0.0);
      for (size_t k = 0; k < s.live_bytes_by_step.size(); ++k) global[offset + k] = s.live_bytes_by_step[k];
      s.live_bytes_by_step = std::move(global);
      report.sites.push_back(std::move(s));
    }
    report.steps.insert(report.steps.end(), r.steps.begin(), r.steps.end());
    report.processes.push_back(std::move(r.summary));
  }
  std::stable_sort(report.sites.begin(), report.sites.end(), [](const Site& a, const Site& b) {
    if (a.live_bytes_end != b.live_bytes_end) return a.live_bytes_end > b.live_bytes_end;
    return a.alloc_bytes > b.alloc_bytes;
  });
  for (size_t i = 0; i < report.sites.size(); ++i) report.sites[i].id = i + 1;
  return report;
}

}  // namespace memstep::analysis
