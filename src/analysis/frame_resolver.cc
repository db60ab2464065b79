// The symbolizer behind FrameResolver (frame_resolver.h): the only place in
// src/analysis that uses src/symbolize (a private dependency of
// memstep_analysis; libdw is required, so it is always there).

#include "src/analysis/frame_resolver.h"

#include "src/symbolize/symbolizer.h"

namespace memstep::analysis {

// One symbolizer per thread, shared by every trace resolved on it (the
// Symbolizer is thread-compatible and caches per module file, keyed by path
// and build-id, and per ELF address, so one process's results are another's).
// A run of many processes thus opens each library, and reads and
// decompresses its debug info, once: per trace, a run of 2,146 short CPython
// processes spent most of its report decompressing libc's separate debug
// file again for each (docs/analysis.md "Cost of the trend statistics").
class SymbolSource {
 public:
  symbolize::Symbolizer& symbolizer = Shared();

 private:
  static symbolize::Symbolizer& Shared() {
    static thread_local symbolize::Symbolizer shared;
    return shared;
  }
};

void SymbolSourceDeleter::operator()(SymbolSource* s) const { delete s; }

std::unique_ptr<SymbolSource, SymbolSourceDeleter> NewSymbolSource(bool symbolize) {
  if (symbolize) return std::unique_ptr<SymbolSource, SymbolSourceDeleter>(new SymbolSource);
  return nullptr;
}

void SymbolizeInto(SymbolSource* source, const reader::Mapping& m, uint64_t ip,
                   const std::string& unnamed, uint64_t offset, std::vector<Frame>* frames) {
  if (source == nullptr) return;
  symbolize::Module module{m.path, m.build_id, m.load_bias};
  for (const symbolize::SymbolFrame& s : source->symbolizer.Symbolize(module, ip, true)) {
    Frame f;
    f.ip = ip;
    f.symbolized = s.function != "??" && !s.function.empty();
    f.function = f.symbolized ? s.function : unnamed;
    f.file = s.file;
    f.line = s.line;
    f.module = m.path;
    f.inlined = s.inlined;
    f.module_offset = offset;
    frames->push_back(std::move(f));
  }
}

}  // namespace memstep::analysis
