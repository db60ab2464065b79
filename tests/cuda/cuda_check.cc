// cuda_check: compares what a tests/cuda program planted (its facts files)
// with what the fake CUDA libraries logged and with the trace memstep wrote.
//
// Usage:
//   cuda_check --facts DIR [--log FILE] [--run-dir DIR] [--no-stacks]
//   cuda_check --no-device [--fail-err N] --run-dir DIR
// --facts DIR   every DIR/facts.<pid> (one per process of the program)
// --log FILE    FAKECUDA_LOG of the run: its lowest-layer events (ev=alloc,
//               free, fail) of each pid must equal the facts, documented
//               misses aside, and the trace (when --run-dir is given)
// --run-dir DIR the memstep run directory: the trace of each pid must hold
//               exactly the planted DEV_ALLOC/DEV_FREE/DEV_FAIL records (kind,
//               api, device, address, size, pool, step, stage, error), no
//               record of a documented miss, a stack containing the planted
//               function for every DEV_ALLOC and DEV_FAIL (the device of a
//               failure other than out-of-memory may be -1), the planted per-kind
//               totals, per-step and per-stage peaks, DEV_INFO values and
//               COUNTER records (pool and graph memory)
// --no-device   every trace in the run directory has no DEV_ALLOC or
//               DEV_FREE, and DEV_FAIL records only with error N (default 35,
//               what the runtime returns without a driver)
// Prints one line per mismatch and exits 1 if there is any; 0 otherwise.

#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "src/format/format.h"
#include "src/reader/reader.h"
#include "src/symbolize/symbolizer.h"

namespace fmt = memstep::format;
namespace rd = memstep::reader;

namespace {

int g_errors = 0;
std::string g_who;  // "app_dyn pid 123", prefix of messages

void Error(const std::string& msg) {
  fprintf(stderr, "cuda_check: %s: %s\n", g_who.c_str(), msg.c_str());
  ++g_errors;
}

// ---------------------------------------------------------------- facts

using Fields = std::map<std::string, std::string>;

struct Rec {
  std::string type;  // alloc free fail miss missfree devinfo steppeak stagepeak total
  Fields f;
  std::string Get(const std::string& k) const {
    auto it = f.find(k);
    return it == f.end() ? "" : it->second;
  }
  uint64_t Num(const std::string& k) const { return strtoull(Get(k).c_str(), nullptr, 0); }
  int64_t Int(const std::string& k) const { return strtoll(Get(k).c_str(), nullptr, 0); }
};

struct Facts {
  std::string path, app;
  int pid = 0;
  int via_driver = 0;
  std::vector<Rec> recs;
  bool complete = false;  // saw "end"
};

Rec ParseRec(const std::string& line) {
  Rec r;
  std::istringstream in(line);
  in >> r.type;
  std::string tok;
  while (in >> tok) {
    size_t eq = tok.find('=');
    if (eq != std::string::npos) r.f[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return r;
}

bool ReadFacts(const std::string& path, Facts* out) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line) || line != "cudafacts 1") return false;
  out->path = path;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string head;
    ls >> head;
    if (head == "pid")
      ls >> out->pid;
    else if (head == "app")
      ls >> out->app;
    else if (head == "via_driver")
      ls >> out->via_driver;
    else if (head == "end")
      out->complete = true;
    else if (!head.empty())
      out->recs.push_back(ParseRec(line));
  }
  return true;
}

std::vector<std::string> ListDir(const std::string& dir, const std::string& prefix,
                                 const std::string& suffix) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() >= prefix.size() + suffix.size() && n.compare(0, prefix.size(), prefix) == 0 &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.push_back(dir + "/" + n);
    }
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------- normalized events

// One event a lowest-layer profiler records, as a comparable string.
std::string StripPtsz(std::string api) {
  if (api.size() > 5 && api.compare(api.size() - 5, 5, "_ptsz") == 0) api.resize(api.size() - 5);
  return api;
}

