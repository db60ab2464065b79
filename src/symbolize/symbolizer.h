// Offline symbolization of recorded return addresses, from the module maps a
// trace recorded (path, build-id, load bias), with elfutils libdw.
//
// Contract shared by src/symbolize (implements it) and src/analysis (uses it).
// Extend by adding members; do not rename.
//  - Thread-compatible: one Symbolizer per thread, no global state.
//  - Never crashes or throws on missing, stripped, changed or corrupt files:
//    it degrades to ELF symbol names (file "", line 0), then to function
//    "??" (the caller reports the module path and offset).
//  - Caches per module and per address; symbolizing the same ip twice is cheap.
//  - Each module file is opened once per Symbolizer and stays open (mapped)
//    until the Symbolizer is destroyed.
//
// How it works and what it costs: docs/symbolization.md.

#ifndef MEMSTEP_SRC_SYMBOLIZE_SYMBOLIZER_H_
#define MEMSTEP_SRC_SYMBOLIZE_SYMBOLIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace memstep::symbolize {

// A loaded ELF object as recorded in the trace (format.h kTagMapping).
struct Module {
  std::string path;        // absolute path of the ELF file at record time
  std::string build_id;    // raw NT_GNU_BUILD_ID bytes ("" if none)
  uint64_t load_bias = 0;  // runtime address = ELF virtual address + load_bias
};

struct SymbolFrame {
  std::string function;  // demangled C++ / plain C name; "??" if unknown
  std::string file;      // source path from DWARF, "" if unknown
  int line = 0;
  bool inlined = false;  // true for frames inlined into the next frame
};

struct SymbolizerOptions {
  // Roots searched for separate debug info: ROOT/.build-id/xx/yyyy.debug by
  // build-id, and ROOT/<dir of the module>/<.gnu_debuglink name>. The
  // module's own directory and its .debug/ subdirectory are always searched
  // for the .gnu_debuglink name.
  std::vector<std::string> debug_roots = {"/usr/lib/debug"};
};

// Counters for tests and benchmarks.
struct SymbolizerStats {
  uint64_t modules_opened = 0;  // distinct (path, build-id) pairs opened
  uint64_t lookups = 0;         // Symbolize() calls
  uint64_t cache_hits = 0;      // calls answered from the per-address cache
};

class Symbolizer {
 public:
  Symbolizer();
  explicit Symbolizer(SymbolizerOptions options);
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // Symbolizes one runtime address inside `module`. `is_return_address`:
  // the address was unwound from a call site, so look up ip - 1.
  // Returns frames innermost first: inlined frames (inlined = true) first,
  // then the function that contains them. Never empty.
  // If the file's build-id differs from module.build_id, debug info is looked
  // up by build-id (/usr/lib/debug/.build-id/xx/yyyy.debug) and otherwise
  // the result degrades to "??" with the module name.
  std::vector<SymbolFrame> Symbolize(const Module& module, uint64_t ip,
                                     bool is_return_address = true);

  SymbolizerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memstep::symbolize

#endif  // MEMSTEP_SRC_SYMBOLIZE_SYMBOLIZER_H_
