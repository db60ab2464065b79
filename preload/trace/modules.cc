// Module maps for the trace: which ELF objects are loaded where.
//
// RefreshMappings runs in the writer thread (or the final flush), and in a
// thread around its outermost dlclose (so that a library loaded and unloaded
// between two writer cycles still gets its MAPPING record). It
// holds only g_maps_mu, and takes it while holding no other memstep lock and
// not the loader lock (lock order: g_maps_mu -> loader lock -> dictionary). It
// also runs when the loader's count of loads and unloads has changed since
// the last refresh, so no dlopen can slip between two of them. It compares
// what dl_iterate_phdr reports with what it reported before and appends
// kTagMapping (new object: absolute path, [start, end) of its PT_LOAD
// segments, load bias, GNU build-id) and kTagMappingGone records to the
// dictionary log. State here is owned by whoever runs the flush cycle.

#include "preload/trace/modules.h"

#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preload/core/loaded_range.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

uint32_t ReadGnuBuildId(const struct dl_phdr_info* info, uint8_t* out, uint32_t cap) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    size_t align = ph.p_align >= 8 ? 8 : 4;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    const uint8_t* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr)* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
      size_t name_off = sizeof(ElfW(Nhdr));
      size_t desc_off = name_off + ((nh->n_namesz + align - 1) & ~(align - 1));
      size_t next = desc_off + ((nh->n_descsz + align - 1) & ~(align - 1));
      if (p + desc_off + nh->n_descsz > end) break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
          memcmp(p + name_off, "GNU", 4) == 0 && nh->n_descsz <= cap) {
        memcpy(out, p + desc_off, nh->n_descsz);
        return nh->n_descsz;
      }
      p += next;
    }
  }
  return 0;
}

namespace {

constexpr int kMaxMappings = 4096;

struct Mapping {
  uintptr_t start, end, bias;
  uint64_t path_hash;
  uint32_t id;
  bool seen;
};
pthread_mutex_t g_maps_mu = PTHREAD_MUTEX_INITIALIZER;  // protects everything below
Mapping g_maps[kMaxMappings];                           // known mappings
int g_nmaps = 0;
uint32_t g_next_map_id = 1;

struct SeenMap {
  uintptr_t start, end, bias;
  uint64_t path_hash;
  uint32_t path_off, path_len;
  uint8_t build_id[64];
  uint32_t build_id_len;
};
SeenMap g_seen[kMaxMappings];  // writer-owned scratch
int g_nseen = 0;
uint64_t g_seen_generation = 0;  // LoaderGeneration of the list in g_seen
char g_path_pool[kMaxMappings * 128];
size_t g_path_used = 0;

void ReadBuildId(const struct dl_phdr_info* info, SeenMap* m) {
  m->build_id_len = ReadGnuBuildId(info, m->build_id, sizeof(m->build_id));
}

// The loader's count of objects added plus removed, as dl_iterate_phdr
// reports it with the list (0 from a loader too old to report it).
uint64_t GenerationOf(const struct dl_phdr_info* info, size_t size) {
  if (size < offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) return 0;
  return info->dlpi_adds + info->dlpi_subs;
}

int GenerationCb(struct dl_phdr_info* info, size_t size, void* data) {
  *static_cast<uint64_t*>(data) = GenerationOf(info, size);
  return 1;
}

// Changes whenever an object is loaded or unloaded (one lock, one callback).
uint64_t LoaderGeneration() {
  uint64_t gen = 0;
  dl_iterate_phdr(GenerationCb, &gen);
  return gen;
}

// The generation g_maps reflects.
std::atomic<uint64_t> g_maps_generation{0};

int CollectMap(struct dl_phdr_info* info, size_t size, void* data) {
  int* index = static_cast<int*>(data);
  int my_index = (*index)++;
  if (my_index == 0) g_seen_generation = GenerationOf(info, size);
  if (g_nseen >= kMaxMappings) return 1;
  SeenMap& m = g_seen[g_nseen];
  uintptr_t lo, hi;
  if (!LoadedRange(info, &lo, &hi)) return 0;
  char path[4096];
  size_t n = 0;
  const char* name = info->dlpi_name;
  if (name == nullptr || name[0] == '\0') {
    if (my_index != 0) return 0;
    ssize_t r = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (r <= 0) return 0;
    n = static_cast<size_t>(r);
  } else if (name[0] != '/' && realpath(name, path) != nullptr) {
    n = StrLen(path);
  } else {
    n = StrLen(name);
    if (n >= sizeof(path)) n = sizeof(path) - 1;
    memcpy(path, name, n);
  }
  if (g_path_used + n > sizeof(g_path_pool)) return 1;
  memcpy(g_path_pool + g_path_used, path, n);
  m.path_off = static_cast<uint32_t>(g_path_used);
  m.path_len = static_cast<uint32_t>(n);
  g_path_used += n;
  m.start = lo;
  m.end = hi;
  m.bias = info->dlpi_addr;
  m.path_hash = HashBytes(path, n);
  ReadBuildId(info, &m);
  ++g_nseen;
  return 0;
}

}  // namespace

