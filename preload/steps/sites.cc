// Peak composition in process (sampling-and-format.md 6.4): per-stack running
// Horvitz-Thompson estimates of live bytes and blocks over the sampled
// allocations, and snapshots of the top sites when exact live bytes rise.
//
// Tables (raw mmap at init, never grown):
//  - g_blocks: address -> packed (stack, sampling rate, size) of every
//    tracked sampled block, so that a free removes exactly the weight its
//    allocation added (preload/core/addr_map.h, 64 shards x 16384 slots).
//  - g_sites: open addressing keyed by stack id + 1 (0 = empty), lock-free
//    (CAS on the key, atomic adds), with a dense list of used slots so that a
//    snapshot scans only the sites that exist.
//  - screened contexts: while a leak hunt screens (progressive.cc), a screen
//    (a sampled block taken without a stack, recorder.cc ChooseSample) is
//    tallied under its Python context (a "site" whose key has
//    kScreenKeyBit set: never a stack, never written to the trace, never in
//    a snapshot); the contexts whose long-lived screens grow become the
//    hunt's targets (SitesHuntTargets).
// Snapshots are taken by whichever thread flushes counters past a threshold
// (one try-lock, never waits), kept per open stage level (the last one wins)
// and for the run peak; the stage's is emitted at stage end, the run peak's by
// the writer thread.

#include <math.h>

#include "preload/core/addr_map.h"
#include "preload/host/recorder.h"
#include "preload/steps/config.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace {

constexpr uint32_t kSiteCap = 1u << 16;
constexpr uint32_t kProbe = 128;
// How far (in standard deviations of its sampling noise) a site's growth since
// the hunt's checkpoint must stand above 0 to explain any of the exact growth.
constexpr double kHuntSiteZ = 3;
// What a block recorded with p = 1 (S_always or more) is worth in a hunt's
// sample counts: it has no sampling noise, so three of them, born in three
// steps, make the kHuntMinSamples (24) an explanation needs, as the report's
// classifier takes such blocks from three steps for its ten samples
// (src/analysis/growth.h). Counted as one, a leak of one 64 MiB tensor every
// eight steps kept a hunt running to its end at T = 256 B.
constexpr int32_t kExactSampleWorth = 8;
// The fewest steps since the hunt's checkpoint whose samples a site's growth
// must come from to explain any of the exact growth, as the report's
// classifier takes samples born in three steps at least: what one step
// makes at once is an event, not a leak's growth. An object renewed in one
// step (a DataLoader's index list, made anew each epoch) has its new copy
// sampled densely by the hunt and its old one, born before the hunt, not in
// the tally at all: its site "grew" by the whole list. It explained a
// torch.cat history of 4 KiB a step and ended the hunt, whose buffer was
// then sampled at T = 512 KiB and not named.
constexpr int32_t kHuntMinSteps = 3;
// A screened context becomes a target when it has at least this many
// long-lived screens and their estimated bytes stand kTargetZ standard
// deviations above their sampling noise. Lenient: a wrong
// target costs stacks (within the hunt's budget), never an estimate.
constexpr int32_t kTargetMinScreens = 2;
constexpr double kTargetZ = 1.5;
// Or when, at this many step ends in a row that kept a screen of it (the
// others, where a draw was kept with a stack or missed it, are skipped), the
// one screened block born in the step that outlived it was larger than the
// one before: a string, list or buffer rebuilt or regrown each step with
// more in it has one long-lived screen at a time, so it never has
// kTargetMinScreens, however fast it grows. Sizes, not weights: a weight
// changes with S. One block of random size renewed each step makes five
// rises in a row once in 6! = 720 starts, and a wrong target costs only
// stacks.
constexpr int32_t kTargetMinRises = 5;
// The rises must go on: the last one at most this many step ends ago.
constexpr uint32_t kTargetRiseAge = 8;

