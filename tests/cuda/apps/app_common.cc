// Planted-fact tally and facts writer shared by the tests/cuda programs.
#include "tests/cuda/apps/app_common.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "memstep/memstep.h"

namespace cudatest {
namespace {

constexpr int kKinds = 6;  // indexed by Kind; 0 unused

struct Block {
  Kind kind;
  uint64_t size;
  std::string api;
};

struct StepPeaks {
  uint64_t step;
  uint64_t peak[kKinds];
  uint64_t live[kKinds];
};

struct StagePeak {
  uint64_t step;
  std::string stage;
  uint64_t peak[kKinds];
};

// Protected by g_mu.
struct Tally {
  std::string dir, app;
  std::vector<std::string> lines;  // alloc/free/fail/miss/devinfo lines in call order
  std::map<uint64_t, Block> live_blocks;
  std::map<uint64_t, Block> missed;  // live blocks memstep cannot see
  uint64_t live[kKinds] = {};
  uint64_t peak[kKinds] = {};
  uint64_t count[kKinds] = {};
  uint64_t bytes[kKinds] = {};
  uint64_t miss_live[kKinds] = {};
  uint64_t fork_base[kKinds] = {};  // the fake's live bytes inherited at fork
  bool used[kKinds] = {};
  uint64_t fails = 0;
  bool step_open = false;
  uint64_t step = 0;
  std::vector<StepPeaks> steps;
  std::vector<StagePeak> stages;    // open ones are at the back of `open_stages`
  std::vector<size_t> open_stages;  // indexes into `stages`
  bool peaks = true;
};

std::mutex g_mu;
Tally* g_tally = new Tally;  // never destroyed: used until exit

std::string Hex(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string Where() {  // " step=S stage=NAME" of the current position
  Tally& t = *g_tally;
  std::string s = " step=" + (t.step_open ? std::to_string(t.step) : std::string("-"));
  s +=
      " stage=" + (t.open_stages.empty() ? std::string("-") : t.stages[t.open_stages.back()].stage);
  return s;
}

std::string StripPtsz(const char* api) {
  std::string s = api;
  if (s.size() > 5 && s.compare(s.size() - 5, 5, "_ptsz") == 0) s.resize(s.size() - 5);
  return s;
}

void Raise(Kind k) {  // after live[k] grew
  Tally& t = *g_tally;
  if (t.live[k] > t.peak[k]) t.peak[k] = t.live[k];
  if (t.step_open && t.live[k] > t.steps.back().peak[k]) t.steps.back().peak[k] = t.live[k];
  for (size_t i : t.open_stages) {
    if (t.live[k] > t.stages[i].peak[k]) t.stages[i].peak[k] = t.live[k];
  }
}

}  // namespace

void Die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  fflush(stderr);
  _exit(1);
}

void Check(bool ok, const char* fmt, ...) {
  if (ok) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  Die("%s", buf);
}

void CheckRc(long got, long want, const char* what) {
  Check(got == want, "%s returned %ld, expected %ld", what, got, want);
}

void Init(int argc, char** argv, const char* app, const char* const* knobs) {
  if (argc < 2) Die("usage: %s FACTS_DIR", argv[0]);
  g_tally->dir = argv[1];
  g_tally->app = app;
  for (; knobs && *knobs; ++knobs) putenv(const_cast<char*>(*knobs));
}

bool ViaDriver() {
  const char* v = getenv("FAKECUDA_RT_VIA_DRIVER");
  return v && v[0] == '1';
}

const char* Lowest(const char* api) {
  if (!ViaDriver()) return api;
  static const char* const kMap[][2] = {
      {"cudaMalloc", "cuMemAlloc_v2"},
      {"cudaFree", "cuMemFree_v2"},
      {"cudaMallocAsync", "cuMemAllocAsync"},
      {"cudaFreeAsync", "cuMemFreeAsync"},
      {"cudaMallocFromPoolAsync", "cuMemAllocFromPoolAsync"},
      {"cudaHostRegister", "cuMemHostRegister_v2"},
      {"cudaHostUnregister", "cuMemHostUnregister"},
      {"cudaMallocArray", "cuArray3DCreate_v2"},
      {"cudaMalloc3DArray", "cuArray3DCreate_v2"},
      {"cudaMallocMipmappedArray", "cuMipmappedArrayCreate"},
      {"cudaFreeArray", "cuArrayDestroy"},
      {"cudaFreeMipmappedArray", "cuMipmappedArrayDestroy"},
      {"cudaIpcOpenMemHandle", "cuIpcOpenMemHandle_v2"},
      {"cudaIpcCloseMemHandle", "cuIpcCloseMemHandle"},
      {"cudaGraphAddMemAllocNode", "cuGraphAddMemAllocNode"},
      {"cudaGraphAddMemFreeNode", "cuGraphAddMemFreeNode"},
  };
  for (auto& m : kMap) {
    if (strcmp(m[0], api) == 0) return m[1];
  }
  return api;
}

void Alloc(Kind kind, const char* api, int dev, uint64_t addr, uint64_t size, const char* func,
           uint64_t aux) {
  int fk = 0, fdev = 0, owner = 0;
  uint64_t fsize = 0;
  const char* fapi = "";
  Check(fakecuda_block_info(addr, &fk, &fdev, &fsize, &fapi, &owner) == 1,
        "%s: %s 0x%llx is not live in the fake", func, api, (unsigned long long)addr);
  Check(fk == kind && fdev == dev && fsize == size && StripPtsz(fapi) == api,
        "%s: the fake has kind %d dev %d size %llu api %s; expected %d %d %llu %s", func, fk, fdev,
        (unsigned long long)fsize, fapi, static_cast<int>(kind), dev, (unsigned long long)size,
        api);
  std::lock_guard<std::mutex> l(g_mu);
  Tally& t = *g_tally;
  t.lines.push_back(std::string("alloc kind=") + fc_kind_name(kind) + " api=" + api + " dev=" +
                    std::to_string(dev) + " addr=" + Hex(addr) + " size=" + std::to_string(size) +
                    " aux=" + Hex(aux) + Where() + " func=" + func);
  t.live_blocks[addr] = Block{kind, size, api};
  t.used[kind] = true;
  t.count[kind]++;
  t.bytes[kind] += size;
  t.live[kind] += size;
  Raise(kind);
}

void CheckMadeBy(uint64_t addr, const char* api, int owner) {
  const char* fapi = "";
  int fowner = 0;
  Check(fakecuda_block_info(addr, nullptr, nullptr, nullptr, &fapi, &fowner) == 1,
        "0x%llx is not live", (unsigned long long)addr);
  Check(strcmp(fapi, api) == 0 && fowner == owner, "0x%llx was made by %s (owner %d), not %s (%d)",
        (unsigned long long)addr, fapi, fowner, api, owner);
}

void Free(Kind kind, const char* api, uint64_t addr) {
  Check(fakecuda_block_info(addr, nullptr, nullptr, nullptr, nullptr, nullptr) == 0,
        "%s 0x%llx: still live in the fake", api, (unsigned long long)addr);
  std::lock_guard<std::mutex> l(g_mu);
  Tally& t = *g_tally;
  auto it = t.live_blocks.find(addr);
  if (it == t.live_blocks.end() || it->second.kind != kind) {
    Die("%s 0x%llx: no live planted block of that kind", api, (unsigned long long)addr);
  }
  t.lines.push_back(std::string("free kind=") + fc_kind_name(kind) + " api=" + api +
                    " addr=" + Hex(addr) + " size=" + std::to_string(it->second.size));
  t.live[kind] -= it->second.size;
  t.live_blocks.erase(it);
}

void Fail(Kind kind, const char* api, int dev, uint64_t size, int err, const char* func) {
  std::lock_guard<std::mutex> l(g_mu);
  Tally& t = *g_tally;
  t.lines.push_back(std::string("fail kind=") + fc_kind_name(kind) + " api=" + api +
                    " dev=" + std::to_string(dev) + " size=" + std::to_string(size) +
                    " err=" + std::to_string(err) + Where() + " func=" + func);
  t.fails++;
}

void Miss(Kind kind, const char* api, uint64_t addr, uint64_t size, const char* why) {
  std::lock_guard<std::mutex> l(g_mu);
  Tally& t = *g_tally;
  t.lines.push_back(std::string("miss kind=") + fc_kind_name(kind) + " api=" + api +
                    " addr=" + Hex(addr) + " size=" + std::to_string(size) + " why=" + why);
  t.missed[addr] = Block{kind, size, api};
  t.miss_live[kind] += size;
}

void MissFree(uint64_t addr) {
  std::lock_guard<std::mutex> l(g_mu);
  Tally& t = *g_tally;
  auto it = t.missed.find(addr);
  if (it == t.missed.end()) Die("MissFree 0x%llx: not a missed block", (unsigned long long)addr);
  t.lines.push_back("missfree addr=" + Hex(addr));
  t.miss_live[it->second.kind] -= it->second.size;
  t.missed.erase(it);
}

void DevInfo(uint64_t step, int dev, uint64_t free_bytes, uint64_t total, uint64_t pool_reserved,
             uint64_t pool_used) {
  std::lock_guard<std::mutex> l(g_mu);
  g_tally->lines.push_back("devinfo step=" + std::to_string(step) + " dev=" + std::to_string(dev) +
                           " free=" + std::to_string(free_bytes) +
                           " total=" + std::to_string(total) +
                           " pool_reserved=" + std::to_string(pool_reserved) +
                           " pool_used=" + std::to_string(pool_used));
}

void Counter(const std::string& name, uint64_t value) {
  std::lock_guard<std::mutex> l(g_mu);
  g_tally->lines.push_back("counter name=" + name + " value=" + std::to_string(value));
}

void StepBegin(uint64_t step) {
  {
    std::lock_guard<std::mutex> l(g_mu);
    Tally& t = *g_tally;
    if (t.step_open) Die("StepBegin(%llu) with a step open", (unsigned long long)step);
    t.step_open = true;
    t.step = step;
    StepPeaks s{step, {}, {}};
    for (int k = 0; k < kKinds; ++k) s.peak[k] = t.live[k];
    t.steps.push_back(s);
  }
  MEMSTEP_STEP_BEGIN(step);
}

void StepEnd(uint64_t step) {
  MEMSTEP_STEP_END(step);
  std::lock_guard<std::mutex> l(g_mu);
  Tally& t = *g_tally;
  if (!t.step_open || t.step != step)
    Die("StepEnd(%llu) without that step", (unsigned long long)step);
  for (int k = 0; k < kKinds; ++k) t.steps.back().live[k] = t.live[k];
  t.step_open = false;
}

void StageBegin(const char* name) {
  {
    std::lock_guard<std::mutex> l(g_mu);
    Tally& t = *g_tally;
    if (!t.step_open) Die("stage %s outside a step", name);
    StagePeak s{t.step, name, {}};
    for (int k = 0; k < kKinds; ++k) s.peak[k] = t.live[k];
    t.stages.push_back(s);
    t.open_stages.push_back(t.stages.size() - 1);
  }
  MEMSTEP_STAGE_BEGIN(name);
}

void StageEnd(const char* name) {
  MEMSTEP_STAGE_END(name);
  std::lock_guard<std::mutex> l(g_mu);
  Tally& t = *g_tally;
  if (t.open_stages.empty() || t.stages[t.open_stages.back()].stage != name) {
    Die("StageEnd(%s) is not the innermost open stage", name);
  }
  t.open_stages.pop_back();
}

void NoPeaks() {
  std::lock_guard<std::mutex> l(g_mu);
  g_tally->peaks = false;
}

void ForkChild() {
  std::lock_guard<std::mutex> l(g_mu);
  std::string dir = g_tally->dir, app = g_tally->app + "-child";
  bool peaks = g_tally->peaks;
  g_tally = new Tally;  // the parent's tally is not the child's business
  g_tally->dir = dir;
  g_tally->app = app;
  g_tally->peaks = peaks;
  for (int k = 1; k < kKinds; ++k) g_tally->fork_base[k] = fakecuda_live_bytes(k);
}

void Finish() {
  std::lock_guard<std::mutex> l(g_mu);
  Tally& t = *g_tally;
  if (t.step_open) Die("Finish with step %llu open", (unsigned long long)t.step);
  for (int k = 1; k < kKinds; ++k) {
    uint64_t fake = fakecuda_live_bytes(k) - t.fork_base[k];
    Check(fake == t.live[k] + t.miss_live[k],
          "live %s bytes: the fake has %llu, the program planted %llu (+%llu missed)",
          fc_kind_name(k), (unsigned long long)fake, (unsigned long long)t.live[k],
          (unsigned long long)t.miss_live[k]);
  }
  std::string path = t.dir + "/facts." + std::to_string(getpid());
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) Die("cannot write %s", path.c_str());
  fprintf(f, "cudafacts 1\npid %d\napp %s\nvia_driver %d\n", getpid(), t.app.c_str(),
          ViaDriver() ? 1 : 0);
  for (const std::string& line : t.lines) fprintf(f, "%s\n", line.c_str());
  for (int k = 1; k < kKinds; ++k) {
    if (!t.used[k]) continue;
    const char* kn = fc_kind_name(k);
    for (const StepPeaks& s : t.steps) {
      fprintf(f, "steppeak step=%llu kind=%s peak=%s live=%llu\n", (unsigned long long)s.step, kn,
              t.peaks ? std::to_string(s.peak[k]).c_str() : "-", (unsigned long long)s.live[k]);
    }
    for (const StagePeak& s : t.stages) {
      if (!t.peaks) break;
      fprintf(f, "stagepeak step=%llu stage=%s kind=%s peak=%llu\n", (unsigned long long)s.step,
              s.stage.c_str(), kn, (unsigned long long)s.peak[k]);
    }
    fprintf(f, "total kind=%s count=%llu bytes=%llu live_bytes=%llu peak=%s\n", kn,
            (unsigned long long)t.count[k], (unsigned long long)t.bytes[k],
            (unsigned long long)t.live[k], t.peaks ? std::to_string(t.peak[k]).c_str() : "-");
  }
  fprintf(f, "fails count=%llu\nend\n", (unsigned long long)t.fails);
  if (fclose(f) != 0) Die("cannot write %s", path.c_str());
}

}  // namespace cudatest
