// FrameResolver: turns a trace's stack ids into symbolized frames for the
// report, dropping memstep's own frames wherever they are, the allocator's
// frames at the top and the process/thread start-up frames at the bottom.
// Internal to src/analysis.
//
// memstep's own frames are native (libmemstep.so) and Python (its hooks'
// files, format.h kTlvPythonDir).
//
// Contract: frames are cached per (mapping, ip); an ip outside every mapping
// becomes one frame named by its hex address; a mapped ip that no symbol
// covers (or that is not symbolized) becomes "module+0xoffset", never "??".
// A stack made only of memstep's frames becomes one frame, kInsideMemstep.

#ifndef MEMSTEP_SRC_ANALYSIS_FRAME_RESOLVER_H_
#define MEMSTEP_SRC_ANALYSIS_FRAME_RESOLVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "src/analysis/analysis.h"
#include "src/format/format.h"
#include "src/reader/reader.h"

namespace memstep::analysis {

// The symbolizer behind FrameResolver, opaque here so that only
// frame_resolver.cc includes src/symbolize (a private dependency of
// memstep_analysis: targets that link analysis do not see its headers).
class SymbolSource;
struct SymbolSourceDeleter {
  void operator()(SymbolSource* s) const;
};
// A symbol source, or null when `symbolize` is false.
std::unique_ptr<SymbolSource, SymbolSourceDeleter> NewSymbolSource(bool symbolize);
// Appends the frames (inlined ones first) that `source` finds for `ip` in
// mapping `m`; a frame it cannot name is called `unnamed`. Appends nothing
// when it knows nothing.
void SymbolizeInto(SymbolSource* source, const reader::Mapping& m, uint64_t ip,
                   const std::string& unnamed, uint64_t offset, std::vector<Frame>* frames);

// Allocator entry points stripped from the top of stacks when they are found
// in libc, libstdc++ or the dynamic loader (ld.so calls malloc through a
// wrapper of its own, named malloc and calloc).
inline std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

inline bool IsAllocatorFrame(const Frame& f) {
  const std::string base = Basename(f.module);
  if (!absl::StartsWith(base, "libc.so") && !absl::StartsWith(base, "libc-") &&
      !absl::StartsWith(base, "libstdc++") && !absl::StartsWith(base, "ld-linux") &&
      base != "ld.so") {
    return false;
  }
  static const char* const kNames[] = {
      "malloc",         "calloc",        "realloc",        "reallocarray",    "free",
      "posix_memalign", "aligned_alloc", "memalign",       "valloc",          "pvalloc",
      "__libc_malloc",  "__libc_calloc", "__libc_realloc", "__libc_memalign", "mmap",
      "mmap64",         "__mmap",        "munmap",         "mremap",          "__mremap",
      "operator new",   "operator new[]"};
  for (const char* name : kNames) {
    if (f.function == name || absl::StartsWith(f.function, absl::StrCat(name, "("))) return true;
  }
  return false;
}

// Process and thread start-up frames at the bottom of every stack, dropped:
// they say nothing about who allocated.
inline bool IsStartupFrame(const Frame& f) {
  static const char* const kNames[] = {
      "_start",  "__libc_start_main", "__libc_start_call_main", "start_thread", "clone", "clone3",
      "__clone", "__clone3",          "__clone_internal"};
  for (const char* name : kNames) {
    if (f.function == name || absl::StartsWith(f.function, absl::StrCat(name, "@"))) return true;
  }
  return false;
}

// The one frame left of a stack whose every frame was memstep's own.
inline constexpr char kInsideMemstep[] = "<inside memstep>";

// A frame inside the CUDA runtime or driver library.
inline bool IsCudaFrame(const Frame& f) {
  const std::string base = Basename(f.module);
  return absl::StartsWith(base, "libcudart.so") || absl::StartsWith(base, "libcuda.so");
}

class FrameResolver {
 public:
  FrameResolver(const reader::Trace& trace, bool symbolize)
      : trace_(trace), symbolizer_(NewSymbolSource(symbolize)) {}

  // Frames of one stack. memstep's own frames are dropped wherever they are
  // (its hooks at the top; in the middle, its wrappers of cudaMalloc or
  // dlclose, which call the real function whose frame stays); the frames
  // around them are kept. Then the leading allocator frames (malloc in libc,
  // operator new in libstdc++) are stripped, and with `device` (a device
  // allocation's stack) also the leading frames inside the CUDA runtime or
  // driver (the cudaMalloc that called cuMemAlloc_v2): the API is reported
  // separately, the caller of the API is the site. Whatever would leave
  // nothing is not stripped (CUDA frames first, then allocator frames); a
  // stack of memstep's frames only becomes one kInsideMemstep frame.
  std::vector<Frame> Resolve(uint64_t stack_id, uint64_t ts, bool device = false) {
    std::vector<Frame> out;
    auto it = trace_.stacks.find(stack_id);
    if (it == trace_.stacks.end()) return out;
    const std::vector<uint64_t>& ips = it->second;
    // Pass 0: strip leading allocator and CUDA frames; 1: allocator frames
    // only; 2: nothing but memstep's.
    for (int pass = device ? 0 : 1; pass <= 2 && out.empty(); ++pass) {
      bool leading = true;
      for (uint64_t ip : ips) {
        const Resolved& r = FramesOf(ip, ts);
        if (r.memstep) continue;
        auto first = r.frames.begin();
        if (leading && pass < 2) {
          const Frame& outer = r.frames.back();
          if (IsAllocatorFrame(outer) || (pass == 0 && IsCudaFrame(outer))) continue;
          // An allocator entry inlined into its caller (ld.so's malloc and
          // calloc wrappers): the caller is the first frame.
          while (first->inlined && IsAllocatorFrame(*first)) ++first;
        }
        leading = false;
        out.insert(out.end(), first, r.frames.end());
      }
    }
    if (out.empty() && !ips.empty()) {
      Frame f;
      f.ip = ips.front();
      f.function = kInsideMemstep;
      f.symbolized = false;
      out.push_back(std::move(f));
    }
    while (out.size() > 1 && IsStartupFrame(out.back())) out.pop_back();
    return out;
  }

