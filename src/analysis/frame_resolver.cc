// The symbolizer behind FrameResolver (frame_resolver.h): the only place in
// src/analysis that knows whether memstep was built with src/symbolize
// (MEMSTEP_HAVE_SYMBOLIZER, a private definition of memstep_analysis).

#include "src/analysis/frame_resolver.h"

#ifdef MEMSTEP_HAVE_SYMBOLIZER
#include "src/symbolize/symbolizer.h"
#endif

namespace memstep::analysis {

#ifdef MEMSTEP_HAVE_SYMBOLIZER
class SymbolSource {
 public:
  symbolize::Symbolizer symbolizer;
};
#else
class SymbolSource {};
#endif

void SymbolSourceDeleter::operator()(SymbolSource* s) const { delete s; }

std::unique_ptr<SymbolSource, SymbolSourceDeleter> NewSymbolSource(bool symbolize) {
#ifdef MEMSTEP_HAVE_SYMBOLIZER
  if (symbolize) return std::unique_ptr<SymbolSource, SymbolSourceDeleter>(new SymbolSource);
#else
  (void)symbolize;
#endif
  return nullptr;
}

void SymbolizeInto(SymbolSource* source, const reader::Mapping& m, uint64_t ip,
                   const std::string& unnamed, uint64_t offset, std::vector<Frame>* frames) {
#ifdef MEMSTEP_HAVE_SYMBOLIZER
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
#else
  (void)source, (void)m, (void)ip, (void)unnamed, (void)offset, (void)frames;
#endif
}

}  // namespace memstep::analysis
