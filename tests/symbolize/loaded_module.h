// Test helper: the symbolize::Module (path, build-id, load bias) of the
// object loaded in this process that contains a given address, read the way
// the recorder reads it (dl_iterate_phdr and the in-memory PT_NOTE).
//
// Contract: returns false when no loaded object contains the address.
// Header-only; for tests and benchmarks.

#ifndef MEMSTEP_TESTS_SYMBOLIZE_LOADED_MODULE_H_
#define MEMSTEP_TESTS_SYMBOLIZE_LOADED_MODULE_H_

#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "src/symbolize/symbolizer.h"

namespace memstep::symbolize::testing {

inline std::string BuildIdFromNotes(const dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const uint64_t align = ph.p_align >= 8 ? 8 : 4;
    auto align_up = [align](uint64_t v) { return (v + align - 1) & ~(align - 1); };
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) note;
      std::memcpy(&note, p, sizeof(note));
      const char* name = p + sizeof(note);
      const char* desc = name + align_up(note.n_namesz);
      if (desc + note.n_descsz > end) break;
      if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 &&
          std::memcmp(name, "GNU", 4) == 0) {
        return std::string(desc, note.n_descsz);
      }
      p = desc + align_up(note.n_descsz);
    }
  }
  return "";
}

inline bool LoadedModuleOf(const void* address, Module* module) {
  struct Query {
    uintptr_t address;
    Module* module;
    bool found;
  } query{reinterpret_cast<uintptr_t>(address), module, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* q = static_cast<Query*>(data);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (q->address < start || q->address >= start + ph.p_memsz) continue;
          std::string path = info->dlpi_name;
          if (path.empty()) {  // the main program
            char buf[4096];
            const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
            path.assign(buf, n > 0 ? n : 0);
          }
          q->module->path = path;
          q->module->build_id = BuildIdFromNotes(info);
          q->module->load_bias = info->dlpi_addr;
          q->found = true;
          return 1;
        }
        return 0;
      },
      &query);
  return query.found;
}

}  // namespace memstep::symbolize::testing

#endif  // MEMSTEP_TESTS_SYMBOLIZE_LOADED_MODULE_H_
