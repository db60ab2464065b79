// pprof export: the call sites as a profile.proto (gzipped), the format of
// github.com/google/pprof (proto/profile.proto), which `pprof`, speedscope
// and most profilers' UIs read.
//
// Mapping of the report onto the message:
//   sample_type        alloc_objects/count, alloc_space/bytes,
//                      inuse_objects/count, inuse_space/bytes (index 0..3)
//   sample             one per call site, and for host sites with
//                      Site::slices one per (site, step, stage) of
//                      allocation: values alloc_count, alloc_bytes,
//                      live_count_end, live_bytes_end (estimates rounded to
//                      integers; exact for device and mmap sites); labels
//                      pid (num), rank (str, when set), kind (str), class
//                      (str, the growth class), device (num, device sites),
//                      step (num, allocated inside a step), stage (str,
//                      allocated inside a stage)
//   location           one per (process, return address, inline chain):
//                      the frames of one address, innermost first, are its
//                      lines (pprof: the last line is the caller the others
//                      were inlined into)
//   function           one per (name, file)
//   mapping            one per (process, module, load bias): memory_start is
//                      the load bias, so address - start = the ELF virtual
//                      address the text report prints as module+0xOFFSET
//   period_type/period space/bytes, the largest mean sampling interval T
//   default_sample_type inuse_space
// Worked example: a site of pid 7 with frames f (inlined) and g at address
// 0x401234 in /bin/app loaded at 0x400000 gives one location {address
// 0x401234, mapping 1, lines [f, g]} and mapping 1 {memory_start 0x400000,
// filename "/bin/app"}.

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "src/report/formats.h"
#include "src/report/pprof_encoding.h"

namespace memstep::report {
namespace {

// profile.proto field numbers.
enum ProfileField : uint32_t {
  kSampleType = 1,
  kSample = 2,
  kMapping = 3,
  kLocation = 4,
  kFunction = 5,
  kStringTable = 6,
  kTimeNanos = 9,
  kDurationNanos = 10,
  kPeriodType = 11,
  kPeriod = 12,
  kComment = 13,
  kDefaultSampleType = 14,
};
enum ValueTypeField : uint32_t { kVtType = 1, kVtUnit = 2 };
enum SampleField : uint32_t { kSLocationId = 1, kSValue = 2, kSLabel = 3 };
enum LabelField : uint32_t { kLKey = 1, kLStr = 2, kLNum = 3, kLNumUnit = 4 };
enum MappingField : uint32_t {
  kMId = 1,
  kMStart = 2,
  kMLimit = 3,
  kMOffset = 4,
  kMFilename = 5,
  kMBuildId = 6,
  kMHasFunctions = 7,
  kMHasFilenames = 8,
  kMHasLineNumbers = 9,
  kMHasInlineFrames = 10,
};
enum LocationField : uint32_t { kLocId = 1, kLocMappingId = 2, kLocAddress = 3, kLocLine = 4 };
enum LineField : uint32_t { kLineFunctionId = 1, kLineLine = 2 };
enum FunctionField : uint32_t { kFId = 1, kFName = 2, kFSystemName = 3, kFFilename = 4 };

class Builder {
 public:
  Builder() { Str(""); }  // string 0 is always ""

  int64_t Str(const std::string& s) {
    auto [it, inserted] = strings_.try_emplace(s, static_cast<int64_t>(strings_.size()));
    if (inserted) string_order_.push_back(s);
    return it->second;
  }

  uint64_t Function(const analysis::Frame& f) {
    auto [it, inserted] =
        functions_.try_emplace(std::make_pair(f.function, f.file), functions_.size() + 1);
    if (inserted) {
      ProtoWriter w;
      w.Varint(kFId, it->second);
      w.Int64(kFName, Str(f.function));
      w.Int64(kFSystemName, Str(f.function));
      w.Int64(kFFilename, Str(f.file));
      out_functions_.push_back(w);
    }
    return it->second;
  }

  uint64_t Mapping(uint32_t pid, const analysis::Frame& f) {
    // Python frames ("<python>") and frames outside every module have none.
    if (f.module.empty() || f.module[0] == '<' || f.module_offset > f.ip) return 0;
    const uint64_t start = f.ip - f.module_offset;
    auto key = std::make_tuple(pid, f.module, start);
    auto [it, inserted] = mappings_.try_emplace(
        key, MappingInfo{mappings_.size() + 1, f.ip + 1, f.symbolized, !f.file.empty()});
    MappingInfo& m = it->second;
    m.limit = std::max(m.limit, f.ip + 1);
    m.has_functions |= f.symbolized;
    m.has_lines |= !f.file.empty();
    return m.id;
  }