std::string Hex(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string AllocKey(const std::string& kind, const std::string& api, int64_t dev, uint64_t addr,
                     uint64_t size, uint64_t aux) {
  return "alloc " + kind + " " + api + " dev=" + std::to_string(dev) + " " + Hex(addr) +
         " size=" + std::to_string(size) + " aux=" + Hex(aux);
}
std::string FreeKey(const std::string& kind, const std::string& api, uint64_t addr, uint64_t size) {
  return "free " + kind + " " + api + " " + Hex(addr) + " size=" + std::to_string(size);
}
// The device of a failure is planted exactly only for out-of-memory (2): for
// other errors a profiler may not be able to ask for the device without
// adding an error of its own, so -1 is accepted too (CheckRecords).
std::string FailKey(const std::string& kind, const std::string& api, int64_t dev, uint64_t size,
                    int64_t err) {
  return "fail " + kind + " " + api + " dev=" + (err == 2 ? std::to_string(dev) : "*") +
         " size=" + std::to_string(size) + " err=" + std::to_string(err);
}

using Multiset = std::multiset<std::string>;

// Reports the differences between two multisets of events.
void CompareSets(const Multiset& want, const Multiset& got, const std::string& want_name,
                 const std::string& got_name) {
  Multiset only_want, only_got;
  std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                      std::inserter(only_want, only_want.end()));
  std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                      std::inserter(only_got, only_got.end()));
  for (const std::string& s : only_want)
    Error("in " + want_name + ", not in " + got_name + ": " + s);
  for (const std::string& s : only_got)
    Error("in " + got_name + ", not in " + want_name + ": " + s);
}

std::set<uint64_t> MissedAddrs(const Facts& f) {
  std::set<uint64_t> s;
  for (const Rec& r : f.recs) {
    if (r.type == "miss") s.insert(r.Num("addr"));
  }
  return s;
}

Multiset FactEvents(const Facts& f) {
  Multiset m;
  for (const Rec& r : f.recs) {
    if (r.type == "alloc") {
      m.insert(AllocKey(r.Get("kind"), r.Get("api"), r.Int("dev"), r.Num("addr"), r.Num("size"),
                        r.Num("aux")));
    } else if (r.type == "free") {
      m.insert(FreeKey(r.Get("kind"), r.Get("api"), r.Num("addr"), r.Num("size")));
    } else if (r.type == "fail") {
      m.insert(FailKey(r.Get("kind"), r.Get("api"), r.Int("dev"), r.Num("size"), r.Int("err")));
    }
  }
  return m;
}

// The log's lowest-layer events of `pid`, without the documented misses.
Multiset LogEvents(const std::string& path, const Facts& f, int* missed_seen) {
  Multiset m;
  std::set<uint64_t> missed = MissedAddrs(f);
  std::ifstream in(path);
  std::string line;
  const std::string pid = std::to_string(f.pid);
  while (std::getline(in, line)) {
    Rec r = ParseRec("log " + line);
    if (r.Get("pid") != pid) continue;
    std::string ev = r.Get("ev"), api = StripPtsz(r.Get("call")), kind = r.Get("kind");
    if (ev == "none") continue;
    if (ev != "fail" && missed.count(r.Num("addr"))) {
      ++*missed_seen;
      continue;
    }
    if (ev == "alloc") {
      m.insert(AllocKey(kind, api, r.Int("dev"), r.Num("addr"), r.Num("size"), r.Num("aux")));
    } else if (ev == "free") {
      m.insert(FreeKey(kind, api, r.Num("addr"), r.Num("size")));
    } else if (ev == "fail") {
      m.insert(FailKey(kind, api, r.Int("dev"), r.Num("size"), r.Int("ret")));
    }
  }
  return m;
}

