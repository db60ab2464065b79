// The trace writer: file creation and header, the ring registry, the
// background flush thread, module maps, and the fork protocol.
//
// One flush cycle (under flush_mu, by the writer thread every
// MEMSTEP_FLUSH_MS, or by the final flush at exit):
//   1. snapshot every ring's head and the kept lane's (acquire);
//   2. drain the dictionary log into dict chunks;
//   3. drain each ring, then the kept lane, up to its snapshot into data
//      chunks (raw <= 1 MiB), adding the writer's own COUNTER and LOST records;
//   4. compress each chunk (zstd level 1 when libzstd.so.1 loads, else raw),
//      CRC it and write(2) it to the O_APPEND file.
// Every id is appended to the dictionary log before a record using it is
// pushed to a ring, so step 1 before step 2 makes definitions precede use.
// A chunk is written with one write(2) of header + payload: after kill -9
// every chunk written before reads back.
//
// memstep keeps no descriptor open between writes: a program may list every
// descriptor it has (CPython's tests fstat() them all), close them all, or
// dup2 its own files over any number. Each chunk opens the trace by path,
// checks that it is still the file memstep created (device and inode), writes
// and closes it.
//
// The writer thread must not keep the process alive: glibc ends a process
// when its last thread exits, counting ours. When the thread-group leader has
// exited (pthread_exit from main, or a fork child's only thread returning)
// and no other application thread is left, the writer does what that last
// thread would have done: exit(0).

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "preload/core/fds.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "preload/steps/config.h"
#include "preload/trace/modules.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace {

constexpr int kMaxRings = 8192;
constexpr size_t kOutCap = fmt::kMaxChunkRawLen + (fmt::kMaxChunkRawLen >> 7) + 4096;

// Ring registry. Rings are never unmapped; exited ones are reused.
SpinLock g_registry_lock;  // protects creation and reuse
Ring* g_rings[kMaxRings];  // [0, g_nrings) published with release
std::atomic<int> g_nrings{0};

using ZstdCompressFn = size_t (*)(void*, size_t, const void*, size_t, int);
using ZstdIsErrorFn = unsigned (*)(size_t);

// Everything below is protected by flush_mu (or owned by the writer thread).
// Constant-initialized (no dynamic initializer may run after our constructor).
struct Writer {
  pthread_mutex_t flush_mu = PTHREAD_MUTEX_INITIALIZER;
  bool live = false;  // the trace exists and takes chunks
  dev_t dev = 0;      // identity of the trace file
  ino_t ino = 0;
  uint64_t size = 0;         // bytes written to the trace so far
  bool fallocate_ok = true;  // the filesystem reserves space (fallocate)
  char path[4096] = {};
  uint64_t start_mono = 0;
  uint32_t chunk_seq = 0;
  size_t dict_written = 0;
  uint8_t* raw = nullptr;  // chunk being built
  size_t raw_len = 0;
  uint8_t* out = nullptr;  // header + payload to write
  ZstdCompressFn zstd_compress = nullptr;
  ZstdIsErrorFn zstd_is_error = nullptr;
  uint64_t dict_dropped_reported = 0;
  uint32_t counter_names[8] = {};
  bool names_ready = false;
};
Writer g_w;
uint64_t g_kept_head = 0;  // flush_mu: the kept lane's head at the cycle's snapshot
// Futex word, a set of wake reasons: kWakeFlush (a producer asked for an early
// cycle), kWakeStats (a step end asked for the allocator's statistics).
constexpr int kWakeFlush = 1, kWakeStats = 2;
std::atomic<int> g_wake{0};
uint64_t g_heads[kMaxRings];  // flush_mu
// The keeper: a thread that shares the program's descriptor table while the
// writer works in a table of its own (core/fds.h). It sleeps on this word
// until the writer finds the program's threads gone, then ends the process
// as glibc's last thread would (exit(0)): the program's exit handlers and
// stdio flushes then run with the program's descriptors, which the keeper
// alone keeps open once the program's threads have exited.
// 0 while the writer runs, then why the keeper was woken.
constexpr int kKeeperExitProcess = 1, kKeeperLeave = 2;
std::atomic<int> g_keeper_exit{0};
bool g_have_keeper = false;  // set before the writer starts
// memstep's own threads running now (keeper, writer), counted by each from
// its first instruction to its last, so never more than the kernel shows:
// what a program that counts its process's threads should leave out
// (CPython 3.12's fork warning; memstep_own_threads).
std::atomic<int> g_own_threads{0};
std::atomic<bool> g_degraded{false};

uint64_t NowRel() { return MonoNs() - g_w.start_mono; }