  // The locations of a stack, leaf first.
  std::vector<uint64_t> Locations(uint32_t pid, const std::vector<analysis::Frame>& frames) {
    std::vector<uint64_t> ids;
    if (frames.empty()) {
      analysis::Frame none;
      none.function = "[no stack]";
      ids.push_back(Location(pid, {none}));
      return ids;
    }
    std::vector<analysis::Frame> chain;
    for (const analysis::Frame& f : frames) {
      chain.push_back(f);
      if (!f.inlined) {
        ids.push_back(Location(pid, chain));
        chain.clear();
      }
    }
    if (!chain.empty()) ids.push_back(Location(pid, chain));
    return ids;
  }

  void Sample(const std::vector<uint64_t>& locations, const std::vector<int64_t>& values,
              const std::vector<ProtoWriter>& labels) {
    ProtoWriter w;
    w.Packed(kSLocationId, locations);
    std::vector<uint64_t> v;
    for (int64_t x : values) v.push_back(static_cast<uint64_t>(x));
    w.Packed(kSValue, v);
    for (const ProtoWriter& l : labels) w.Message(kSLabel, l);
    samples_.Message(kSample, w);  // one buffer for every sample: no object per sample
  }

  ProtoWriter StrLabel(const std::string& key, const std::string& value) {
    ProtoWriter l;
    l.Int64(kLKey, Str(key));
    l.Int64(kLStr, Str(value));
    return l;
  }
  // A numeric label, with its key as its unit: pprof drops a numeric label
  // whose value and unit are both 0 (step 0, device 0) otherwise.
  ProtoWriter NumLabel(const std::string& key, int64_t value) {
    ProtoWriter l;
    l.Int64(kLKey, Str(key));
    l.Int64(kLNum, value);
    l.Int64(kLNumUnit, Str(key));
    return l;
  }

  // The Profile message; sample_type etc. are written by the caller into
  // `head` first.
  std::string Finish(ProtoWriter head, ProtoWriter tail) {
    ProtoWriter& p = head;
    p.Append(samples_);
    samples_ = ProtoWriter();  // its bytes are in p now
    std::vector<std::pair<uint64_t, const std::tuple<uint32_t, std::string, uint64_t>*>> order;
    for (const auto& [key, m] : mappings_) order.push_back({m.id, &key});
    std::sort(order.begin(), order.end());
    for (const auto& [id, key] : order) {
      const MappingInfo& m = mappings_.at(*key);
      ProtoWriter w;
      w.Varint(kMId, id);
      w.Varint(kMStart, std::get<2>(*key));
      w.Varint(kMLimit, m.limit);
      w.Varint(kMOffset, 0);
      w.Int64(kMFilename, Str(std::get<1>(*key)));
      w.Varint(kMHasFunctions, m.has_functions);
      w.Varint(kMHasFilenames, m.has_lines);
      w.Varint(kMHasLineNumbers, m.has_lines);
      w.Varint(kMHasInlineFrames, m.has_functions);
      p.Message(kMapping, w);
    }
    for (const ProtoWriter& l : out_locations_) p.Message(kLocation, l);
    for (const ProtoWriter& f : out_functions_) p.Message(kFunction, f);
    // Strings last but one: every Str() call above is done.
    for (const std::string& s : string_order_) p.Bytes(kStringTable, s);
    p.Append(tail);
    return std::move(p).Take();
  }

 private:
  struct MappingInfo {
    uint64_t id;
    uint64_t limit;
    bool has_functions;
    bool has_lines;
  };

  uint64_t Location(uint32_t pid, const std::vector<analysis::Frame>& chain) {
    // NUL separates the parts: no name or path holds one.
    const std::string sep(1, '\0');
    std::string key = absl::StrCat(pid, sep, chain.back().ip);
    for (const analysis::Frame& f : chain) {
      absl::StrAppend(&key, sep, f.function, sep, f.file, sep, f.line);
    }
    auto [it, inserted] = locations_.try_emplace(key, locations_.size() + 1);
    if (!inserted) return it->second;
    ProtoWriter w;
    w.Varint(kLocId, it->second);
    const uint64_t mapping = Mapping(pid, chain.back());
    if (mapping != 0) w.Varint(kLocMappingId, mapping);
    w.Varint(kLocAddress, chain.back().ip);
    for (const analysis::Frame& f : chain) {
      ProtoWriter line;
      line.Varint(kLineFunctionId, Function(f));
      line.Int64(kLineLine, f.line);
      w.Message(kLocLine, line);
    }
    out_locations_.push_back(w);
    return it->second;
  }

