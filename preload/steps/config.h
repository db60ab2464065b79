// Configuration of libmemstep.so's step features (FeatureConfig, read from the
// MEMSTEP_* variables by ReadFeatureConfig, with its parsers), and the entry
// points of those features: epochs, online alerts, in-process
// peak composition (per-site live estimates and snapshots), NVTX injection and
// time windows. Everything here runs at step/stage boundaries, on the sampled
// slow path, at counter flushes (every 1 MiB per thread) or in the writer
// thread; never on the allocation fast path.
//
// Contract:
//  - No allocation from the hooked heap after init (memory from RawMmap;
//    regcomp/regexec/posix_spawn run with the reentrancy guard set, so their
//    own mallocs only forward).
//  - Alerts never stop or crash the program unless MEMSTEP_ALERT_ABORT=1.
//  - Alert commands are spawned by the writer thread, never by the thread that
//    crossed the threshold, and are reaped by pid (never wait(-1)).

#ifndef MEMSTEP_PRELOAD_STEPS_CONFIG_H_
#define MEMSTEP_PRELOAD_STEPS_CONFIG_H_

#include <stddef.h>
#include <stdint.h>

#include "preload/host/runtime.h"

namespace memstep::preload {

inline constexpr int kMaxStagePeakRules = 16;
inline constexpr int kSnapshotTop = 64;

struct FeatureConfig {
  uint64_t warmup_steps;  // MEMSTEP_WARMUP (default 20)
  uint64_t alert_growth;  // MEMSTEP_ALERT_GROWTH, bytes/step (0 = off)
  uint64_t alert_peak;    // MEMSTEP_ALERT_PEAK, bytes (0 = off)
  struct StagePeakRule {
    char name[64];
    uint64_t bytes;
  } stage_rules[kMaxStagePeakRules];  // MEMSTEP_ALERT_STAGE_PEAK="forward=2GiB,..."
  int num_stage_rules;
  char alert_command[2048];    // MEMSTEP_ALERT_COMMAND ("" = none)
  bool alert_abort;            // MEMSTEP_ALERT_ABORT=1
  uint64_t window_ns;          // MEMSTEP_WINDOW seconds (default 10, 0 = off)
  uint64_t snap_min_bytes;     // MEMSTEP_SNAPSHOT_MIN_BYTES (default 8 MiB)
  uint64_t snap_ratio_pct;     // MEMSTEP_SNAPSHOT_RATIO_PCT (default 5)
  uint64_t run_ratio_pct;      // MEMSTEP_SNAPSHOT_RUN_RATIO_PCT (default 10)
  bool sites;                  // MEMSTEP_SITES=0 turns the site table off
  bool alloc_stats;            // MEMSTEP_ALLOC_STATS=0: no allocator statistics at step ends
  bool nvtx;                   // MEMSTEP_NVTX=0 refuses the NVTX injection
  char step_range[512];        // MEMSTEP_STEP_RANGE (POSIX ERE, case-insensitive)
  uint64_t alert_device_peak;  // MEMSTEP_ALERT_DEVICE_PEAK, bytes (0 = off)
  // Device sampling (docs/gpu.md "Sampling"): MEMSTEP_DEVICE_SAMPLE_INTERVAL
  // (T_dev, default kDefaultDeviceInterval; <= 1: every allocation) and
  // MEMSTEP_DEVICE_SAMPLE_WARM (warm-up and boosts, default T_dev / 4).
  uint64_t device_interval;
  uint64_t device_warm_interval;
  int snapshot_signal;  // MEMSTEP_SNAPSHOT_SIGNAL (default SIGUSR2, 0 = none)
};
extern FeatureConfig g_features;

// Parses a size in the one grammar of src/format/quantity.h: "4096", "512K",
// "512KiB", "1.5MiB", "2GB" (K..T and KiB..TiB 1024-based, kB..TB
// 1000-based). Returns false on anything else.
bool ParseSize(const char* s, uint64_t* out);
// Parses seconds ("10", "0.25") into nanoseconds.
bool ParseSeconds(const char* s, uint64_t* ns);

// Reads MEMSTEP_* feature variables (constructor; may allocate via regcomp).
void ReadFeatureConfig();
void InitFeatures();  // after the trace is open (site table, regex)

// ---- memory snapshots (snapshot.cc; docs/gpu.md "Out of memory") ----
// Writes a MEM_SNAPSHOT record (the moment: step, stage, device, requested,
// free/total device bytes) and wakes the writer so that it reaches the file
// within one cycle. Any thread, reentrancy guard set or not.
void WriteMemSnapshot(ThreadState& t, uint8_t cause, int device, uint64_t requested, uint64_t free,
                      uint64_t total, uint8_t api, uint64_t error);
// After the trace is open: installs the snapshot signal's handler if the
// signal still has its default disposition (a program's own handler wins).
void InitSnapshotSignal();
// Writer thread: writes the snapshot a signal asked for.
void SnapshotWriterPoll();

// ---- per-site live estimates (sites.cc) ----
void InitSites();
// Sampled allocation of `size` requested bytes whose block holds `slack`
// more (its usable size - size: SampleSlack), with sampling interval
// `interval` (0 = recorded with probability 1) at `stack`; false when it is
// not tracked (no site table, or the block table full).
bool SitesOnAlloc(uintptr_t addr, size_t size, size_t slack, uint64_t interval, uint32_t stack);
// The block at addr (if tracked) is freed. Call before the block can be
// reused. False when it was a screen (its allocation wrote no record, so its
// free writes none either).
bool SitesOnFree(uintptr_t addr);
// SitesOnFree that returns what it removed (0 = nothing), and its undo.
uint64_t SitesRemove(uintptr_t addr);
void SitesRestore(uintptr_t addr, uint64_t packed);
// A tracked block as its allocation entered it: its stack (or screen key,
// kScreenKeyBit), requested size (from 128 MiB in 16-byte units, saturated at
// 32 GiB), its slack (usable - requested, at most 15) and the T it was drawn
// with (0: recorded with p = 1).
struct TrackedBlock {
  uint32_t stack;
  size_t size;
  size_t slack;
  uint64_t interval;
};
// SitesPeekBlock reads it; SitesTakeBlock removes it (SitesOnFree without the
// FREE decision). False when addr is not tracked.
bool SitesPeekBlock(uintptr_t addr, TrackedBlock* out);
bool SitesTakeBlock(uintptr_t addr, TrackedBlock* out);
// From FlushCounters: checks the snapshot thresholds against exact live bytes.
void SitesOnLive(uint64_t live);
// Stage boundaries (g_api_lock held): depth is the level opened / closed.
void SitesStageBegin(int depth, uint64_t live);
// Encodes the stage's snapshot (if one was taken) into buf; returns its size.
size_t SitesStageEnd(int depth, uint32_t stage_id, uint64_t step, uint8_t* buf, size_t cap);
// Writer thread: a pending run-peak snapshot record, encoded into buf.
size_t SitesTakeRunPeak(uint8_t* buf, size_t cap);
// Marks the current per-site live estimates as the growth baseline.
void SitesSetBaseline();
// Stack with the largest growth since the baseline (0 = unknown); or, with
// `growth` false, the largest live estimate.
uint32_t SitesTop(bool growth);
// The leak hunt (progressive.cc). Samples taken while the hunt is on are
// hunt-born: each site tallies those live at a step end that were born in an
// earlier step (long-lived), in estimated bytes and in samples.
void SitesHuntOn(bool on);
// Whether a host leak hunt runs now (lock-free).
bool SitesHunting();
// At every step end: this step's hunt-born blocks become long-lived.
void SitesHuntStepEnd();
// Remembers every site's long-lived hunt-born tally.
void SitesHuntCheckpoint();
struct HuntTally {
  int64_t explained = 0;  // growth of the explaining sites since the checkpoint, bytes
  int64_t samples = 0;    // their new long-lived samples
  uint32_t sites = 0;
  double var_kib2 = 0;  // the sampling variance of `explained`, KiB^2
};
// The sites that grew most since the checkpoint, largest first, until their
// growth reaches `growth` (at most 8).
HuntTally SitesHuntExplain(int64_t growth);
// Screening (progressive.cc, recorder.cc ChooseSample): a screen is tallied
// under a key with kScreenKeyBit set (a hashed Python context, never a stack
// id: those stay below 2^21) in place of a stack. At a step end, the screened
// contexts whose long-lived screens grew since the checkpoint become targets
// (at most kMaxHuntTargets, kept until the hunt ends); returns how many there
// are. SitesIsTarget: lock-free, on the sampling slow path.
inline constexpr uint32_t kScreenKeyBit = uint32_t{1} << 22;
inline constexpr uint32_t kMaxHuntTargets = 16;
uint32_t SitesHuntTargets();
bool SitesIsTarget(uint32_t key);
// Writer thread: commits the block table's pages once the first hunt began.
void SitesWriterPoll();
void SitesForkPrepare();
void SitesForkParent();
void SitesForkChild();

// ---- alerts (alerts.cc) ----
void InitAlerts();
// Stage end (g_api_lock held): remembers the stage's peak within this step.
void AlertsStageEnd(uint32_t stage_id, uint64_t peak);
// Step end (g_api_lock NOT held, guard set): evaluates the rules, prints and
// records alerts, queues the alert command, aborts if asked.
void AlertsStepEnd(ThreadState& t, uint64_t step, uint64_t live_end, uint64_t step_peak);
// Writer thread, each cycle: spawns queued alert commands and reaps children.
void AlertsWriterPoll();
void AlertsForkChild();

// ---- step boundaries usable from memstep's own threads (api.cc) ----
// `t` may be a memstep thread (guard permanently set). Not reentrant.
void StepBoundaryInternal(ThreadState& t, uint64_t step, bool begin);  // a time window
void UserStepBoundary(ThreadState& t, uint64_t step, bool begin);      // a program marker
void StageBoundaryById(ThreadState& t, uint32_t id, bool begin);
uint32_t InternStage(const char* name);
// A program step marker was seen (stops time windows).
extern std::atomic<bool> g_user_steps;
// Writer thread: drives time windows (MEMSTEP_WINDOW).
void WindowsWriterPoll();
// NVTX injection (nvtx.cc): compiles the step-range regex.
void InitNvtx();
// Notice record (kTagNotice, code 0) with a message.
void EmitNoticeRecord(ThreadState& t, const char* message);
// "memstep: MESSAGE" on the program's stderr (unless MEMSTEP_QUIET) and, when
// `record` and recording, the same message as a notice record from thread t
// (the caller holds its guard).
void SayNotice(ThreadState& t, const char* message, bool record);

}  // namespace memstep::preload

#endif  // MEMSTEP_PRELOAD_STEPS_CONFIG_H_