bool WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// flush_mu held (or the library's own thread before recording starts).
// Opens the trace for one write, by path, if it is still the file memstep
// created; -1 with errno set otherwise (ESTALE: another file has its name).
int OpenTrace() {
  int fd = OpenOwn(g_w.path, O_WRONLY | O_APPEND | O_NOFOLLOW);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_dev != g_w.dev || st.st_ino != g_w.ino) {
    close(fd);
    errno = ESTALE;
    return -1;
  }
  return fd;
}

// Room kept after the last chunk for the NOTICE that says recording stopped.
constexpr uint64_t kTailReserve = 16 << 10;

// flush_mu held. Makes sure `n` more bytes and the tail reserve after them
// can be written: below the file-size limit (checked here: crossing it would
// send the program SIGXFSZ) and on disk (fallocate, KEEP_SIZE, where the
// filesystem has it: after an ENOSPC the reserve still holds the NOTICE).
// False, with errno set, when they cannot.
bool Reserve(int fd, uint64_t n) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      g_w.size + n + kTailReserve > rl.rlim_cur) {
    errno = EFBIG;
    return false;
  }
  if (!g_w.fallocate_ok) return true;
  if (fallocate(fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(g_w.size),
                static_cast<off_t>(n + kTailReserve)) == 0) {
    return true;
  }
  if (errno == ENOSPC || errno == EDQUOT) return false;
  g_w.fallocate_ok = false;  // not supported here: best effort from now on
  return true;
}

// Whether `n` bytes fit below the file-size limit (no SIGXFSZ).
bool BelowSizeLimit(uint64_t n) {
  struct rlimit rl;
  return getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
         g_w.size + n <= rl.rlim_cur;
}

// flush_mu held.
void EmitChunk(uint8_t kind) {
  if (!g_w.live) g_w.raw_len = 0;  // stopped: drop
  if (g_w.raw_len == 0) return;
  uint8_t* payload = g_w.out + sizeof(fmt::ChunkHeader);
  size_t plen = 0;
  uint8_t codec = fmt::kCodecRaw;
  if (g_w.zstd_compress != nullptr) {
    size_t c = g_w.zstd_compress(payload, kOutCap, g_w.raw, g_w.raw_len, 1);
    if (!g_w.zstd_is_error(c) && c < g_w.raw_len) {
      plen = c;
      codec = fmt::kCodecZstd;
    }
  }
  if (codec == fmt::kCodecRaw) {
    memcpy(payload, g_w.raw, g_w.raw_len);
    plen = g_w.raw_len;
  }
  fmt::ChunkHeader h;
  fmt::FillChunkHeader(&h, g_w.chunk_seq, codec, kind, NowRel(), payload,
                       static_cast<uint32_t>(plen), static_cast<uint32_t>(g_w.raw_len));
  memcpy(g_w.out, &h, sizeof(h));
  g_w.raw_len = 0;
  int fd = OpenTrace();
  if (fd < 0) {
    Degrade("cannot reopen", g_w.path, errno);
    return;
  }
  bool reserved = Reserve(fd, sizeof(h) + plen);
  bool written = reserved && WriteAll(fd, g_w.out, sizeof(h) + plen);
  int err = errno;
  close(fd);
  if (!written) {
    Degrade("cannot write", g_w.path, err);
    return;
  }
  g_w.size += sizeof(h) + plen;
  ++g_w.chunk_seq;  // numbered once written: the NOTICE after a failure follows without a gap
}

// Appends bytes to the chunk under construction, emitting it first if full.
void Append(uint8_t kind, const uint8_t* p, size_t n) {
  if (g_w.raw_len + n > fmt::kMaxChunkRawLen) EmitChunk(kind);
  if (n > fmt::kMaxChunkRawLen) return;
  memcpy(g_w.raw + g_w.raw_len, p, n);
  g_w.raw_len += n;
}

int MkdirP(const char* dir) {
  char buf[1024];
  size_t n = StrLen(dir);
  if (n >= sizeof(buf)) return ENAMETOOLONG;
  memcpy(buf, dir, n + 1);
  for (size_t i = 1; i <= n; ++i) {
    if (buf[i] == '/' || buf[i] == '\0') {
      char c = buf[i];
      buf[i] = '\0';
      if (mkdir(buf, 0700) != 0 && errno != EEXIST) return errno;
      buf[i] = c;
    }
  }
  return 0;
}

