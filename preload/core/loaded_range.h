// The address range a loaded ELF object spans, from dl_iterate_phdr's view
// of it: one loop for the three callbacks that need it (memstep's own range
// in trace/lifecycle.cc and cuda/cuda_dl.cc, each module's in
// trace/modules.cc).

#ifndef MEMSTEP_PRELOAD_CORE_LOADED_RANGE_H_
#define MEMSTEP_PRELOAD_CORE_LOADED_RANGE_H_

#include <link.h>
#include <stdint.h>

namespace memstep::preload {

// [*lo, *hi): from the lowest PT_LOAD segment's start to the highest one's
// end (p_memsz). Returns false, with *hi == 0, when the object has none.
inline bool LoadedRange(const dl_phdr_info* info, uintptr_t* lo, uintptr_t* hi) {
  *lo = UINTPTR_MAX;
  *hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t s = info->dlpi_addr + ph.p_vaddr;
    if (s < *lo) *lo = s;
    if (s + ph.p_memsz > *hi) *hi = s + ph.p_memsz;
  }
  return *hi != 0;
}

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_CORE_LOADED_RANGE_H_
