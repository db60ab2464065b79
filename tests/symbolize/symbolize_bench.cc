// Cost of symbolization on a generated -O2 -g library (see CMakeLists.txt):
// every 3rd byte of every generated function, looked up once cold (module
// already open, address never seen) and once more from the cache.
// With FILE: every 16th byte of FILE's executable segments instead (load
// bias 0, no build-id check), to try a real library.
// Usage: symbolize_bench [repetitions] [FILE]

#include <dlfcn.h>
#include <fcntl.h>
#include <gelf.h>
#include <link.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "src/symbolize/symbolizer.h"
#include "tests/symbolize/loaded_module.h"

using Fn = int (*)(int);
extern "C" const Fn memstep_symbolize_gen_table[];
extern "C" const int memstep_symbolize_gen_count;

namespace {

using Clock = std::chrono::steady_clock;

double MicrosPer(Clock::duration d, size_t n) {
  return std::chrono::duration<double, std::micro>(d).count() / n;
}

// Every `stride`-th address of the executable PT_LOAD segments of `path`.
std::vector<uint64_t> FileAddresses(const char* path, uint64_t stride) {
  std::vector<uint64_t> ips;
  elf_version(EV_CURRENT);
  const int fd = open(path, O_RDONLY);
  if (fd < 0) return ips;
  Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
  size_t count = 0;
  if (elf != nullptr && elf_getphdrnum(elf, &count) == 0) {
    for (size_t i = 0; i < count; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr) continue;
      if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
      for (uint64_t a = ph.p_vaddr; a < ph.p_vaddr + ph.p_memsz; a += stride) {
        ips.push_back(a);
      }
    }
  }
  if (elf != nullptr) elf_end(elf);
  close(fd);
  return ips;
}

}  // namespace

int main(int argc, char** argv) {
  using memstep::symbolize::Module;
  using memstep::symbolize::Symbolizer;
  const int reps = argc > 1 ? std::atoi(argv[1]) : 1;
  Module module;
  std::vector<uint64_t> ips;
  if (argc > 2) {
    module.path = argv[2];
    ips = FileAddresses(argv[2], 16);
  } else if (memstep::symbolize::testing::LoadedModuleOf(
                 reinterpret_cast<void*>(memstep_symbolize_gen_table[0]), &module)) {
    for (int i = 0; i < memstep_symbolize_gen_count; ++i) {
      void* fn = reinterpret_cast<void*>(memstep_symbolize_gen_table[i]);
      Dl_info info;
      ElfW(Sym)* sym = nullptr;
      if (dladdr1(fn, &info, reinterpret_cast<void**>(&sym), RTLD_DL_SYMENT) == 0 ||
          sym == nullptr) {
        continue;
      }
      for (uint64_t off = 0; off < sym->st_size; off += 3) {
        ips.push_back(reinterpret_cast<uint64_t>(fn) + off);
      }
    }
  }
  if (ips.empty()) {
    std::fprintf(stderr, "no addresses to symbolize\n");
    return 1;
  }
  for (int rep = 0; rep < reps; ++rep) {
    Symbolizer symbolizer;
    const auto t0 = Clock::now();
    symbolizer.Symbolize(module, ips[0], false);  // opens the module
    const auto t1 = Clock::now();
    size_t frames = 0;
    size_t inlined = 0;
    size_t unknown = 0;
    for (uint64_t ip : ips) {
      const auto f = symbolizer.Symbolize(module, ip, false);
      frames += f.size();
      inlined += f.size() > 1;
      unknown += f[0].function == "??";
    }
    const auto t2 = Clock::now();
    for (uint64_t ip : ips) symbolizer.Symbolize(module, ip, false);
    const auto t3 = Clock::now();
    std::printf(
        "module %s: %zu addresses, %zu frames, %zu with inlined frames, "
        "%zu unknown\n"
        "  open + first lookup: %.1f ms\n"
        "  cold (first lookup of each address): %.2f us/address\n"
        "  cached (same addresses again): %.3f us/address\n",
        module.path.c_str(), ips.size(), frames, inlined, unknown,
        std::chrono::duration<double, std::milli>(t1 - t0).count(), MicrosPer(t2 - t1, ips.size()),
        MicrosPer(t3 - t2, ips.size()));
  }
  return 0;
}