void RefreshMappings() {
  // dlopen marks the maps dirty when it starts (nothing of memstep runs after
  // it, hooks.cc): a refresh that runs before the new library is on the
  // loader's list clears the flag without seeing it. The loader's own count
  // of loads and unloads catches that library at the next refresh.
  if (LoaderGeneration() != g_maps_generation.load(std::memory_order_relaxed)) {
    g_maps_dirty.store(1, std::memory_order_release);
  }
  if (g_maps_dirty.load(std::memory_order_acquire) == 0) return;
  pthread_mutex_lock(&g_maps_mu);
  RefreshMappingsLocked();
  pthread_mutex_unlock(&g_maps_mu);
}

void ModulesForkPrepare() { pthread_mutex_lock(&g_maps_mu); }
void ModulesForkParent() { pthread_mutex_unlock(&g_maps_mu); }
void ModulesForkChild() { pthread_mutex_init(&g_maps_mu, nullptr); }

void RefreshMappingsLocked() {
  if (g_maps_dirty.exchange(0, std::memory_order_acq_rel) == 0) return;
  g_nseen = 0;
  g_path_used = 0;
  int index = 0;
  dl_iterate_phdr(CollectMap, &index);
  g_maps_generation.store(g_seen_generation, std::memory_order_relaxed);
  for (int i = 0; i < g_nmaps; ++i) g_maps[i].seen = false;
  uint8_t rec[512];
  for (int s = 0; s < g_nseen; ++s) {
    SeenMap& m = g_seen[s];
    bool known = false;
    for (int i = 0; i < g_nmaps; ++i) {
      Mapping& k = g_maps[i];
      if (k.start == m.start && k.bias == m.bias && k.path_hash == m.path_hash) {
        k.seen = true;
        known = true;
        break;
      }
    }
    if (known || g_nmaps >= kMaxMappings) continue;
    uint32_t path_id = g_dict.InternString(g_path_pool + m.path_off, m.path_len);
    Mapping& k = g_maps[g_nmaps++];
    k = Mapping{m.start, m.end, m.bias, m.path_hash, g_next_map_id++, true};
    fmt::MappingRecord def;
    def.id = k.id;
    def.ts = NowRel();
    def.start = m.start;
    def.end = m.end;
    def.load_bias = m.bias;
    def.path_str = path_id;
    def.build_id = fmt::ByteView{m.build_id, m.build_id_len};
    fmt::RecordEncoder e(rec, sizeof(rec));
    if (fmt::Encode(e, def)) g_dict.AppendRecord(rec, e.size());
  }
  for (int i = 0; i < g_nmaps;) {
    if (g_maps[i].seen) {
      ++i;
      continue;
    }
    fmt::MappingGoneRecord gone;
    gone.id = g_maps[i].id;
    gone.ts = NowRel();
    fmt::RecordEncoder e(rec, sizeof(rec));
    if (fmt::Encode(e, gone)) g_dict.AppendRecord(rec, e.size());
    g_maps[i] = g_maps[--g_nmaps];
  }
}

}  // namespace memstep::preload