  absl::flat_hash_map<std::string, int64_t> strings_;
  std::vector<std::string> string_order_;
  std::map<std::pair<std::string, std::string>, uint64_t> functions_;
  std::vector<ProtoWriter> out_functions_;
  std::map<std::tuple<uint32_t, std::string, uint64_t>, MappingInfo> mappings_;
  absl::flat_hash_map<std::string, uint64_t> locations_;
  std::vector<ProtoWriter> out_locations_;
  ProtoWriter samples_;  // the Sample messages, each with its field header
};

int64_t Round(double v) { return v > 0 ? static_cast<int64_t>(std::llround(v)) : 0; }

}  // namespace

std::string FormatPprof(const analysis::Report& report) {
  Builder b;
  ProtoWriter head;
  auto value_type = [&](const char* type, const char* unit) {
    ProtoWriter w;
    w.Int64(kVtType, b.Str(type));
    w.Int64(kVtUnit, b.Str(unit));
    return w;
  };
  head.Message(kSampleType, value_type("alloc_objects", "count"));
  head.Message(kSampleType, value_type("alloc_space", "bytes"));
  head.Message(kSampleType, value_type("inuse_objects", "count"));
  head.Message(kSampleType, value_type("inuse_space", "bytes"));

  absl::flat_hash_map<uint32_t, std::string> rank_of;
  uint64_t start_ns = UINT64_MAX;
  double duration_s = 0, period = 0;
  for (const analysis::ProcessSummary& p : report.processes) {
    rank_of[p.pid] = p.rank;
    start_ns = std::min(start_ns, p.start_real_ns);
    duration_s = std::max(duration_s, p.duration_s);
    period = std::max(period, p.sample_interval);
  }
  for (const analysis::Site& s : report.sites) {
    std::vector<ProtoWriter> labels;
    labels.push_back(b.NumLabel("pid", s.pid));
    if (!rank_of[s.pid].empty()) labels.push_back(b.StrLabel("rank", rank_of[s.pid]));
    labels.push_back(b.StrLabel("kind", analysis::SiteKindName(s.kind)));
    labels.push_back(b.StrLabel("class", analysis::GrowthClassName(s.growth.cls)));
    if (!analysis::IsHost(s.kind)) labels.push_back(b.NumLabel("device", s.device));
    const std::vector<uint64_t> locations = b.Locations(s.pid, s.frames);
    if (s.slices.empty()) {
      b.Sample(locations,
               {Round(s.alloc_count), Round(s.alloc_bytes), Round(s.live_count_end),
                Round(s.live_bytes_end)},
               labels);
      continue;
    }
    for (const analysis::SiteSlice& slice : s.slices) {
      std::vector<ProtoWriter> sliced = labels;
      if (slice.step >= 0) sliced.push_back(b.NumLabel("step", slice.step));
      if (slice.step_last > slice.step) sliced.push_back(b.NumLabel("step_last", slice.step_last));
      if (!slice.stage.empty()) sliced.push_back(b.StrLabel("stage", slice.stage));
      b.Sample(locations,
               {Round(slice.alloc_count), Round(slice.alloc_bytes), Round(slice.live_count_end),
                Round(slice.live_bytes_end)},
               sliced);
    }
  }
  ProtoWriter tail;
  if (start_ns != UINT64_MAX) tail.Int64(kTimeNanos, static_cast<int64_t>(start_ns));
  tail.Int64(kDurationNanos, static_cast<int64_t>(duration_s * 1e9));
  tail.Message(kPeriodType, value_type("space", "bytes"));
  tail.Int64(kPeriod, Round(period));
  tail.Int64(kComment, b.Str(absl::StrCat("memstep report ", report.path)));
  tail.Int64(kDefaultSampleType, b.Str("inuse_space"));
  return Gzip(b.Finish(std::move(head), std::move(tail)));
}

}  // namespace memstep::report