struct Site {
  std::atomic<uint32_t> key;  // stack + 1; 0 = empty
  std::atomic<int64_t> bytes;
  std::atomic<int64_t> count;
  std::atomic<int64_t> base;  // bytes at the growth baseline
  // The leak hunt's tallies of hunt-born samples (taken while a hunt runs):
  // long-lived (born before the current step and live) and this step's, in
  // bytes and in samples; the long-lived ones at the hunt's checkpoint.
  std::atomic<int64_t> hunt_old;
  std::atomic<int64_t> hunt_new;
  std::atomic<int32_t> hunt_old_n;
  std::atomic<int32_t> hunt_new_n;
  // Step ends at which samples born in that step entered the long-lived
  // tally (kHuntMinSteps), and that count at the checkpoint.
  std::atomic<int32_t> hunt_steps;
  // The sampling variance of those tallies (sum of w (w - size) per sample,
  // in KiB^2): this step's, and the running sums of what entered the
  // long-lived tally and what left it (freed); both only grow, so the
  // variance of the change since the checkpoint is bounded by their rises.
  std::atomic<int64_t> hunt_var_new;
  std::atomic<int64_t> hunt_var_in;
  std::atomic<int64_t> hunt_var_out;
  int64_t hunt_chk;
  int32_t hunt_chk_n;
  int32_t hunt_chk_steps;
  int64_t hunt_chk_var;  // hunt_var_in + hunt_var_out at the checkpoint
  // kTargetMinRises: the usable bytes of this step's live hunt-born samples;
  // at the last step end that moved any, their bytes (when one block; else
  // 0); the rises in a row since, and the hunt epoch of the last one.
  std::atomic<int64_t> hunt_new_size;
  std::atomic<int64_t> hunt_last_size;
  std::atomic<int32_t> hunt_rises;
  std::atomic<uint32_t> hunt_rise_epoch;
};

struct Snap {
  bool valid;
  uint64_t step;
  uint32_t stage;
  uint32_t n;
  uint32_t stack[kSnapshotTop];
  int64_t bytes[kSnapshotTop];
  int64_t count[kSnapshotTop];
};

Site* g_sites = nullptr;
uint32_t* g_used = nullptr;  // slot + 1 per used site; 0 = being published
std::atomic<uint32_t> g_nused{0};
ShardedAddrMap<uint64_t, 6> g_blocks;  // address -> Pack(...)
bool g_sites_on = false;

SpinLock g_snap_lock;  // protects the snapshots below (after g_api_lock)
Snap g_stage_snap[kMaxStageDepth];
std::atomic<uint64_t> g_stage_thresh[kMaxStageDepth];
Snap g_run_snap;
bool g_run_pending = false;
std::atomic<uint64_t> g_run_thresh{0};

uint64_t Threshold(uint64_t level, uint64_t pct) {
  uint64_t a = level + level / 100 * pct + (level % 100) * pct / 100;
  uint64_t b = level + g_features.snap_min_bytes;
  return a > b ? a : b;
}

// Sampling intervals in use, by id 1..kMaxRates (0 = recorded with p = 1).
// Progressive sampling uses a handful of distinct T values (T_warm, doublings,
// T_steady), so a tiny append-only table lets a packed block carry its T.
constexpr uint32_t kMaxRates = 15;
std::atomic<uint64_t> g_rates[kMaxRates + 1];

uint32_t RateId(uint64_t interval) {
  if (interval == 0) return 0;
  for (uint32_t i = 1; i <= kMaxRates; ++i) {
    uint64_t v = g_rates[i].load(std::memory_order_acquire);
    if (v == interval) return i;
    if (v == 0) {
      uint64_t expected = 0;
      if (g_rates[i].compare_exchange_strong(expected, interval, std::memory_order_acq_rel) ||
          expected == interval) {
        return i;
      }
    }
  }
  // Table full (never with the built-in schedule): the closest T in use.
  uint32_t best = 1;
  uint64_t best_d = UINT64_MAX;
  for (uint32_t i = 1; i <= kMaxRates; ++i) {
    uint64_t v = g_rates[i].load(std::memory_order_acquire);
    uint64_t d = v > interval ? v - interval : interval - v;
    if (d < best_d) best_d = d, best = i;
  }
  return best;
}

// Hunt-born samples: whether a hunt runs, and the hunt's step counter (it
// advances at every step end; a block keeps its low 4 bits).
std::atomic<bool> g_hunt_on{false};
std::atomic<uint32_t> g_hunt_epoch{0};
// Some site's tally of this step's hunt-born blocks changed: the step end
// must move them (else it skips the scan of every site).
std::atomic<bool> g_hunt_new_any{false};