Multiset TraceEvents(const rd::Trace& t) {
  Multiset m;
  for (const rd::Event& e : t.events) {
    std::string kind = fmt::DeviceKindName(e.kind), api = fmt::DeviceApiName(e.api);
    if (e.tag == fmt::kTagDevAlloc) {
      m.insert(AllocKey(kind, api, e.device, e.addr, e.size, e.aux));
    } else if (e.tag == fmt::kTagDevFree) {
      m.insert(FreeKey(kind, api, e.addr, e.size));
    } else if (e.tag == fmt::kTagDevFail) {
      m.insert(FailKey(kind, api, e.device, e.size, e.value));
    }
  }
  return m;
}

// ---------------------------------------------------------------- stacks

class StackChecker {
 public:
  explicit StackChecker(const rd::Trace& t) : t_(t) {}

  // True if the stack `id` of an event at `ts` has a frame in `func`.
  bool Contains(uint64_t id, uint64_t ts, const std::string& func, std::string* seen) {
    auto it = t_.stacks.find(id);
    if (id == 0 || it == t_.stacks.end()) {
      *seen = "no stack";
      return false;
    }
    *seen = std::to_string(it->second.size()) + " frames: ";
    for (uint64_t ip : it->second) {
      const rd::Mapping* m = MappingOf(ip, ts);
      if (m == nullptr) {
        *seen += Hex(ip) + " (no module) < ";
        continue;
      }
      memstep::symbolize::Module mod{m->path, m->build_id, m->load_bias};
      for (const auto& fr : sym_.Symbolize(mod, ip, true)) {
        if (fr.function.find(func) != std::string::npos) return true;
        *seen += fr.function + " < ";
      }
    }
    return false;
  }

 private:
  // The mapping covering `ip` that was loaded at `ts`, else the last one
  // covering it (the first module map can be written after the first events),
  // as src/analysis does.
  const rd::Mapping* MappingOf(uint64_t ip, uint64_t ts) const {
    const rd::Mapping* fallback = nullptr;
    for (const rd::Mapping& m : t_.mappings) {
      if (ip < m.start || ip >= m.end) continue;
      if (m.ts <= ts && ts < m.gone_ts) return &m;
      fallback = &m;
    }
    return fallback;
  }

  const rd::Trace& t_;
  memstep::symbolize::Symbolizer sym_;
};

// ---------------------------------------------------------------- trace vs facts

// Per-kind replay of the trace: totals, peaks per step and stage.
struct Replay {
  struct Totals {
    uint64_t count = 0, bytes = 0, live = 0, peak = 0;
  };
  std::map<std::string, Totals> kinds;
  std::map<std::pair<uint64_t, std::string>, std::pair<uint64_t, uint64_t>> step;  // peak, live
  std::map<std::tuple<uint64_t, std::string, std::string>, uint64_t> stage;        // peak

  explicit Replay(const rd::Trace& t) {
    std::map<std::pair<uint8_t, uint64_t>, uint64_t> blocks;  // (kind, addr) -> size
    std::map<std::string, uint64_t> step_peak;
    bool step_open = false;
    uint64_t cur = 0;
    struct Open {
      uint64_t step;
      std::string name;
      std::map<std::string, uint64_t> peak;
    };
    std::vector<Open> stages;
    auto raise = [&](const std::string& k) {
      Totals& x = kinds[k];
      x.peak = std::max(x.peak, x.live);
      if (step_open) step_peak[k] = std::max(step_peak[k], x.live);
      for (Open& o : stages) o.peak[k] = std::max(o.peak[k], x.live);
    };
    for (const rd::Event& e : t.events) {
      std::string k = fmt::DeviceKindName(e.kind);
      if (e.tag == fmt::kTagDevAlloc) {
        blocks[{e.kind, e.addr}] = e.size;
        Totals& x = kinds[k];
        x.count++;
        x.bytes += e.size;
        x.live += e.size;
        raise(k);
      } else if (e.tag == fmt::kTagDevFree) {
        auto it = blocks.find({e.kind, e.addr});
        if (it != blocks.end()) {
          kinds[k].live -= it->second;
          blocks.erase(it);
        }
      } else if (e.tag == fmt::kTagStep && e.phase == 0) {
        step_open = true;
        cur = e.step;
        step_peak.clear();
        for (auto& [name, x] : kinds) step_peak[name] = x.live;
      } else if (e.tag == fmt::kTagStep && e.phase == 1 && step_open) {
        for (auto& [name, x] : kinds) step[{e.step, name}] = {step_peak[name], x.live};
        step_open = false;
      } else if (e.tag == fmt::kTagStage && e.phase == 0) {
        Open o{cur, t.String(e.str), {}};
        for (auto& [name, x] : kinds) o.peak[name] = x.live;
        stages.push_back(o);
      } else if (e.tag == fmt::kTagStage && e.phase == 1) {
        std::string name = t.String(e.str);
        for (size_t i = stages.size(); i-- > 0;) {
          if (stages[i].name != name) continue;
          for (auto& [kn, p] : stages[i].peak) {
            uint64_t& slot = stage[{stages[i].step, name, kn}];
            slot = std::max(slot, p);
          }
          stages.erase(stages.begin() + static_cast<long>(i));
          break;
        }
      }
    }
  }
};