 private:
  // The frames of one ip (innermost first) and whether it is memstep's.
  struct Resolved {
    std::vector<Frame> frames;  // never empty
    bool memstep = false;
  };

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

  // memstep's own code: inside the range the trace header's PROFILER TLV
  // gives, in an object with the build-id it gives (a renamed or copied
  // libmemstep.so), or (traces without that TLV) in a file named
  // libmemstep.so*.
  bool IsMemstep(uint64_t ip, int64_t mi) const {
    if (trace_.profiler_start <= ip && ip < trace_.profiler_end) return true;
    if (mi < 0) return false;
    const reader::Mapping& m = trace_.mappings[mi];
    if (!trace_.profiler_build_id.empty() && m.build_id == trace_.profiler_build_id) return true;
    return absl::StartsWith(Basename(m.path), "libmemstep.so");
  }

  const Resolved& FramesOf(uint64_t ip, uint64_t ts) {
    if (format::IsPyFrame(ip)) return PyFrameOf(ip);
    const int64_t mi = MappingOf(ip, ts);
    auto [it, inserted] = cache_.try_emplace(std::make_pair(mi, ip));
    if (!inserted) return it->second;
    Resolved& r = it->second;
    r.memstep = IsMemstep(ip, mi);
    std::vector<Frame>& frames = r.frames;
    if (mi < 0) {
      Frame f;
      f.ip = ip;
      f.function = absl::StrFormat("0x%x", ip);
      f.symbolized = false;
      frames.push_back(f);
      return r;
    }
    const reader::Mapping& m = trace_.mappings[mi];
    const uint64_t offset = ip - m.load_bias;
    // What an address no symbol covers is called: "libfoo.so+0x1a2b3", the
    // ELF virtual address of the return address (addr2line -e libfoo.so).
    const std::string unnamed = absl::StrFormat("%s+0x%x", Basename(m.path), offset);
    if (symbolizer_ != nullptr) SymbolizeInto(symbolizer_.get(), m, ip, unnamed, offset, &frames);
    if (frames.empty()) {
      Frame f;
      f.ip = ip;
      f.function = unnamed;
      f.symbolized = false;
      f.module = m.path;
      f.module_offset = offset;
      frames.push_back(std::move(f));
    }
    return r;
  }

  // A Python frame (format.h kPyFrameTag): its STRING is
  // "qualname\0filename\0line"; module "<python>".
  const Resolved& PyFrameOf(uint64_t ip) {
    auto [it, inserted] = cache_.try_emplace(std::make_pair(int64_t{-2}, ip));
    if (!inserted) return it->second;
    Frame f;
    f.ip = ip;
    f.module = "<python>";
    const std::string& s = trace_.String(format::PyFrameString(ip));
    std::vector<std::string> parts = absl::StrSplit(s, '\0');
    f.symbolized = parts.size() > 0 && !parts[0].empty();
    f.function = f.symbolized ? parts[0] : "<python frame>";
    if (parts.size() > 1) f.file = parts[1];
    if (parts.size() > 2 && !absl::SimpleAtoi(parts[2], &f.line)) f.line = 0;
    it->second.memstep = IsMemstepPython(f.file);
    it->second.frames.push_back(std::move(f));
    return it->second;
  }

  // memstep's own Python code (its PyTorch hooks wrap optimizer.step,
  // torch.compile and the DataLoader; its sitecustomize imports torch): a
  // file under the directory the trace header names (kTlvPythonDir), or, in
  // traces that do not name one, a file of memstep's package by its name.
  bool IsMemstepPython(const std::string& file) const {
    const std::string& dir = trace_.python_dir;
    if (!dir.empty()) {
      return file.size() > dir.size() && absl::StartsWith(file, dir) && file[dir.size()] == '/';
    }
    for (const char* own :
         {"/memstep/__init__.py", "/memstep/_torch_hooks.py", "/memstep/_torch_blocks.py",
          "/memstep/_torch_cuda.py", "/memstep/_torch_oom.py", "/startup/sitecustomize.py"}) {
      if (absl::EndsWith(file, own)) return true;
    }
    return false;
  }

  const reader::Trace& trace_;
  std::unique_ptr<SymbolSource, SymbolSourceDeleter> symbolizer_;
  absl::flat_hash_map<std::pair<int64_t, uint64_t>, Resolved> cache_;
};

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_FRAME_RESOLVER_H_