// packed = stack (23 bits) | hunt-born (1) | hunt epoch at birth (4 bits) |
// rate id (4 bits) | size (32 bits: below 128 MiB, the request in bits 0-26
// and the slack, usable - request, in bits 27-30 (saturated at 15); from
// 128 MiB, bit 31 set and the request / 16 in bits 0-30 (saturated at
// 32 GiB), no slack). Stack ids stay below 2^21 (the dictionary's stack
// table).
constexpr uint64_t kSmallSize = uint64_t{1} << 27;
constexpr uint64_t kLargeBit = uint64_t{1} << 31;
uint64_t PackSize(size_t size, size_t slack) {
  if (size < kSmallSize) return size | (static_cast<uint64_t>(slack < 15 ? slack : 15) << 27);
  const uint64_t units = size >> 4;
  return kLargeBit | (units < kLargeBit - 1 ? units : kLargeBit - 1);
}
// The request and the usable size of a packed value.
size_t PackedRequest(uint64_t packed) {
  const uint64_t v = packed & 0xFFFFFFFFu;
  return (v & kLargeBit) != 0 ? static_cast<size_t>((v & (kLargeBit - 1)) << 4)
                              : static_cast<size_t>(v & (kSmallSize - 1));
}
size_t PackedUsable(uint64_t packed) {
  const uint64_t v = packed & 0xFFFFFFFFu;
  return PackedRequest(packed) + ((v & kLargeBit) != 0 ? 0 : static_cast<size_t>(v >> 27));
}

uint64_t Pack(uint32_t stack, size_t size, size_t slack, uint64_t interval) {
  const uint64_t s = PackSize(size, slack);
  uint64_t hunt = 0;
  if (g_hunt_on.load(std::memory_order_relaxed)) {
    hunt = 0x10 | (g_hunt_epoch.load(std::memory_order_relaxed) & 0xF);
  }
  return (static_cast<uint64_t>(stack & 0x7FFFFFu) << 41) | (hunt << 36) |
         (static_cast<uint64_t>(RateId(interval)) << 32) | s;
}

uint32_t PackedStack(uint64_t packed) { return static_cast<uint32_t>(packed >> 41); }
bool IsScreenKey(uint32_t stack) { return (stack & kScreenKeyBit) != 0; }

// A sample's share of its site's Horvitz-Thompson variance, w (w - u) for
// weight w = u / p (u its usable size), in KiB^2 (rounded; 0 for blocks
// recorded with p = 1).
int64_t VarianceKib2(uint64_t packed, int64_t bytes) {
  const double size = static_cast<double>(PackedUsable(packed));
  const double w = static_cast<double>(bytes);
  return static_cast<int64_t>(w * (w - size) / (1024.0 * 1024.0) + 0.5);
}

// A sample's estimates: its usable size u over p, p from its request as
// drawn (docs/analysis.md "Bytes: usable, not requested"), and 1 / p blocks.
void Weights(uint64_t packed, int64_t* bytes, int64_t* count) {
  const double size = static_cast<double>(PackedRequest(packed));
  const double usable = static_cast<double>(PackedUsable(packed));
  uint32_t rate = static_cast<uint32_t>(packed >> 32) & 0xF;
  uint64_t T = rate == 0 ? 0 : g_rates[rate].load(std::memory_order_relaxed);
  if (T <= 1) {
    *bytes = static_cast<int64_t>(usable);
    *count = 1000;
    return;
  }
  double p = 1.0 - exp(-(size + 1.0) / static_cast<double>(T));
  *bytes = static_cast<int64_t>(usable / p);
  *count = static_cast<int64_t>(1000.0 / p);  // milli-blocks
}