void CheckStepStage(const rd::Event& e, const rd::Trace& t, const Rec& r) {
  std::string step = r.Get("step");
  if (step == "-" || step.empty()) return;
  std::string stage = r.Get("stage") == "-" ? "" : r.Get("stage");
  if (e.step != strtoull(step.c_str(), nullptr, 10) || t.String(e.str) != stage) {
    Error(r.type + " of " + r.Get("func") + ": recorded at step " + std::to_string(e.step) +
          " stage '" + t.String(e.str) + "', planted step " + step + " stage '" + stage + "'");
  }
}

void CheckRecords(const Facts& f, const rd::Trace& t, bool stacks) {
  StackChecker sc(t);
  std::map<std::pair<std::string, uint64_t>, const rd::Event*> allocs;  // (kind, addr)
  std::vector<const rd::Event*> fails;
  for (const rd::Event& e : t.events) {
    if (e.tag == fmt::kTagDevAlloc) allocs[{fmt::DeviceKindName(e.kind), e.addr}] = &e;
    if (e.tag == fmt::kTagDevFail) fails.push_back(&e);
  }
  for (const Rec& r : f.recs) {
    const rd::Event* e = nullptr;
    if (r.type == "alloc") {
      auto it = allocs.find({r.Get("kind"), r.Num("addr")});
      if (it == allocs.end()) continue;  // reported by the event comparison
      e = it->second;
    } else if (r.type == "fail") {
      for (auto it = fails.begin(); it != fails.end() && e == nullptr; ++it) {
        const rd::Event* c = *it;
        if (fmt::DeviceKindName(c->kind) == r.Get("kind") &&
            fmt::DeviceApiName(c->api) == r.Get("api") && c->size == r.Num("size") &&
            c->value == r.Int("err")) {
          e = c;
          fails.erase(it);
          break;
        }
      }
      if (e == nullptr) continue;
      if (e->device != r.Int("dev") && e->device != -1) {
        Error("fail " + r.Get("api") + " size " + r.Get("size") + ": device " +
              std::to_string(e->device) + ", planted " + r.Get("dev") + " (or -1)");
      }
    } else if (r.type == "miss") {
      if (allocs.count({r.Get("kind"), r.Num("addr")})) {
        Error("documented miss (" + r.Get("why") + ") " + r.Get("api") + " " + r.Get("addr") +
              " is in the trace: update the facts and docs if memstep now sees it");
      }
      continue;
    } else {
      continue;
    }
    CheckStepStage(*e, t, r);
    std::string seen;
    if (e->tag == fmt::kTagDevAlloc && !e->sampled) {  // counted, never unwound
      if (e->stack != 0) Error(r.type + " " + r.Get("api") + ": not sampled but has a stack");
      continue;
    }
    if (stacks && !sc.Contains(e->stack, e->ts, r.Get("func"), &seen)) {
      Error(r.type + " " + r.Get("api") + " size " + r.Get("size") + ": stack " +
            std::to_string(e->stack) + " lacks " + r.Get("func") + " (" + seen + ")");
    }
  }
}

