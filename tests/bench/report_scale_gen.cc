// report_scale_gen: writes a large, realistic memstep trace for the report
// scale benchmark (tests/bench/report_scale.sh) and the streaming test
// (ctest report_stream_memory).
//
//   report_scale_gen --out FILE (--mib N | --records N) [--seed S] [--threads T]
//                    [--stacks K] [--rate R] [--chunk-time 0|1] [--very-late N]
//
// The trace is what a busy training process writes: steps of about two
// seconds with three stages (forward, backward, optimizer); T threads
// allocating and freeing sampled blocks from K call sites (a few hot ones,
// a long tail), most freed within the step, some kept across steps, one site
// leaking a block per step; anonymous mmaps and munmaps; device allocations
// and frees on two devices; the writer's periodic counters each flush cycle.
// Records are written the way preload/trace/writer.cc writes them: one flush
// cycle every 100 ms of trace time, each draining the threads' buffers in
// turn into zstd chunks of at most 1 MiB raw (chunk time = the cycle's), so
// records of different threads interleave out of seq order, and about 1 % of
// records (a seq taken just before the cycle's snapshot, pushed after it)
// reach the file one cycle late: the reorder window's real case.
// --chunk-time 0 writes every chunk's time as 0 (as tests' TraceBuilder
// does): a reader then knows no bound and holds everything to the end, the
// whole-file order. --very-late N delays one ALLOC in N by 50 cycles (5 s),
// beyond what the writer ever does: a trace that breaks the bound.
// Records are encoded with src/format/records.h (the codec preload uses).
// Deterministic for a given seed. Prints one line: RESULT records=N bytes=B
// steps=S.

#include <zstd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/format/format.h"
#include "src/format/records.h"

namespace fmt = memstep::format;

namespace {

struct Args {
  std::string out;
  uint64_t target_bytes = 0;
  uint64_t target_records = 0;
  uint64_t seed = 1;
  int threads = 4;
  int stacks = 1000;
  uint64_t rate = 20000;   // records per second of trace time
  bool chunk_time = true;  // false: every chunk's time is 0 (no reorder bound known)
  uint64_t very_late = 0;  // N > 0: one record in N reaches the file 50 cycles late
};

class Writer {
 public:
  Writer(FILE* f, int threads) : f_(f), rings_(threads + 1) {
    raw_.reserve(fmt::kMaxChunkRawLen);
    out_.resize(ZSTD_compressBound(fmt::kMaxChunkRawLen));
    cctx_ = ZSTD_createCCtx();
  }
  ~Writer() { ZSTD_freeCCtx(cctx_); }

  void Header(uint32_t pid, uint64_t interval) {
    std::vector<uint8_t> h(sizeof(fmt::FileHeader));
    fmt::FileHeader fh{};
    memcpy(fh.magic, fmt::kFileMagic, sizeof(fh.magic));
    fh.version_major = fmt::kVersionMajor;
    fh.version_minor = fmt::kVersionMinor;
    fh.start_mono_ns = 1000;
    fh.start_real_ns = 1700000000000000000ull;
    fh.pid = pid;
    fh.ppid = 1;
    fh.page_size = 4096;
    fh.flags = fmt::kFlagGlibcMalloc;
    fh.sample_interval = interval;
    fh.always_bytes = 1 << 20;
    auto tlv = [&](uint16_t type, const std::string& v) {
      const uint32_t len = static_cast<uint32_t>(v.size());
      const size_t at = h.size();
      h.resize(at + 6 + len);
      memcpy(&h[at], &type, 2);
      memcpy(&h[at + 2], &len, 4);
      memcpy(&h[at + 6], v.data(), len);
    };
    tlv(fmt::kTlvCmdline, std::string("python3\0train.py\0", 17));
    tlv(fmt::kTlvHostname, "bench-host");
    tlv(fmt::kTlvRankEnv, std::string("RANK=0\0", 7));
    tlv(fmt::kTlvExe, "/usr/bin/python3");
    tlv(fmt::kTlvAllocator, "glibc");
    tlv(fmt::kTlvEnd, "");
    fh.header_len = static_cast<uint32_t>(h.size() + 4);
    memcpy(h.data(), &fh, sizeof(fh));
    const uint32_t crc = fmt::Crc32c(h.data(), h.size());
    h.resize(h.size() + 4);
    memcpy(&h[h.size() - 4], &crc, 4);
    Put(h.data(), h.size());
  }