Site* FindSite(uint32_t stack, bool create) {
  uint32_t key = stack + 1;
  uint32_t h = (key * 0x9E3779B1u) >> 16;
  for (uint32_t i = 0; i < kProbe; ++i) {
    Site& s = g_sites[(h + i) & (kSiteCap - 1)];
    uint32_t k = s.key.load(std::memory_order_acquire);
    if (k == key) return &s;
    if (k != 0) continue;
    if (!create) return nullptr;
    uint32_t expected = 0;
    if (s.key.compare_exchange_strong(expected, key, std::memory_order_acq_rel)) {
      uint32_t idx = g_nused.fetch_add(1, std::memory_order_acq_rel);
      __atomic_store_n(&g_used[idx], static_cast<uint32_t>(&s - g_sites) + 1, __ATOMIC_RELEASE);
      return &s;
    }
    if (expected == key) return &s;
  }
  return nullptr;
}

void Apply(uint64_t packed, int sign) {
  int64_t b, c;
  Weights(packed, &b, &c);
  Site* s = FindSite(PackedStack(packed), sign > 0);
  if (s == nullptr) return;
  s->bytes.fetch_add(sign * b, std::memory_order_relaxed);
  s->count.fetch_add(sign * c, std::memory_order_relaxed);
  const uint32_t hunt = static_cast<uint32_t>(packed >> 36) & 0x1F;
  if (hunt == 0) return;
  // Born in this step: this step's tally; else the long-lived one. A block
  // born 16k steps ago is booked here as this step's for one step: the move
  // at the step end puts it right.
  bool now = sign > 0 || (hunt & 0xF) == (g_hunt_epoch.load(std::memory_order_relaxed) & 0xF);
  (now ? s->hunt_new : s->hunt_old).fetch_add(sign * b, std::memory_order_relaxed);
  const int32_t worth = (packed >> 32 & 0xF) == 0 ? kExactSampleWorth : 1;  // rate id 0: p = 1
  (now ? s->hunt_new_n : s->hunt_old_n).fetch_add(sign * worth, std::memory_order_relaxed);
  if (now && IsScreenKey(PackedStack(packed))) {  // kTargetMinRises
    s->hunt_new_size.fetch_add(sign * static_cast<int64_t>(PackedUsable(packed)),
                               std::memory_order_relaxed);
  }
  const int64_t var = VarianceKib2(packed, b);
  if (now) {
    s->hunt_var_new.fetch_add(sign * var, std::memory_order_relaxed);
  } else {
    s->hunt_var_out.fetch_add(var, std::memory_order_relaxed);  // a long-lived sample freed
  }
  if (now && !g_hunt_new_any.load(std::memory_order_relaxed)) {
    g_hunt_new_any.store(true, std::memory_order_relaxed);
  }
}

// The growth of a site's long-lived hunt-born bytes since the checkpoint,
// when it stands `z` standard deviations above its own sampling noise (else
// 0). The change's variance is at most what entered the tally plus what left
// it since the checkpoint; a leak's samples only enter, so one of n samples
// of a sparsely sampled leak stands at z = sqrt(n).
int64_t GrowthSinceCheckpoint(const Site& s, double z) {
  const int64_t v = s.hunt_old.load(std::memory_order_relaxed) - s.hunt_chk;
  if (v <= 0) return 0;
  const int64_t var = s.hunt_var_in.load(std::memory_order_relaxed) +
                      s.hunt_var_out.load(std::memory_order_relaxed) - s.hunt_chk_var;
  const double v_kib = static_cast<double>(v) / 1024.0;
  return v_kib * v_kib < z * z * static_cast<double>(var) ? 0 : v;
}

// The hunt's targets: screened contexts whose allocations are sampled with
// stacks at the screening T (recorder.cc ChooseSample). Written by the step
// end (g_prog_lock held), read lock-free by every sample; cleared when the
// hunt ends.
std::atomic<uint32_t> g_targets[kMaxHuntTargets];
std::atomic<uint32_t> g_ntargets{0};

// g_blocks' pages: 0 as mapped (committed on touch), 1 to be committed by
// the writer (the first hunt began: hunts sample, and screen, many blocks
// at new addresses, each a page fault of 1-3 us in the sampling thread
// until the table's 16 MiB are touched), 2 committed.
std::atomic<int> g_populate{0};

template <typename F>
void ForEachSite(F f) {
  uint32_t n = g_nused.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t slot = __atomic_load_n(&g_used[i], __ATOMIC_ACQUIRE);
    if (slot != 0) f(g_sites[slot - 1]);
  }
}