void CheckAggregates(const Facts& f, const rd::Trace& t) {
  Replay rp(t);
  for (const Rec& r : f.recs) {
    std::string k = r.Get("kind");
    if (r.type == "total") {
      const Replay::Totals& x = rp.kinds[k];
      if (x.count != r.Num("count") || x.bytes != r.Num("bytes") || x.live != r.Num("live_bytes") ||
          (r.Get("peak") != "-" && x.peak != r.Num("peak"))) {
        Error(k + ": trace has count " + std::to_string(x.count) + " bytes " +
              std::to_string(x.bytes) + " live " + std::to_string(x.live) + " peak " +
              std::to_string(x.peak) + "; planted " + r.Get("count") + " " + r.Get("bytes") + " " +
              r.Get("live_bytes") + " " + r.Get("peak"));
      }
    } else if (r.type == "steppeak") {
      auto it = rp.step.find({r.Num("step"), k});
      std::pair<uint64_t, uint64_t> v{0, 0};
      if (it != rp.step.end()) v = it->second;
      if ((r.Get("peak") != "-" && v.first != r.Num("peak")) || v.second != r.Num("live")) {
        Error("step " + r.Get("step") + " " + k + ": trace peak " + std::to_string(v.first) +
              " live at end " + std::to_string(v.second) + "; planted " + r.Get("peak") + " " +
              r.Get("live"));
      }
    } else if (r.type == "stagepeak") {
      uint64_t v = rp.stage[{r.Num("step"), r.Get("stage"), k}];
      if (v != r.Num("peak")) {
        Error("step " + r.Get("step") + " stage " + r.Get("stage") + " " + k + ": trace peak " +
              std::to_string(v) + "; planted " + r.Get("peak"));
      }
    } else if (r.type == "counter") {
      bool found = false;
      for (const rd::Event& e : t.events) {
        if (e.tag == fmt::kTagCounter && t.String(e.str) == r.Get("name") &&
            static_cast<uint64_t>(e.value) == r.Num("value")) {
          found = true;
        }
      }
      if (!found) Error("no COUNTER " + r.Get("name") + " = " + r.Get("value"));
    } else if (r.type == "devinfo") {
      bool found = false;
      for (const rd::DeviceInfo& i : t.device_info) {
        if (i.step != r.Num("step") || i.device != r.Int("dev")) continue;
        found = true;
        if (i.free_bytes != r.Num("free") || i.total_bytes != r.Num("total") ||
            i.pool_reserved != r.Num("pool_reserved") || i.pool_used != r.Num("pool_used")) {
          Error("DEV_INFO step " + r.Get("step") + " device " + r.Get("dev") + ": free " +
                std::to_string(i.free_bytes) + " total " + std::to_string(i.total_bytes) +
                " pool " + std::to_string(i.pool_reserved) + "/" + std::to_string(i.pool_used) +
                "; planted " + r.Get("free") + " " + r.Get("total") + " " + r.Get("pool_reserved") +
                "/" + r.Get("pool_used"));
        }
      }
      if (!found) Error("no DEV_INFO for step " + r.Get("step") + " device " + r.Get("dev"));
    }
  }
}

// ---------------------------------------------------------------- main

std::map<int, std::string> TracesByPid(const std::string& run_dir) {
  std::map<int, std::string> m;
  for (const std::string& p : ListDir(run_dir, "memstep.", ".trace")) {
    std::ifstream in(p, std::ios::binary);
    fmt::FileHeader h{};
    if (in.read(reinterpret_cast<char*>(&h), sizeof h)) m[static_cast<int>(h.pid)] = p;
  }
  return m;
}