size_t ReadFile(const char* path, char* buf, size_t cap) {
  int fd = OpenOwn(path, O_RDONLY);
  if (fd < 0) return 0;
  size_t n = 0;
  while (n < cap) {
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  close(fd);
  return n;
}

void PutTlv(uint8_t* buf, size_t* len, size_t cap, uint16_t type, const void* p, size_t n) {
  if (*len + 6 + n > cap) return;
  uint32_t n32 = static_cast<uint32_t>(n);
  memcpy(buf + *len, &type, 2);
  memcpy(buf + *len + 2, &n32, 4);
  if (n != 0) memcpy(buf + *len + 6, p, n);
  *len += 6 + n;
}

bool WriteHeader(int fd, bool fork_child, const char* parent_path, const char* host) {
  uint8_t* buf = g_w.out;  // scratch: the header is far smaller than a chunk
  size_t cap = kOutCap;
  fmt::FileHeader h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, fmt::kFileMagic, sizeof(h.magic));
  h.version_major = fmt::kVersionMajor;
  h.version_minor = fmt::kVersionMinor;
  h.start_mono_ns = g_w.start_mono;
  h.start_real_ns = RealNs();
  h.pid = static_cast<uint32_t>(getpid());
  h.ppid = static_cast<uint32_t>(getppid());
  h.page_size = static_cast<uint32_t>(sysconf(_SC_PAGESIZE));
  h.flags = (fork_child ? uint32_t{fmt::kFlagForkChild} : 0u) |
            (g_hot.glibc ? uint32_t{fmt::kFlagGlibcMalloc} : 0u);
  uint64_t T0 = g_interval.load(std::memory_order_relaxed);
  h.sample_interval = T0 <= 1 ? 1 : T0;
  h.always_bytes = g_config.always_bytes;
  size_t len = sizeof(h);
  static char tmp[16384];
  size_t n = ReadFile("/proc/self/cmdline", tmp, sizeof(tmp));
  if (n > 0 && tmp[n - 1] == '\0') --n;
  PutTlv(buf, &len, cap, fmt::kTlvCmdline, tmp, n);
  PutTlv(buf, &len, cap, fmt::kTlvHostname, host, StrLen(host));
  n = 0;
  const char* kRankVars[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE"};
  for (const char* var : kRankVars) {
    const char* v = getenv(var);
    if (v == nullptr) continue;
    size_t a = StrLen(var), b = StrLen(v);
    if (n + a + b + 2 > sizeof(tmp)) break;
    memcpy(tmp + n, var, a);
    tmp[n + a] = '=';
    memcpy(tmp + n + a + 1, v, b);
    tmp[n + a + 1 + b] = '\0';
    n += a + b + 2;
  }
  if (n > 0) PutTlv(buf, &len, cap, fmt::kTlvRankEnv, tmp, n);
  ssize_t e = readlink("/proc/self/exe", tmp, sizeof(tmp));
  if (e > 0) PutTlv(buf, &len, cap, fmt::kTlvExe, tmp, static_cast<size_t>(e));
  if (parent_path != nullptr) {
    PutTlv(buf, &len, cap, fmt::kTlvParentTrace, parent_path, StrLen(parent_path));
  }
  const char* alloc = g_hot.glibc ? static_cast<const char*>("glibc")
                      : dlsym(RTLD_DEFAULT, "mallctl") != nullptr ? "jemalloc"
                                                                  : "other";
  PutTlv(buf, &len, cap, fmt::kTlvAllocator, alloc, StrLen(alloc));
  if (g_self_hi > g_self_lo) {
    uint8_t self[16 + sizeof(g_self_build_id)];
    uint64_t range[2] = {g_self_lo, g_self_hi};  // little-endian (base.h)
    memcpy(self, range, 16);
    uint32_t id_len = g_self_build_id_len <= sizeof(g_self_build_id) ? g_self_build_id_len : 0;
    memcpy(self + 16, g_self_build_id, id_len);
    PutTlv(buf, &len, cap, fmt::kTlvProfiler, self, 16 + id_len);
  }
  if (const char* py = getenv("MEMSTEP_PYTHON_DIR"); py != nullptr && py[0] == '/') {
    PutTlv(buf, &len, cap, fmt::kTlvPythonDir, py, StrLen(py));
  }
  PutTlv(buf, &len, cap, fmt::kTlvEnd, nullptr, 0);
  h.header_len = static_cast<uint32_t>(len + 4);
  memcpy(buf, &h, sizeof(h));
  uint32_t crc = fmt::Crc32c(buf, len);
  memcpy(buf + len, &crc, 4);
  if (!Reserve(fd, len + 4) || !WriteAll(fd, buf, len + 4)) return false;
  g_w.size = len + 4;
  return true;
}

// ---- periodic counters ----

const char* const kCounterNames[] = {
    "rss_bytes",          "mmap_live_bytes",    "mallinfo2.arena",    "mallinfo2.hblkhd",
    "mallinfo2.uordblks", "mallinfo2.fordblks", "mallinfo2.keepcost", "memstep.sampled_live_blocks",
};
constexpr int kNumCounterNames = 8;

void PrepareCounterNames() {
  if (g_w.names_ready) return;
  for (int i = 0; i < kNumCounterNames; ++i) {
    g_w.counter_names[i] = g_dict.InternString(kCounterNames[i], StrLen(kCounterNames[i]));
  }
  g_w.names_ready = true;
}

void CollectCounters(int64_t values[kNumCounterNames]) {
  for (int i = 0; i < kNumCounterNames; ++i) values[i] = -1;
  values[0] = static_cast<int64_t>(ReadRssBytes());
  values[1] = static_cast<int64_t>(g_counters.mmap_live.load(std::memory_order_relaxed));
  if (g_hot.glibc) {
    struct mallinfo2 mi = mallinfo2();
    values[2] = static_cast<int64_t>(mi.arena);
    values[3] = static_cast<int64_t>(mi.hblkhd);
    values[4] = static_cast<int64_t>(mi.uordblks);
    values[5] = static_cast<int64_t>(mi.fordblks);
    values[6] = static_cast<int64_t>(mi.keepcost);
  }
  values[7] = static_cast<int64_t>(g_big.Size());
}

// ---- one flush cycle: each step below runs with flush_mu held ----

// Appends one encoded record to the current chunk of `kind`.
template <typename Record>
void AppendRecord(uint8_t kind, const Record& record) {
  uint8_t rec[128];
  fmt::RecordEncoder e(rec, sizeof(rec));
  if (fmt::Encode(e, record)) Append(kind, rec, e.size());
}

// A LOST record: `records` records (`bytes` bytes) that never reached the
// trace, for `cause` (1 a full ring, 2 a full dictionary).
void AppendLost(uint64_t records, uint64_t bytes, uint64_t cause) {
  fmt::LostRecord lost;
  lost.ts = NowRel();
  lost.records = records;
  lost.bytes = bytes;
  lost.cause = cause;
  AppendRecord(fmt::kChunkData, lost);
}

// The dictionary's entries not written yet, in log order.
void AppendDictionary() {
  size_t end = g_dict.End();
  const uint8_t* log = g_dict.log();
  while (g_w.dict_written < end) {
    uint32_t len;
    memcpy(&len, log + g_w.dict_written, 4);
    Append(fmt::kChunkDict, log + g_w.dict_written + 4, len);
    g_w.dict_written += 4 + len;
  }
}

// Ring i up to its snapshot head `head`: its records, a LOST record for what
// it dropped since the last cycle, and the ring freed once its thread exited
// and everything it wrote is out.
void DrainRing(int i, uint64_t head) {
  static uint8_t tmp[Ring::kCap];
  Ring* r = g_rings[i];
  uint64_t tail = r->tail.load(std::memory_order_relaxed);
  if (head > tail) {
    size_t n = static_cast<size_t>(head - tail);
    r->CopyOut(tail, head, tmp);
    Append(fmt::kChunkData, tmp, n);
    r->tail.store(head, std::memory_order_release);
  }
  uint64_t lr = r->lost_records.load(std::memory_order_relaxed);
  uint64_t lb = r->lost_bytes.load(std::memory_order_relaxed);
  if (lr != r->reported_records) {
    AppendLost(lr - r->reported_records, lb - r->reported_bytes, 1);
    r->reported_records = lr;
    r->reported_bytes = lb;
  }
  if (r->state.load(std::memory_order_acquire) == Ring::kExited &&
      r->head.load(std::memory_order_acquire) == head) {
    r->state.store(Ring::kFree, std::memory_order_release);
  }
}

// The kept lane up to its snapshot head, one record at a time (a record is
// never split across chunks), and a LOST record (cause 3) for what did not
// fit in it since the last cycle.
void DrainKept(uint64_t head) {
  static uint8_t tmp[KeptLane::kMaxRecord];
  uint64_t tail = g_kept.tail.load(std::memory_order_relaxed);
  while (tail < head) {
    uint32_t len;
    g_kept.Get(tail, reinterpret_cast<uint8_t*>(&len), 4);
    if (len <= sizeof(tmp)) {
      g_kept.Get(tail + 4, tmp, len);
      Append(fmt::kChunkData, tmp, len);
    }
    tail += 4 + uint64_t{len};
  }
  g_kept.tail.store(head, std::memory_order_release);
  uint64_t lr = g_kept.lost_records.load(std::memory_order_relaxed);
  uint64_t lb = g_kept.lost_bytes.load(std::memory_order_relaxed);
  if (lr != g_kept.reported_records) {
    AppendLost(lr - g_kept.reported_records, lb - g_kept.reported_bytes, 3);
    g_kept.reported_records = lr;
    g_kept.reported_bytes = lb;
  }
}

// The periodic counters read before the cycle took flush_mu (-1: not read).
void AppendCounters(const int64_t values[kNumCounterNames], uint32_t tid) {
  for (int i = 0; i < kNumCounterNames; ++i) {
    if (values[i] < 0 || g_w.counter_names[i] == 0) continue;
    fmt::CounterRecord counter;
    counter.ts = NowRel();
    counter.seq = g_seq.fetch_add(1, std::memory_order_relaxed);
    counter.tid = tid;
    counter.name_str = g_w.counter_names[i];
    counter.value = values[i];
    AppendRecord(fmt::kChunkData, counter);
  }
}

// The TRAILER chunk (the exact totals at a clean exit); recording stops.
void WriteTrailer(int64_t rss_bytes) {
  fmt::Counters c;
  c.alloc_bytes = g_counters.alloc_bytes.load();
  c.alloc_count = g_counters.alloc_count.load();
  c.free_bytes = g_counters.free_bytes.load();
  c.free_count = g_counters.free_count.load();
  c.live_bytes = c.alloc_bytes > c.free_bytes ? c.alloc_bytes - c.free_bytes : 0;
  c.peak_bytes = g_counters.run_max.load();
  if (c.peak_bytes < c.live_bytes) c.peak_bytes = c.live_bytes;
  c.mmap_live_bytes = g_counters.mmap_live.load();
  c.rss_bytes = rss_bytes > 0 ? static_cast<uint64_t>(rss_bytes) : 0;
  fmt::TrailerRecord trailer;
  trailer.ts = NowRel();
  trailer.counters = c;
  trailer.clean_exit = 1;
  AppendRecord(fmt::kChunkTrailer, trailer);
  EmitChunk(fmt::kChunkTrailer);
  g_state.store(kStopped);
}

void RunCycle(bool final) {
  // Outside flush_mu: loader lock and malloc locks.
  RefreshMappings();
  PyFramesPoll();
  if (!final) PyMemPoll();
  PrepareCounterNames();
  int64_t values[kNumCounterNames];
  CollectCounters(values);
  uint32_t tid = t_state.tid;

  pthread_mutex_lock(&g_w.flush_mu);
  if (g_state.load() != kRecording || !g_w.live) {
    pthread_mutex_unlock(&g_w.flush_mu);
    return;
  }
  // 1. Snapshot the rings.
  int nrings = g_nrings.load(std::memory_order_acquire);
  for (int i = 0; i < nrings; ++i) g_heads[i] = g_rings[i]->head.load(std::memory_order_acquire);
  g_kept_head = g_kept.head.load(std::memory_order_acquire);
  // The run-peak snapshot is taken before the dictionary is copied: every
  // stack it names is then defined before it in the trace (a site made after
  // the copy names a stack the next cycle defines).
  static uint8_t run_peak[2048];
  size_t run_peak_n = SitesTakeRunPeak(run_peak, sizeof(run_peak));
  // 2. Dictionary.
  AppendDictionary();
  EmitChunk(fmt::kChunkDict);
  // 3. Rings, then the writer's own records.
  for (int i = 0; i < nrings; ++i) DrainRing(i, g_heads[i]);
  DrainKept(g_kept_head);
  uint64_t dropped = g_dict.dropped();
  if (dropped != g_w.dict_dropped_reported) {
    AppendLost(dropped - g_w.dict_dropped_reported, 0, 2);
    g_w.dict_dropped_reported = dropped;
  }
  AppendCounters(values, tid);
  if (run_peak_n > 0) Append(fmt::kChunkData, run_peak, run_peak_n);  // the run's peak by site
  EmitChunk(fmt::kChunkData);
  // 4. Trailer.
  if (final && g_w.live) WriteTrailer(values[0]);
  pthread_mutex_unlock(&g_w.flush_mu);
}

// The leader has exited and every thread left is ours (the writer and the
// keeper).
bool ApplicationThreadsGone() {
  ProcStat st;
  return ReadProcStat(&st) && st.state == 'Z' && st.num_threads <= (g_have_keeper ? 3 : 2);
}

void* KeeperMain(void*) {
  g_own_threads.fetch_add(1, std::memory_order_relaxed);
  ThreadState& t = t_state;
  t.guard = 1;  // permanently, as the writer
  t.own = 1;
  t.tid = GetTid();
  int why;
  while ((why = g_keeper_exit.load(std::memory_order_acquire)) == 0) {
    syscall(SYS_futex, &g_keeper_exit, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
  }
  if (why == kKeeperExitProcess) exit(0);  // our destructor flushes
  g_own_threads.fetch_sub(1, std::memory_order_relaxed);
  return nullptr;  // the writer has stopped: the program's last thread ends the process
}

void ReleaseKeeper(int why) {
  g_keeper_exit.store(why, std::memory_order_release);
  syscall(SYS_futex, &g_keeper_exit, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void* WriterMain(void*) {
  g_own_threads.fetch_add(1, std::memory_order_relaxed);
  ThreadState& t = t_state;
  t.guard = 1;  // permanently: this thread only forwards
  t.own = 1;    // and its allocations (zstd's contexts) never reach the counters
  t.tid = GetTid();
  // Every file this thread opens from now on is out of the program's sight
  // and reach (core/fds.h); where the system refuses, or no keeper could be
  // started, OpenOwn keeps them high.
  if (g_have_keeper) TakePrivateFdTable();
  const uint64_t period_ns = g_config.flush_ms * 1000000;
  // Liveness is checked at least this often, whatever the flush period.
  constexpr uint64_t kLivenessNs = 100000000;
  uint64_t next_flush = MonoNs() + period_ns;
  uint64_t next_liveness = MonoNs() + kLivenessNs;
  // MEMSTEP_TEST_WRITER_STALL_MS (tests only): no cycle before this time, as
  // if the thread were starved; the final flush at exit still runs.
  const uint64_t stalled_until =
      g_config.test_writer_stall_ms > 0 ? MonoNs() + g_config.test_writer_stall_ms * 1000000 : 0;
  for (;;) {
    uint64_t now = MonoNs();
    uint64_t wait = next_flush > now ? next_flush - now : 0;
    if (wait > kLivenessNs) wait = kLivenessNs;
    struct timespec ts = {static_cast<time_t>(wait / 1000000000),
                          static_cast<long>(wait % 1000000000)};
    // Sleeps unless a producer wakes us (ring half full).
    syscall(SYS_futex, &g_wake, FUTEX_WAIT_PRIVATE, 0, &ts, nullptr, 0);
    const int why = g_wake.exchange(0, std::memory_order_relaxed);
    if (g_state.load() != kRecording) break;
    if (MonoNs() >= next_liveness) {  // not on every early wake: it reads a /proc file
      next_liveness = MonoNs() + kLivenessNs;
      if (ApplicationThreadsGone()) {
        if (!HasPrivateFdTable()) exit(0);  // as glibc's last thread would; our destructor flushes
        ReleaseKeeper(kKeeperExitProcess);
        g_own_threads.fetch_sub(1, std::memory_order_relaxed);
        return nullptr;
      }
    }
    if (stalled_until != 0 && MonoNs() < stalled_until) continue;
    // Before the cycle, so that its records are flushed in this one when it is due.
    if (why & kWakeStats) AllocStatsWriterPoll(t);
    if (!(why & kWakeFlush) && MonoNs() < next_flush) continue;
    next_flush = MonoNs() + period_ns;
    SnapshotWriterPoll();  // before the cycle: a requested snapshot is written in this one
    SitesWriterPoll();
    RunCycle(false);
    AlertsWriterPoll();
    WindowsWriterPoll();
  }
  if (g_have_keeper) ReleaseKeeper(kKeeperLeave);
  g_own_threads.fetch_sub(1, std::memory_order_relaxed);
  return nullptr;
}

bool LoadZstd() {
  void* h = g_real.dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return false;
  g_w.zstd_compress = reinterpret_cast<ZstdCompressFn>(dlsym(h, "ZSTD_compress"));
  g_w.zstd_is_error = reinterpret_cast<ZstdIsErrorFn>(dlsym(h, "ZSTD_isError"));
  if (g_w.zstd_compress == nullptr || g_w.zstd_is_error == nullptr) g_w.zstd_compress = nullptr;
  return g_w.zstd_compress != nullptr;
}

}  // namespace

KeptLane g_kept;
std::atomic<int> g_trace_pid{0};

bool WriterOpen(bool fork_child, const char* parent_path) {
  g_trace_pid.store(static_cast<int>(getpid()), std::memory_order_relaxed);
  if (g_w.raw == nullptr) {
    g_w.raw = static_cast<uint8_t*>(RawMmap(fmt::kMaxChunkRawLen));
    g_w.out = static_cast<uint8_t*>(RawMmap(kOutCap + sizeof(fmt::ChunkHeader)));
    if (g_w.raw == nullptr || g_w.out == nullptr) {
      Degrade("cannot reserve memory", nullptr, ENOMEM);
      return false;
    }
    // Without it, kept records that find their ring full are lost (counted).
    g_kept.data = static_cast<uint8_t*>(RawMmap(KeptLane::kCap));
    const char* nz = getenv("MEMSTEP_NO_ZSTD");
    if (nz == nullptr || nz[0] == '\0' || nz[0] == '0') LoadZstd();
  }
  g_w.start_mono = MonoNs();
  g_w.chunk_seq = 0;
  g_w.size = 0;
  g_w.fallocate_ok = true;
  g_w.dict_written = 0;
  g_w.raw_len = 0;
  char host[256];
  if (gethostname(host, sizeof(host)) != 0) memcpy(host, "unknown", 8);
  host[sizeof(host) - 1] = '\0';
  const char* rank = getenv("RANK");
  if (rank == nullptr || rank[0] == '\0') rank = "na";
  int err = MkdirP(g_config.dir);
  if (err != 0) {
    Degrade("cannot create directory", g_config.dir, err);
    return false;
  }
  int pid = getpid();
  int fd = -1;
  g_w.live = false;
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (attempt == 0) {
      snprintf(g_w.path, sizeof(g_w.path), "%s/memstep.%s.%s.%d.trace", g_config.dir, host, rank,
               pid);
    } else {
      snprintf(g_w.path, sizeof(g_w.path), "%s/memstep.%s.%s.%d.%d.trace", g_config.dir, host, rank,
               pid, attempt);
    }
    // O_EXCL|O_NOFOLLOW: never through a link another user planted (a shared
    // /tmp); 0600: traces hold command lines, paths and addresses.
    fd = OpenOwn(g_w.path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_APPEND, 0600);
    if (fd >= 0 || errno != EEXIST) break;
  }
  if (fd < 0) {
    Degrade("cannot create", g_w.path, errno);
    return false;
  }
  struct stat st;
  bool ok = fstat(fd, &st) == 0;
  if (ok) {
    g_w.dev = st.st_dev;
    g_w.ino = st.st_ino;
    ok = WriteHeader(fd, fork_child, parent_path, host);
  }
  int write_err = errno;
  close(fd);  // every later write opens it again (OpenTrace)
  if (!ok) {
    Degrade("cannot write", g_w.path, write_err);
    return false;
  }
  g_w.live = true;
  return true;
}

bool StartOwnThread(void* (*main)(void*)) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  // the thread starts with every signal blocked
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t th;
  const bool ok = pthread_create(&th, &attr, main, nullptr) == 0;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

void WriterStartThread() {
  g_keeper_exit.store(0, std::memory_order_relaxed);
  g_have_keeper = StartOwnThread(KeeperMain);
  if (!StartOwnThread(WriterMain)) {
    // No background thread: the final flush at exit still writes everything
    // that fits in the rings. Nor a keeper, which would keep the process
    // alive after the program's last thread.
    if (g_have_keeper) ReleaseKeeper(kKeeperLeave);
  }
}

void WriterCycle(bool final) { RunCycle(final); }

void OwnThreadsAdd(int n) { g_own_threads.fetch_add(n, std::memory_order_relaxed); }

// memstep's own threads running now (python/startup/sitecustomize.py leaves
// them out of the count behind CPython 3.12's fork warning).
MEMSTEP_EXPORT int memstep_own_threads(void) {
  return g_own_threads.load(std::memory_order_relaxed);
}

namespace {

void Wake(int why) {
  if ((g_wake.load(std::memory_order_relaxed) & why) != 0) return;
  if (g_wake.fetch_or(why) != 0) return;  // woken already: the writer reads every reason
  ErrnoSaver errno_saver;
  syscall(SYS_futex, &g_wake, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace

void WakeWriter() { Wake(kWakeFlush); }
void WakeWriterForStats() { Wake(kWakeStats); }

Ring* AcquireRing(uint32_t tid) {
  SpinLockHolder lock(&g_registry_lock);
  int n = g_nrings.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    Ring* r = g_rings[i];
    if (r->state.load(std::memory_order_acquire) == Ring::kFree) {
      r->Reuse(tid);
      r->state.store(Ring::kActive, std::memory_order_release);
      return r;
    }
  }
  if (n >= kMaxRings) return nullptr;
  constexpr size_t kHeader = 4096;
  static_assert(sizeof(Ring) <= kHeader, "Ring header fits its page");
  uint8_t* mem = static_cast<uint8_t*>(RawMmap(kHeader + Ring::kCap));
  if (mem == nullptr) return nullptr;
  Ring* r = reinterpret_cast<Ring*>(mem);  // zeroed memory is a valid empty Ring
  r->data = mem + kHeader;
  r->tid = tid;
  r->state.store(Ring::kActive, std::memory_order_relaxed);
  g_rings[n] = r;
  g_nrings.store(n + 1, std::memory_order_release);
  return r;
}

void RetireRing(Ring* r) { r->state.store(Ring::kExited, std::memory_order_release); }

void WriterForkPrepare() { pthread_mutex_lock(&g_w.flush_mu); }
void RegistryLock() { g_registry_lock.Lock(); }
void RegistryUnlock() { g_registry_lock.Unlock(); }

void WriterForkParent() { pthread_mutex_unlock(&g_w.flush_mu); }

void WriterForkChild() {
  g_own_threads.store(0, std::memory_order_relaxed);  // none survives the fork
  g_registry_lock.Reset();
  FdsForkChild();
  g_kept.DropAll();  // the parent's records, written to the parent's trace
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  memcpy(&g_w.flush_mu, &fresh, sizeof(fresh));
  Ring* mine = t_state.ring;
  int n = g_nrings.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    Ring* r = g_rings[i];
    r->DropAll(r == mine ? t_state.tid : 0);
    r->state.store(r == mine ? Ring::kActive : Ring::kFree, std::memory_order_relaxed);
  }
  if (g_state.load() != kRecording) return;
  static char parent[4096];
  memcpy(parent, g_w.path, sizeof(parent));
  g_w.live = false;  // the parent's file: the child gets its own
  // The re-emitted dictionary log has every mapping the parent recorded; the
  // refresh adds any the parent had not written yet (known ones are skipped).
  g_maps_dirty.store(1);
  if (!WriterOpen(true, parent)) {
    g_state.store(kStopped);
    return;
  }
  WriterStartThread();
}

void Degrade(const char* what, const char* detail, int err) {
  g_state.store(kStopped);
  if (g_degraded.exchange(true)) return;
  char line[1400];
  int n = snprintf(line, sizeof(line),
                   "memstep: %s%s%s: %s; recording stopped, the program continues\n", what,
                   detail != nullptr ? " " : "", detail != nullptr ? detail : "", strerror(err));
  if (n <= 0) return;
  size_t len = static_cast<size_t>(n) < sizeof(line) ? static_cast<size_t>(n) : sizeof(line) - 1;
  if (!g_config.quiet) SayOnStderr(line, len);
  // Best effort: a notice in the trace (a data chunk defining its own string),
  // in the room Reserve kept for it, if the file is still the one we created.
  if (!g_w.live || g_w.raw == nullptr || g_w.out == nullptr) return;
  g_w.live = false;
  int fd = OpenTrace();
  if (fd < 0) return;
  uint8_t* rec = g_w.raw;
  fmt::RecordEncoder e(rec, 2048);
  const uint32_t kNoticeStr = 0x7fffffff;
  fmt::StringRecord text;
  text.id = kNoticeStr;
  text.text = fmt::ByteView{reinterpret_cast<const uint8_t*>(line), static_cast<uint64_t>(len)};
  fmt::NoticeRecord notice;
  notice.ts = MonoNs() - g_w.start_mono;
  notice.code = static_cast<uint64_t>(err);
  notice.message_str = kNoticeStr;
  if (fmt::Encode(e, text) && fmt::Encode(e, notice)) {
    fmt::ChunkHeader h;
    fmt::FillChunkHeader(&h, g_w.chunk_seq++, fmt::kCodecRaw, fmt::kChunkData, 0, rec,
                         static_cast<uint32_t>(e.size()), static_cast<uint32_t>(e.size()));
    memcpy(g_w.out, &h, sizeof(h));
    memcpy(g_w.out + sizeof(h), rec, e.size());
    if (BelowSizeLimit(sizeof(h) + e.size())) (void)WriteAll(fd, g_w.out, sizeof(h) + e.size());
  }
  close(fd);
  g_w.raw_len = 0;
}

uint64_t StartMonoNs() { return g_w.start_mono; }

std::atomic<uint64_t> g_last_rss{0};

uint64_t LastRssBytes() { return g_last_rss.load(std::memory_order_relaxed); }

uint64_t ReadRssBytes() {
  ProcStat st;
  uint64_t rss = ReadProcStat(&st) ? st.rss_bytes : 0;
  g_last_rss.store(rss, std::memory_order_relaxed);
  return rss;
}

}  // namespace memstep::preload