// Top sites by estimated live bytes into `out` (g_snap_lock held).
void TakeTop(Snap* out) {
  out->n = 0;
  uint32_t n = g_nused.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t slot = __atomic_load_n(&g_used[i], __ATOMIC_ACQUIRE);
    if (slot == 0) continue;
    Site& s = g_sites[slot - 1];
    if (IsScreenKey(s.key.load(std::memory_order_relaxed) - 1)) continue;
    int64_t b = s.bytes.load(std::memory_order_relaxed);
    if (b <= 0) continue;
    uint32_t k = out->n;
    if (k == static_cast<uint32_t>(kSnapshotTop)) {
      if (b <= out->bytes[k - 1]) continue;
      --k;  // replaces the smallest
    } else {
      ++out->n;
    }
    while (k > 0 && out->bytes[k - 1] < b) {
      out->bytes[k] = out->bytes[k - 1];
      out->count[k] = out->count[k - 1];
      out->stack[k] = out->stack[k - 1];
      --k;
    }
    out->bytes[k] = b;
    int64_t c = s.count.load(std::memory_order_relaxed);
    out->count[k] = c > 0 ? (c + 500) / 1000 : 0;
    out->stack[k] = s.key.load(std::memory_order_acquire) - 1;  // its STACK is logged by then
  }
  out->step = g_cur_step.load(std::memory_order_relaxed);
  out->stage = g_cur_stage.load(std::memory_order_relaxed);
  out->valid = true;
}

size_t Encode(const Snap& s, uint8_t cause, uint32_t stage, uint64_t ts, uint64_t seq, uint8_t* buf,
              size_t cap) {
  uint64_t sites[3 * kSnapshotTop];  // (stack, live_bytes_est, live_count_est) per site
  for (uint32_t i = 0; i < s.n; ++i) {
    sites[3 * i] = s.stack[i];
    sites[3 * i + 1] = static_cast<uint64_t>(s.bytes[i]);
    sites[3 * i + 2] = static_cast<uint64_t>(s.count[i]);
  }
  fmt::SiteSnapshotRecord rec;
  rec.ts = ts;
  rec.seq = seq;
  rec.step = s.step;
  rec.cause = cause;
  rec.stage_str = stage;
  rec.sites.values = sites;
  rec.sites.count = s.n;
  fmt::RecordEncoder e(buf, cap);
  return fmt::Encode(e, rec) ? e.size() : 0;
}

}  // namespace

void InitSites() {
  if (!g_features.sites) return;
  g_sites = static_cast<Site*>(RawMmap(sizeof(Site) * kSiteCap));
  g_used = static_cast<uint32_t*>(RawMmap(sizeof(uint32_t) * kSiteCap));
  if (g_sites == nullptr || g_used == nullptr || !g_blocks.Init(14)) return;
  g_run_thresh.store(Threshold(0, g_features.run_ratio_pct), std::memory_order_relaxed);
  for (auto& t : g_stage_thresh) t.store(UINT64_MAX, std::memory_order_relaxed);
  g_sites_on = true;
}

bool SitesOnAlloc(uintptr_t addr, size_t size, size_t slack, uint64_t interval, uint32_t stack) {
  if (!g_sites_on) return false;
  uint64_t packed = Pack(stack, size, slack, interval);
  if (!g_blocks.Insert(addr, packed)) return false;
  Apply(packed, +1);
  return true;
}

bool SitesOnFree(uintptr_t addr) {
  if (!g_sites_on) return true;
  uint64_t packed;
  if (!g_blocks.Remove(addr, &packed)) return true;
  Apply(packed, -1);
  return !IsScreenKey(PackedStack(packed));
}

uint64_t SitesRemove(uintptr_t addr) {
  if (!g_sites_on) return 0;
  uint64_t packed;
  if (!g_blocks.Remove(addr, &packed)) return 0;
  Apply(packed, -1);
  return packed;
}

void SitesRestore(uintptr_t addr, uint64_t packed) {
  if (!g_sites_on || packed == 0) return;
  if (g_blocks.Insert(addr, packed)) Apply(packed, +1);
}