bool LoadTrace(const std::string& path, rd::Trace* out) {
  auto t = rd::ReadTraceFile(path);
  if (!t.ok()) {
    Error("cannot read " + path + ": " + std::string(t.status().message()));
    return false;
  }
  *out = std::move(*t);
  if (out->truncated) Error(path + " is truncated");
  if (!out->has_trailer) Error(path + " has no trailer (the process did not exit cleanly?)");
  return true;
}

int CheckNoDevice(const std::string& run_dir, int64_t fail_err) {
  g_who = run_dir;
  std::map<int, std::string> traces = TracesByPid(run_dir);
  if (traces.empty()) Error("no trace");
  for (auto& [pid, path] : traces) {
    rd::Trace t;
    if (!LoadTrace(path, &t)) continue;
    for (const rd::Event& e : t.events) {
      if (e.tag == fmt::kTagDevAlloc || e.tag == fmt::kTagDevFree) {
        Error("pid " + std::to_string(pid) + ": a device record with no driver: " +
              AllocKey(fmt::DeviceKindName(e.kind), fmt::DeviceApiName(e.api), e.device, e.addr,
                       e.size, e.aux));
      } else if (e.tag == fmt::kTagDevFail && e.value != fail_err) {
        Error("pid " + std::to_string(pid) + ": DEV_FAIL with error " + std::to_string(e.value) +
              ", the runtime returned " + std::to_string(fail_err));
      }
    }
  }
  if (g_errors == 0) printf("cuda_check: %s: no device records\n", run_dir.c_str());
  return g_errors ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string facts_dir, log, run_dir;
  bool stacks = true, no_device = false;
  int64_t fail_err = 35;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--facts" && i + 1 < argc)
      facts_dir = argv[++i];
    else if (a == "--log" && i + 1 < argc)
      log = argv[++i];
    else if (a == "--run-dir" && i + 1 < argc)
      run_dir = argv[++i];
    else if (a == "--no-stacks")
      stacks = false;
    else if (a == "--no-device")
      no_device = true;
    else if (a == "--fail-err" && i + 1 < argc)
      fail_err = strtoll(argv[++i], nullptr, 10);
    else {
      fprintf(stderr, "cuda_check: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (no_device) return CheckNoDevice(run_dir, fail_err);
  std::vector<std::string> files = ListDir(facts_dir, "facts.", "");
  if (files.empty()) {
    fprintf(stderr, "cuda_check: no facts files in %s\n", facts_dir.c_str());
    return 1;
  }
  std::map<int, std::string> traces;
  if (!run_dir.empty()) traces = TracesByPid(run_dir);
  for (const std::string& path : files) {
    Facts f;
    g_who = path;
    if (!ReadFacts(path, &f) || !f.complete) {
      Error("not a complete facts file");
      continue;
    }
    g_who = f.app + " pid " + std::to_string(f.pid);
    Multiset facts = FactEvents(f);
    Multiset logged;
    if (!log.empty()) {
      int missed_seen = 0;
      logged = LogEvents(log, f, &missed_seen);
      CompareSets(facts, logged, "the facts", "the fakes' log");
      if (missed_seen < static_cast<int>(MissedAddrs(f).size())) {
        Error("a documented miss is not in the fakes' log");
      }
    }
    if (!run_dir.empty()) {
      auto it = traces.find(f.pid);
      if (it == traces.end()) {
        Error("no trace for pid " + std::to_string(f.pid) + " in " + run_dir);
        continue;
      }
      rd::Trace t;
      if (!LoadTrace(it->second, &t)) continue;
      Multiset traced = TraceEvents(t);
      CompareSets(facts, traced, "the facts", "the trace");
      if (!log.empty()) CompareSets(logged, traced, "the fakes' log", "the trace");
      CheckRecords(f, t, stacks);
      CheckAggregates(f, t);
    }
    if (g_errors == 0) {
      printf("cuda_check: %s: %zu planted events match%s%s\n", g_who.c_str(), facts.size(),
             log.empty() ? "" : " the log", run_dir.empty() ? "" : " and the trace");
    }
  }
  return g_errors ? 1 : 0;
}