  // A record of ring `ring` (0: the writer's own; 1..T: threads).
  template <typename R>
  void Record(int ring, const R& r, bool late = false, bool very_late = false) {
    uint8_t buf[256];
    fmt::RecordEncoder e(buf, sizeof(buf));
    if (!fmt::Encode(e, r)) abort();
    if (very_late) {
      held_.push_back(Held{cycles_ + 50, std::vector<uint8_t>(buf, buf + e.size())});
    } else {
      std::vector<uint8_t>& dst = late ? late_[ring] : rings_[ring];
      dst.insert(dst.end(), buf, buf + e.size());
    }
    ++records_;
  }
  void set_chunk_time(bool on) { chunk_time_ = on; }
  template <typename R>
  void Dict(const R& r) {
    uint8_t buf[4096];
    fmt::RecordEncoder e(buf, sizeof(buf));
    if (!fmt::Encode(e, r)) abort();
    dict_.insert(dict_.end(), buf, buf + e.size());
  }

  // One flush cycle at time `ts`: the dictionary, then each ring; records
  // held as late go out in the next cycle.
  void Cycle(uint64_t ts) {
    ++cycles_;
    for (size_t i = 0; i < held_.size();) {  // very late records whose cycle came
      if (held_[i].cycle > cycles_) {
        ++i;
        continue;
      }
      rings_[0].insert(rings_[0].end(), held_[i].bytes.begin(), held_[i].bytes.end());
      held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    Drain(dict_, fmt::kChunkDict, ts);
    Emit(fmt::kChunkDict, ts);
    for (size_t i = 0; i < rings_.size(); ++i) Drain(rings_[i], fmt::kChunkData, ts);
    Emit(fmt::kChunkData, ts);
    late_.swap(rings_);
    if (late_.size() != rings_.size()) late_.resize(rings_.size());
  }
  void Finish(uint64_t ts, const fmt::Counters& c) {
    for (Held& h : held_) h.cycle = 0;
    Cycle(ts);
    Cycle(ts);
    fmt::TrailerRecord t;
    t.ts = ts;
    t.counters = c;
    t.clean_exit = 1;
    uint8_t buf[256];
    fmt::RecordEncoder e(buf, sizeof(buf));
    fmt::Encode(e, t);
    raw_.insert(raw_.end(), buf, buf + e.size());
    Emit(fmt::kChunkTrailer, ts);
  }
  uint64_t bytes() const { return bytes_; }
  uint64_t records() const { return records_; }

 private:
  void Drain(std::vector<uint8_t>& src, uint8_t kind, uint64_t ts) {
    // Records are never split: cut at record boundaries is not known here,
    // so a ring drains whole into chunks of at most 1 MiB by copying it in
    // pieces that end where a record ends (records are < 256 B: cut at the
    // last full record by re-decoding lengths is unnecessary when rings stay
    // far below 1 MiB per cycle, which the cycle length guarantees).
    if (raw_.size() + src.size() > fmt::kMaxChunkRawLen) Emit(kind, ts);
    if (src.size() > fmt::kMaxChunkRawLen) abort();  // a cycle too long for one chunk
    raw_.insert(raw_.end(), src.begin(), src.end());
    src.clear();
  }
  void Emit(uint8_t kind, uint64_t ts) {
    if (raw_.empty()) return;
    const size_t n =
        ZSTD_compressCCtx(cctx_, out_.data(), out_.size(), raw_.data(), raw_.size(), 1);
    if (ZSTD_isError(n)) abort();
    fmt::ChunkHeader ch;
    fmt::FillChunkHeader(&ch, chunk_seq_++, fmt::kCodecZstd, kind, chunk_time_ ? ts : 0,
                         out_.data(), static_cast<uint32_t>(n), static_cast<uint32_t>(raw_.size()));
    Put(&ch, sizeof(ch));
    Put(out_.data(), n);
    raw_.clear();
  }
  void Put(const void* p, size_t n) {
    if (fwrite(p, 1, n, f_) != n) {
      perror("report_scale_gen: write");
      exit(1);
    }
    bytes_ += n;
  }

  struct Held {
    uint64_t cycle;
    std::vector<uint8_t> bytes;
  };
  FILE* f_;
  bool chunk_time_ = true;
  uint64_t cycles_ = 0;
  std::vector<Held> held_;
  std::vector<std::vector<uint8_t>> rings_;
  std::vector<std::vector<uint8_t>> late_ = std::vector<std::vector<uint8_t>>(rings_.size());
  std::vector<uint8_t> dict_, raw_, out_;
  ZSTD_CCtx* cctx_;
  uint32_t chunk_seq_ = 0;
  uint64_t bytes_ = 0;
  uint64_t records_ = 0;
};

struct LiveBlock {
  uint64_t addr, size, stack;
  int thread;
};

int Usage() {
  fprintf(stderr,
          "usage: report_scale_gen --out FILE (--mib N | --records N) [--seed S] [--threads T] "
          "[--stacks K] [--rate R] [--chunk-time 0|1] [--very-late N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) return Usage();
    const char* v = argv[++i];
    if (k == "--out") {
      a.out = v;
    } else if (k == "--mib") {
      a.target_bytes = strtoull(v, nullptr, 10) << 20;
    } else if (k == "--records") {
      a.target_records = strtoull(v, nullptr, 10);
    } else if (k == "--seed") {
      a.seed = strtoull(v, nullptr, 10);
    } else if (k == "--threads") {
      a.threads = atoi(v);
    } else if (k == "--stacks") {
      a.stacks = atoi(v);
    } else if (k == "--rate") {
      a.rate = strtoull(v, nullptr, 10);
    } else if (k == "--chunk-time") {
      a.chunk_time = strcmp(v, "0") != 0;
    } else if (k == "--very-late") {
      a.very_late = strtoull(v, nullptr, 10);
    } else {
      return Usage();
    }
  }
  if (a.out.empty() || (a.target_bytes == 0 && a.target_records == 0) || a.threads < 1 ||
      a.threads > 64 || a.stacks < 10 || a.rate < 1000) {
    return Usage();
  }
  FILE* f = fopen(a.out.c_str(), "wb");
  if (f == nullptr) {
    perror(a.out.c_str());
    return 1;
  }
  std::mt19937_64 rng(a.seed);
  auto uniform = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  const uint64_t T = 512 * 1024;  // sampling interval
  Writer w(f, a.threads);
  w.set_chunk_time(a.chunk_time);
  w.Header(4242, T);

  // Dictionary: stage and counter names, a mapping, the stacks.
  const char* names[] = {"forward",
                         "backward",
                         "optimizer",
                         "rss_bytes",
                         "mmap_live_bytes",
                         "mallinfo2.arena",
                         "memstep.sampled_live_blocks",
                         "/usr/bin/python3"};
  for (uint64_t i = 0; i < 8; ++i) {
    fmt::StringRecord s;
    s.id = i + 1;
    s.text = fmt::ByteView{reinterpret_cast<const uint8_t*>(names[i]), strlen(names[i])};
    w.Dict(s);
  }
  fmt::MappingRecord m;
  m.id = 1;
  m.start = 0x400000;
  m.end = 0x4000000;
  m.path_str = 8;
  w.Dict(m);
  const uint64_t kStageStr[3] = {1, 2, 3};
  std::vector<bool> stack_defined(a.stacks + 1, false);
  auto define_stack = [&](uint64_t id) {
    if (stack_defined[id]) return;
    stack_defined[id] = true;
    uint64_t ips[8];
    for (int k = 0; k < 8; ++k) ips[k] = 0x400000 + (id * 131 + k * 7919) % 0x3000000;
    fmt::StackRecord s;
    s.id = id;
    s.ips.values = ips;
    s.ips.count = 8;
    w.Dict(s);
  };
  // Site popularity: a Zipf-like draw (a few hot sites, a long tail).
  std::vector<double> cdf(a.stacks);
  double sum = 0;
  for (int i = 0; i < a.stacks; ++i) cdf[i] = (sum += 1.0 / (i + 1));
  auto draw_stack = [&]() -> uint64_t {
    const double x = std::uniform_real_distribution<double>(0, sum)(rng);
    return static_cast<uint64_t>(std::lower_bound(cdf.begin(), cdf.end(), x) - cdf.begin()) + 2;
  };
  const uint64_t leak_stack = 1;  // one block per step, never freed

  uint64_t seq = 0, ts = 1000000, step = 0;
  const uint64_t dt = 1000000000ull / a.rate;
  const uint64_t cycle_ns = 100000000;  // MEMSTEP_FLUSH_MS=100
  uint64_t next_cycle = ts + cycle_ns;
  fmt::Counters c{};
  uint64_t next_addr = 0x10000000;
  std::vector<LiveBlock> live;         // sampled blocks still allocated
  std::vector<LiveBlock> step_blocks;  // freed at the step's end
  struct DevBlock {
    uint64_t addr, size;
    int32_t device;
  };
  std::vector<DevBlock> dev_live;
  const uint64_t records_per_step = a.rate * 2;

  auto tick = [&]() {
    ts += dt;
    if (ts >= next_cycle) {
      // The writer's counters, then the cycle.
      const uint64_t values[4] = {c.rss_bytes, c.mmap_live_bytes, c.live_bytes + (64u << 20),
                                  live.size()};
      for (uint64_t k = 0; k < 4; ++k) {
        fmt::CounterRecord r;
        r.ts = ts;
        r.seq = seq++;
        r.tid = 9999;
        r.name_str = 4 + k;
        r.value = static_cast<int64_t>(values[k]);
        w.Record(0, r);
      }
      w.Cycle(ts);
      next_cycle = ts + cycle_ns;
    }
  };
  auto thread = [&]() { return static_cast<int>(uniform(a.threads)) + 1; };
  // ~1 % of a thread's records come one cycle late (seq taken before the
  // snapshot, pushed after it): the last records before a cycle boundary.
  auto late = [&]() { return next_cycle - ts < 3 * dt && uniform(4) == 0; };
  auto alloc = [&](uint64_t stack, uint64_t size, int t, uint64_t stage, bool keep_step) {
    define_stack(stack);
    fmt::AllocRecord r;
    r.ts = ts;
    r.seq = seq++;
    r.tid = 1000 + t;
    r.stack = stack;
    r.addr = next_addr;
    r.size = size;
    r.interval = T;
    r.step = step;
    r.stage_str = stage;
    next_addr += (size + 4095) & ~uint64_t{4095};
    w.Record(t, r, late(), a.very_late > 0 && uniform(a.very_late) == 0);
    LiveBlock b{r.addr, size, stack, t};
    (keep_step ? step_blocks : live).push_back(b);
    tick();
  };
  auto free_block = [&](const LiveBlock& b) {
    fmt::FreeRecord r;
    r.ts = ts;
    r.seq = seq++;
    r.tid = 1000 + b.thread;
    r.addr = b.addr;
    w.Record(b.thread, r, late());
    tick();
  };
  auto boundary = [&](bool is_step, uint64_t stage, int phase) {
    if (is_step) {
      fmt::StepRecord r;
      r.ts = ts;
      r.seq = seq++;
      r.tid = 1001;
      r.step = step;
      r.phase = phase;
      r.counters = c;
      w.Record(1, r);
    } else {
      fmt::StageRecord r;
      r.ts = ts;
      r.seq = seq++;
      r.tid = 1001;
      r.stage_str = stage;
      r.step = step;
      r.phase = phase;
      r.counters = c;
      w.Record(1, r);
    }
    tick();
  };
  auto done = [&]() {
    return (a.target_bytes > 0 && w.bytes() >= a.target_bytes) ||
           (a.target_records > 0 && w.records() >= a.target_records);
  };

  while (!done()) {
    c.peak_bytes = c.live_bytes;
    boundary(true, 0, 0);
    for (int s = 0; s < 3; ++s) {
      boundary(false, kStageStr[s], 0);
      const uint64_t n = records_per_step / 3;
      for (uint64_t k = 0; k < n; k += 2) {
        const int t = thread();
        const uint64_t size = 64 + uniform(64 * 1024);
        // The exact counters see every allocation: ~300 per sampled one
        // (T / mean size), as many freed; the transient bytes make the peak.
        c.alloc_bytes += size * 300;
        c.alloc_count += 300;
        c.free_bytes += size * 300;
        c.free_count += 300;
        c.peak_bytes = std::max(c.peak_bytes, c.live_bytes + (size << 6));
        const uint64_t r = uniform(100);
        if (r < 45) {
          alloc(draw_stack(), size, t, kStageStr[s], true);  // freed at the step's end
        } else if (r < 90) {
          alloc(draw_stack(), size, t, kStageStr[s], false);
          if (live.size() > 2000) {  // a bounded pool of long-lived blocks
            const size_t j = uniform(live.size());
            free_block(live[j]);
            live[j] = live.back();
            live.pop_back();
          }
        } else if (r < 94) {  // device memory
          const uint64_t dsize = (1 + uniform(64)) << 20;
          fmt::DevAllocRecord d;
          d.ts = ts;
          d.seq = seq++;
          d.tid = 1000 + t;
          d.stack = draw_stack();
          define_stack(d.stack);
          d.kind = fmt::kDevDevice;
          d.device = static_cast<int32_t>(uniform(2));
          d.addr = 0x7f0000000000ull + (next_addr += dsize);
          d.size = dsize;
          d.api = 1;
          d.step = step;
          d.stage_str = kStageStr[s];
          d.sampled = 1;
          w.Record(t, d, late());
          dev_live.push_back(DevBlock{d.addr, dsize, d.device});
          tick();
          if (dev_live.size() > 64) {
            const size_t j = uniform(dev_live.size());
            fmt::DevFreeRecord fr;
            fr.ts = ts;
            fr.seq = seq++;
            fr.tid = 1000 + t;
            fr.kind = fmt::kDevDevice;
            fr.device = dev_live[j].device;
            fr.addr = dev_live[j].addr;
            fr.size = dev_live[j].size;
            fr.api = 1;
            w.Record(t, fr, late());
            dev_live[j] = dev_live.back();
            dev_live.pop_back();
            tick();
          }
        } else if (r < 96) {  // an anonymous mapping and its unmapping
          fmt::MmapRecord mm;
          mm.ts = ts;
          mm.seq = seq++;
          mm.tid = 1000 + t;
          mm.stack = draw_stack();
          define_stack(mm.stack);
          mm.addr = 0x7e0000000000ull + (next_addr += 1 << 21);
          mm.len = 1 << 21;
          mm.prot = 3;
          mm.flags = 0x22;
          mm.step = step;
          mm.stage_str = kStageStr[s];
          w.Record(t, mm, late());
          tick();
          fmt::MunmapRecord mu;
          mu.ts = ts;
          mu.seq = seq++;
          mu.tid = 1000 + t;
          mu.addr = mm.addr;
          mu.len = mm.len;
          w.Record(t, mu, late());
          tick();
        } else {
          alloc(draw_stack(), size, t, kStageStr[s], true);
        }
      }
      boundary(false, kStageStr[s], 1);
    }
    alloc(leak_stack, 4096, 1, 0, false);  // the leak: kept for good
    c.alloc_bytes += 4096;
    c.alloc_count += 1;
    c.live_bytes = c.alloc_bytes - c.free_bytes + (512u << 20);
    live.pop_back();  // (not in the freeable pool)
    for (const LiveBlock& b : step_blocks) free_block(b);
    step_blocks.clear();
    c.rss_bytes = c.live_bytes + (256u << 20) + step * 4096;
    boundary(true, 0, 1);
    ++step;
  }
  w.Finish(ts + cycle_ns, c);
  fclose(f);
  printf("RESULT records=%" PRIu64 " bytes=%" PRIu64 " steps=%" PRIu64 "\n", w.records(), w.bytes(),
         step);
  return 0;
}