namespace {
void Unpack(uint64_t packed, TrackedBlock* out) {
  out->stack = PackedStack(packed);
  out->size = PackedRequest(packed);
  out->slack = PackedUsable(packed) - out->size;
  const uint32_t rate = static_cast<uint32_t>(packed >> 32) & 0xF;
  out->interval = rate == 0 ? 0 : g_rates[rate].load(std::memory_order_relaxed);
}
}  // namespace

bool SitesPeekBlock(uintptr_t addr, TrackedBlock* out) {
  uint64_t packed;
  if (!g_sites_on || !g_blocks.Get(addr, &packed)) return false;
  Unpack(packed, out);
  return true;
}

bool SitesTakeBlock(uintptr_t addr, TrackedBlock* out) {
  uint64_t packed;
  if (!g_sites_on || !g_blocks.Remove(addr, &packed)) return false;
  Apply(packed, -1);
  Unpack(packed, out);
  return true;
}

void SitesOnLive(uint64_t live) {
  if (!g_sites_on) return;
  int depth = g_stage_depth.load(std::memory_order_relaxed);
  if (depth > kMaxStageDepth) depth = kMaxStageDepth;
  bool any = live > g_run_thresh.load(std::memory_order_relaxed);
  for (int i = 0; i < depth && !any; ++i) {
    any = live > g_stage_thresh[i].load(std::memory_order_relaxed);
  }
  if (!any || !g_snap_lock.TryLock()) return;
  Snap* taken = nullptr;
  for (int i = 0; i < depth; ++i) {
    if (live <= g_stage_thresh[i].load(std::memory_order_relaxed)) continue;
    if (taken == nullptr) {
      TakeTop(&g_stage_snap[i]);
      taken = &g_stage_snap[i];
    } else {
      g_stage_snap[i] = *taken;
    }
    g_stage_thresh[i].store(Threshold(live, g_features.snap_ratio_pct), std::memory_order_relaxed);
  }
  if (live > g_run_thresh.load(std::memory_order_relaxed)) {
    if (taken != nullptr) {
      g_run_snap = *taken;
    } else {
      TakeTop(&g_run_snap);
    }
    g_run_pending = true;
    g_run_thresh.store(Threshold(live, g_features.run_ratio_pct), std::memory_order_relaxed);
  }
  g_snap_lock.Unlock();
}

void SitesStageBegin(int depth, uint64_t live) {
  if (!g_sites_on || depth < 0 || depth >= kMaxStageDepth) return;
  SpinLockHolder h(&g_snap_lock);
  g_stage_snap[depth].valid = false;
  g_stage_thresh[depth].store(Threshold(live, g_features.snap_ratio_pct),
                              std::memory_order_relaxed);
}

size_t SitesStageEnd(int depth, uint32_t stage_id, uint64_t step, uint8_t* buf, size_t cap) {
  if (!g_sites_on || depth < 0 || depth >= kMaxStageDepth) return 0;
  SpinLockHolder h(&g_snap_lock);
  g_stage_thresh[depth].store(UINT64_MAX, std::memory_order_relaxed);
  Snap& s = g_stage_snap[depth];
  if (!s.valid) return 0;
  s.valid = false;
  s.step = step;
  return Encode(s, fmt::kSnapshotStagePeak, stage_id, NowRel(), NextSeq(), buf, cap);
}

size_t SitesTakeRunPeak(uint8_t* buf, size_t cap) {
  if (!g_sites_on) return 0;
  SpinLockHolder h(&g_snap_lock);
  if (!g_run_pending) return 0;
  g_run_pending = false;
  return Encode(g_run_snap, fmt::kSnapshotRunPeak, g_run_snap.stage, NowRel(), NextSeq(), buf, cap);
}

void SitesSetBaseline() {
  if (!g_sites_on) return;
  uint32_t n = g_nused.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t slot = __atomic_load_n(&g_used[i], __ATOMIC_ACQUIRE);
    if (slot == 0) continue;
    Site& s = g_sites[slot - 1];
    s.base.store(s.bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
}

uint32_t SitesTop(bool growth) {
  if (!g_sites_on) return 0;
  uint32_t n = g_nused.load(std::memory_order_acquire);
  int64_t best = 0;
  uint32_t best_stack = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t slot = __atomic_load_n(&g_used[i], __ATOMIC_ACQUIRE);
    if (slot == 0) continue;
    Site& s = g_sites[slot - 1];
    if (IsScreenKey(s.key.load(std::memory_order_relaxed) - 1)) continue;
    int64_t v = s.bytes.load(std::memory_order_relaxed);
    if (growth) v -= s.base.load(std::memory_order_relaxed);
    if (v > best) {
      best = v;
      best_stack = s.key.load(std::memory_order_relaxed) - 1;
    }
  }
  return best_stack;
}

void SitesHuntOn(bool on) {
  if (!g_sites_on) return;
  g_hunt_on.store(on, std::memory_order_relaxed);
  if (on && g_populate.load(std::memory_order_relaxed) == 0) {
    g_populate.store(1, std::memory_order_relaxed);  // the writer commits g_blocks' pages
    WakeWriter();
  }
  if (!on) {
    g_ntargets.store(0, std::memory_order_release);
    for (auto& k : g_targets) k.store(0, std::memory_order_relaxed);
  }
}

bool SitesHunting() { return g_sites_on && g_hunt_on.load(std::memory_order_relaxed); }

// A screened context's step end for kTargetMinRises: `n` samples of `size`
// usable bytes born in the step outlived it.
void CountRise(Site& s, int32_t n, int64_t size, uint32_t epoch) {
  if (n <= 0 || size <= 0) return;  // no screen of it outlived the step: skipped
  const int64_t last = s.hunt_last_size.load(std::memory_order_relaxed);
  if (n == 1 && last > 0 && size > last) {
    s.hunt_rises.fetch_add(1, std::memory_order_relaxed);
    s.hunt_rise_epoch.store(epoch, std::memory_order_relaxed);
  } else {
    s.hunt_rises.store(0, std::memory_order_relaxed);
  }
  s.hunt_last_size.store(n == 1 ? size : 0, std::memory_order_relaxed);
}

void SitesHuntStepEnd() {
  if (!g_sites_on) return;
  const uint32_t epoch = g_hunt_epoch.fetch_add(1, std::memory_order_relaxed) + 1;
  if (!g_hunt_new_any.exchange(false, std::memory_order_relaxed)) return;  // nothing to move
  ForEachSite([epoch](Site& s) {
    int64_t b = s.hunt_new.exchange(0, std::memory_order_relaxed);
    int32_t n = s.hunt_new_n.exchange(0, std::memory_order_relaxed);
    int64_t var = s.hunt_var_new.exchange(0, std::memory_order_relaxed);
    const int64_t size = s.hunt_new_size.exchange(0, std::memory_order_relaxed);
    if (b != 0) s.hunt_old.fetch_add(b, std::memory_order_relaxed);
    if (n != 0) s.hunt_old_n.fetch_add(n, std::memory_order_relaxed);
    if (n > 0) s.hunt_steps.fetch_add(1, std::memory_order_relaxed);
    if (var != 0) s.hunt_var_in.fetch_add(var, std::memory_order_relaxed);
    if (IsScreenKey(s.key.load(std::memory_order_relaxed) - 1)) CountRise(s, n, size, epoch);
  });
}

void SitesHuntCheckpoint() {
  if (!g_sites_on) return;
  ForEachSite([](Site& s) {
    s.hunt_chk = s.hunt_old.load(std::memory_order_relaxed);
    s.hunt_chk_n = s.hunt_old_n.load(std::memory_order_relaxed);
    s.hunt_chk_steps = s.hunt_steps.load(std::memory_order_relaxed);
    s.hunt_chk_var = s.hunt_var_in.load(std::memory_order_relaxed) +
                     s.hunt_var_out.load(std::memory_order_relaxed);
  });
}

HuntTally SitesHuntExplain(int64_t growth) {
  HuntTally out;
  if (!g_sites_on) return out;
  // The sites whose long-lived hunt-born bytes grew most since the
  // checkpoint, largest first, until they cover `growth`. A site counts only
  // when its growth stands out of its own sampling noise
  // (GrowthSinceCheckpoint): a large site whose true level is steady
  // (objects that live a few steps, sampled at a T that changed since the
  // checkpoint) moves by tens of KiB from the draws alone, more than a small
  // leak grows; it once "explained" a 1 KiB/step leak and ended the hunt
  // before the leak had samples. Screened contexts are not sites: what they
  // find is named only once their targeted samples (with stacks) show it.
  constexpr int kTop = 8;
  int64_t d[kTop];
  int32_t n[kTop];
  int64_t var[kTop];
  int k = 0;
  ForEachSite([&](Site& s) {
    if (IsScreenKey(s.key.load(std::memory_order_relaxed) - 1)) return;
    if (s.hunt_steps.load(std::memory_order_relaxed) - s.hunt_chk_steps < kHuntMinSteps) return;
    const int64_t v = GrowthSinceCheckpoint(s, kHuntSiteZ);
    if (v <= 0) return;
    int32_t m = s.hunt_old_n.load(std::memory_order_relaxed) - s.hunt_chk_n;
    const int64_t w = s.hunt_var_in.load(std::memory_order_relaxed) +
                      s.hunt_var_out.load(std::memory_order_relaxed) - s.hunt_chk_var;
    int i;
    if (k < kTop) {
      i = k++;
    } else {
      if (v <= d[kTop - 1]) return;
      i = kTop - 1;
    }
    while (i > 0 && d[i - 1] < v) {
      d[i] = d[i - 1];
      n[i] = n[i - 1];
      var[i] = var[i - 1];
      --i;
    }
    d[i] = v;
    n[i] = m;
    var[i] = w;
  });
  for (int i = 0; i < k && out.explained < growth; ++i) {
    out.explained += d[i];
    out.samples += n[i] > 0 ? n[i] : 0;
    out.var_kib2 += var[i] > 0 ? static_cast<double>(var[i]) : 0;
    ++out.sites;
  }
  return out;
}

uint32_t SitesHuntTargets() {
  if (!g_sites_on) return 0;
  uint32_t n = g_ntargets.load(std::memory_order_relaxed);
  ForEachSite([&](Site& s) {
    const uint32_t key = s.key.load(std::memory_order_relaxed) - 1;
    if (!IsScreenKey(key) || n >= kMaxHuntTargets) return;
    // A block that grows as it is renewed (kTargetMinRises), or else all
    // its long-lived screens, not only those since the checkpoint: a
    // context has screens only while hunts run, and the sooner a leak's
    // context is targeted the more of its samples have stacks.
    const bool rising = s.hunt_rises.load(std::memory_order_relaxed) >= kTargetMinRises &&
                        g_hunt_epoch.load(std::memory_order_relaxed) -
                                s.hunt_rise_epoch.load(std::memory_order_relaxed) <=
                            kTargetRiseAge;
    if (!rising) {
      if (s.hunt_old_n.load(std::memory_order_relaxed) < kTargetMinScreens) return;
      const double v_kib = static_cast<double>(s.hunt_old.load(std::memory_order_relaxed)) / 1024.0;
      const int64_t var = s.hunt_var_in.load(std::memory_order_relaxed) +
                          s.hunt_var_out.load(std::memory_order_relaxed);
      if (!(v_kib > 0) || v_kib * v_kib < kTargetZ * kTargetZ * static_cast<double>(var)) return;
    }
    for (uint32_t i = 0; i < n; ++i) {
      if (g_targets[i].load(std::memory_order_relaxed) == key) return;
    }
    g_targets[n].store(key, std::memory_order_relaxed);
    g_ntargets.store(++n, std::memory_order_release);
  });
  return n;
}

void SitesWriterPoll() {
  if (!g_sites_on || g_populate.load(std::memory_order_relaxed) != 1) return;
  g_populate.store(2, std::memory_order_relaxed);
  g_blocks.Populate();
}

bool SitesIsTarget(uint32_t key) {
  const uint32_t n = g_ntargets.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    if (g_targets[i].load(std::memory_order_relaxed) == key) return true;
  }
  return false;
}

void SitesForkPrepare() {
  g_snap_lock.Lock();
  g_blocks.LockAll();
}
void SitesForkParent() {
  g_blocks.UnlockAll();
  g_snap_lock.Unlock();
}
void SitesForkChild() {
  g_blocks.ResetLocks();
  g_snap_lock.Reset();
}

}  // namespace memstep::preload
