// trace_check: a small validator of the files libmemstep.so writes, used by
// the preload behaviour tests (the full reader lives in src/reader).
//
// Usage: trace_check FILE [--expect-trailer] [--expect-fork-child]
//                         [--min-allocs N] [--min-stacks N] [--min-steps N]
//                         [--min-mappings N] [--expect-stage NAME] [--dump]
//                         [--allow-truncated-tail] [--min-epochs N]
//                         [--expect-alerts N] [--min-snapshots N] [--min-notices N]
//                         [--expect-planted-top STAGE SIZE] [--expect-interval T]
//                         [--expect-planted-usable SIZE USABLE]
// Checks: header magic/version/CRC, every chunk's header and payload CRC,
// zstd decompression, record syntax of every tag, and that every stack,
// string and mapping id is defined before it is used. Prints one summary line
// ("key=value ...") and exits 0 when all checks pass, 1 otherwise.

#include <zstd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "src/format/format.h"
#include "src/format/records.h"

namespace fmt = memstep::format;

namespace {

struct Stats {
  int chunks = 0, allocs = 0, frees = 0, mmaps = 0, munmaps = 0, mremaps = 0, stacks = 0,
      strings = 0, mappings = 0, steps = 0, stages = 0, counters = 0, lost = 0, notices = 0,
      trailers = 0, nonzero_stacks = 0, epochs = 0, alerts = 0, snapshots = 0;
  bool clean = false;
  uint32_t flags = 0;
  uint64_t sample_interval = 0;  // the header's T at start
  std::string parent;
  std::vector<std::string> stage_names;
  // Stage-peak snapshots as (stage name, top stack).
  std::vector<std::pair<std::string, uint64_t>> snapshot_tops;
};

std::set<uint64_t> g_stacks, g_strings, g_maps;
bool g_dump = false;
bool g_allow_truncated_tail = false;  // a kill -9 may cut the last write
uint64_t g_planted_size = 0;          // --expect-planted-top: allocation size
// --expect-planted-usable SIZE USABLE: each snapshot entry of a planted stack
// holds its count times USABLE bytes (every block recorded with p = 1).
uint64_t g_planted_usable = 0;
int g_usable_entries = 0, g_usable_wrong = 0;
std::set<uint64_t> g_planted_stacks;  // stacks of allocations of that size
std::vector<std::pair<uint64_t, std::string>> g_string_text;

bool Fail(const char* what) {
  std::fprintf(stderr, "trace_check: %s\n", what);
  return false;
}

bool StringDefined(uint64_t id) { return id == 0 || g_strings.count(id) != 0; }

std::string StringText(uint64_t id) {
  for (auto& [sid, text] : g_string_text) {
    if (sid == id) return text;
  }
  return "-";
}

using ull = unsigned long long;

std::string Text(const fmt::ByteView& v) {
  return std::string(reinterpret_cast<const char*>(v.data), static_cast<size_t>(v.size));
}

bool StackDefined(uint64_t id) { return id == 0 || g_stacks.count(id) != 0; }

// One Take per record kind (records.h decodes; these check and count).
bool Take(const fmt::StringRecord& r, Stats* s) {
  g_strings.insert(r.id);
  g_string_text.emplace_back(r.id, Text(r.text));
  ++s->strings;
  return true;
}

bool Take(const fmt::MappingRecord& r, Stats* s) {
  if (!StringDefined(r.path_str)) return Fail("MAPPING path before its STRING");
  if (r.end <= r.start) return Fail("MAPPING end <= start");
  if (g_dump) std::printf("MAPPING id=%llu %s\n", (ull)r.id, StringText(r.path_str).c_str());
  g_maps.insert(r.id);
  ++s->mappings;
  return true;
}

bool Take(const fmt::MappingGoneRecord& r, Stats*) {
  if (!g_maps.count(r.id)) return Fail("MAPPING_GONE of unknown id");
  return true;
}

bool Take(const fmt::StackRecord& r, Stats* s) {
  g_stacks.insert(r.id);
  ++s->stacks;
  return true;
}

bool Take(const fmt::AllocRecord& r, Stats* s) {
  if (!StackDefined(r.stack)) return Fail("ALLOC stack before its STACK");
  if (!StringDefined(r.stage_str)) return Fail("ALLOC stage before its STRING");
  if (r.stack != 0) ++s->nonzero_stacks;
  if (g_planted_size != 0 && r.size == g_planted_size) g_planted_stacks.insert(r.stack);
  ++s->allocs;
  return true;
}

bool Take(const fmt::FreeRecord&, Stats* s) {
  ++s->frees;
  return true;
}

bool Take(const fmt::MmapRecord& r, Stats* s) {
  if (!StackDefined(r.stack)) return Fail("MMAP stack before its STACK");
  ++s->mmaps;
  return true;
}

bool Take(const fmt::MunmapRecord&, Stats* s) {
  ++s->munmaps;
  return true;
}

bool Take(const fmt::MremapRecord&, Stats* s) {
  ++s->mremaps;
  return true;
}

bool Take(const fmt::DevAllocRecord& r, Stats*) {
  if (!StackDefined(r.stack)) return Fail("DEV_ALLOC stack before its STACK");
  if (!StringDefined(r.stage_str)) return Fail("DEV_ALLOC stage before its STRING");
  return true;
}

bool Take(const fmt::DevFreeRecord&, Stats*) { return true; }

bool Take(const fmt::DevFailRecord& r, Stats*) {
  if (!StackDefined(r.stack)) return Fail("DEV_FAIL stack before its STACK");
  if (!StringDefined(r.stage_str)) return Fail("DEV_FAIL stage before its STRING");
  return true;
}

bool Take(const fmt::DevInfoRecord&, Stats*) { return true; }

bool Take(const fmt::MemSnapshotRecord& r, Stats*) {
  if (!StringDefined(r.stage_str)) return Fail("MEM_SNAPSHOT stage before its STRING");
  if (r.cause < fmt::kMemSnapDeviceOom || r.cause > fmt::kMemSnapRequest) {
    return Fail("MEM_SNAPSHOT cause out of range");
  }
  if (g_dump) {
    std::printf("MEM_SNAPSHOT step=%llu cause=%llu device=%d requested=%llu free=%llu total=%llu\n",
                (ull)r.step, (ull)r.cause, r.device, (ull)r.requested, (ull)r.free, (ull)r.total);
  }
  return true;
}

bool Take(const fmt::ArenaStatsRecord& r, Stats*) {
  if (r.arenas.count == 0) return Fail("ARENA_STATS without arenas");
  if (g_dump) {
    fmt::ListReader list(r.arenas, 4);
    uint64_t v[4];
    for (uint64_t i = 0; i < r.arenas.count; ++i) {
      for (uint64_t& x : v) list.Next(&x);
      std::printf("ARENA_STATS arena=%llu system=%llu free=%llu top=%llu free_chunks=%llu\n",
                  (ull)i, (ull)v[0], (ull)v[1], (ull)v[2], (ull)v[3]);
    }
  }
  return true;
}

bool Take(const fmt::HuntRecord& r, Stats*) {
  if (r.phase > 1 || (r.phase == 1 && (r.outcome < 1 || r.outcome > 3))) {
    return Fail("HUNT phase/outcome out of range");
  }
  if (g_dump) {
    std::printf(
        "HUNT step=%llu phase=%llu outcome=%llu interval=%llu rate=%llu growth=%llu "
        "explained=%llu samples=%llu sites=%llu stack_ns=%llu memory=%llu\n",
        (ull)r.step, (ull)r.phase, (ull)r.outcome, (ull)r.interval, (ull)r.rate, (ull)r.growth,
        (ull)r.explained, (ull)r.samples, (ull)r.sites, (ull)r.stack_ns, (ull)r.memory);
  }
  return true;
}

bool Take(const fmt::StepRecord& r, Stats* s) {
  const fmt::Counters& c = r.counters;
  if (c.peak_bytes < c.live_bytes) return Fail("STEP peak < live");
  if (g_dump) {
    std::printf(
        "STEP step=%llu phase=%llu live=%llu peak=%llu allocs=%llu frees=%llu mmap=%llu "
        "rss=%llu\n",
        (ull)r.step, (ull)r.phase, (ull)c.live_bytes, (ull)c.peak_bytes, (ull)c.alloc_count,
        (ull)c.free_count, (ull)c.mmap_live_bytes, (ull)c.rss_bytes);
  }
  ++s->steps;
  return true;
}

bool Take(const fmt::StageRecord& r, Stats* s) {
  if (!StringDefined(r.stage_str)) return Fail("STAGE name before its STRING");
  for (auto& [id, text] : g_string_text) {
    if (id != r.stage_str) continue;
    s->stage_names.push_back(text);
    if (g_dump) {
      std::printf("STAGE %s step=%llu phase=%llu live=%llu peak=%llu\n", text.c_str(), (ull)r.step,
                  (ull)r.phase, (ull)r.counters.live_bytes, (ull)r.counters.peak_bytes);
    }
  }
  ++s->stages;
  return true;
}

bool Take(const fmt::CounterRecord& r, Stats* s) {
  if (!StringDefined(r.name_str)) return Fail("COUNTER name before its STRING");
  if (g_dump) std::printf("COUNTER %s=%lld\n", StringText(r.name_str).c_str(), (long long)r.value);
  ++s->counters;
  return true;
}

bool Take(const fmt::RateRecord&, Stats*) { return true; }

bool Take(const fmt::EpochRecord& r, Stats* s) {
  if (g_dump) std::printf("EPOCH epoch=%llu\n", (ull)r.epoch);
  ++s->epochs;
  return true;
}

bool Take(const fmt::AlertRecord& r, Stats* s) {
  if (r.rule < fmt::kAlertGrowth || r.rule > fmt::kAlertDevicePeak) return Fail("ALERT rule");
  if (!StringDefined(r.stage_str)) return Fail("ALERT stage before its STRING");
  if (!StackDefined(r.site_stack)) return Fail("ALERT site before its STACK");
  if (g_dump) {
    std::printf("ALERT step=%llu rule=%llu value=%llu threshold=%llu stage=%s site=%llu\n",
                (ull)r.step, (ull)r.rule, (ull)r.value, (ull)r.threshold,
                StringText(r.stage_str).c_str(), (ull)r.site_stack);
  }
  ++s->alerts;
  return true;
}

bool Take(const fmt::SiteSnapshotRecord& r, Stats* s) {
  if (r.cause > fmt::kSnapshotStepEnd) return Fail("SITE_SNAPSHOT cause");
  if (!StringDefined(r.stage_str)) return Fail("SITE_SNAPSHOT stage before its STRING");
  if (r.sites.count > 4096) return Fail("SITE_SNAPSHOT n");
  uint64_t top = 0, top_bytes = 0, prev = UINT64_MAX;
  fmt::ListReader sites(r.sites, 3);
  for (uint64_t i = 0; i < r.sites.count; ++i) {
    uint64_t stack = 0, bytes = 0, count = 0;
    sites.Next(&stack);
    sites.Next(&bytes);
    sites.Next(&count);
    if (!StackDefined(stack)) return Fail("SITE_SNAPSHOT stack before STACK");
    if (g_planted_usable != 0 && count > 0 && g_planted_stacks.count(stack) != 0) {
      ++g_usable_entries;
      if (bytes != count * g_planted_usable) {
        ++g_usable_wrong;
        std::fprintf(stderr, "trace_check: planted site %llu B for %llu blocks\n", (ull)bytes,
                     (ull)count);
      }
    }
    if (bytes > prev) return Fail("SITE_SNAPSHOT not sorted by bytes");
    prev = bytes;
    if (i == 0) top = stack, top_bytes = bytes;
  }
  std::string stage = StringText(r.stage_str);
  if (r.cause == fmt::kSnapshotStagePeak && r.sites.count > 0) {
    s->snapshot_tops.emplace_back(stage, top);
  }
  if (g_dump) {
    std::printf("SNAPSHOT step=%llu cause=%llu stage=%s n=%llu top=%llu top_bytes=%llu\n",
                (ull)r.step, (ull)r.cause, stage.c_str(), (ull)r.sites.count, (ull)top,
                (ull)top_bytes);
  }
  ++s->snapshots;
  return true;
}

bool Take(const fmt::LostRecord& r, Stats* s) {
  if (g_dump) {
    std::printf("LOST records=%llu bytes=%llu cause=%llu\n", (ull)r.records, (ull)r.bytes,
                (ull)r.cause);
  }
  ++s->lost;
  return true;
}

bool Take(const fmt::NoticeRecord& r, Stats* s) {
  if (g_dump) std::printf("NOTICE code=%llu %s\n", (ull)r.code, StringText(r.message_str).c_str());
  ++s->notices;
  return true;
}

bool Take(const fmt::TrailerRecord& r, Stats* s) {
  s->clean = r.clean_exit == 1;
  ++s->trailers;
  return true;
}

bool ParseRecords(const uint8_t* p, size_t n, Stats* s) {
  fmt::RecordDecoder d(p, n);
  while (!d.AtEnd()) {
    uint8_t tag;
    if (!d.Byte(&tag)) return Fail("truncated tag");
    switch (tag) {
#define MEMSTEP_CHECK_CASE(Name, t, doc, fields)                \
  case fmt::t: {                                                \
    fmt::Name##Record r;                                        \
    if (!fmt::Decode(d, &r)) return Fail("bad " doc " record"); \
    if (!Take(r, s)) return false;                              \
    break;                                                      \
  }
      MEMSTEP_RECORDS(MEMSTEP_CHECK_CASE)
#undef MEMSTEP_CHECK_CASE
      default:
        return Fail("unknown tag");
    }
  }
  return true;
}

bool Check(const std::vector<uint8_t>& file, Stats* s) {
  if (file.size() < sizeof(fmt::FileHeader) + 4) return Fail("file too short");
  fmt::FileHeader h;
  std::memcpy(&h, file.data(), sizeof(h));
  if (std::memcmp(h.magic, fmt::kFileMagic, 8) != 0) return Fail("bad magic");
  if (h.version_major != fmt::kVersionMajor) return Fail("bad version");
  if (h.header_len > file.size() || h.header_len < sizeof(h) + 4) return Fail("bad header_len");
  uint32_t crc;
  std::memcpy(&crc, file.data() + h.header_len - 4, 4);
  if (crc != fmt::Crc32c(file.data(), h.header_len - 4)) return Fail("bad header crc");
  s->flags = h.flags;
  s->sample_interval = h.sample_interval;
  // TLVs.
  size_t off = sizeof(h);
  while (off + 6 <= h.header_len - 4) {
    uint16_t type;
    uint32_t len;
    std::memcpy(&type, file.data() + off, 2);
    std::memcpy(&len, file.data() + off + 2, 4);
    if (type == fmt::kTlvEnd) break;
    if (off + 6 + len > h.header_len - 4) return Fail("bad TLV");
    if (type == fmt::kTlvParentTrace) {
      s->parent.assign(reinterpret_cast<const char*>(file.data() + off + 6), len);
    }
    off += 6 + len;
  }
  off = h.header_len;
  std::vector<uint8_t> raw;
  uint32_t expect_seq = 0;
  while (off < file.size()) {
    if (file.size() - off < sizeof(fmt::ChunkHeader)) {
      return g_allow_truncated_tail || Fail("truncated chunk header");
    }
    fmt::ChunkHeader ch;
    std::memcpy(&ch, file.data() + off, sizeof(ch));
    if (ch.magic != fmt::kChunkMagic) return Fail("bad chunk magic");
    if (ch.header_crc32c != fmt::Crc32c(&ch, 32)) return Fail("bad chunk header crc");
    if (ch.seq != expect_seq++) return Fail("chunk seq gap");
    if (ch.raw_len > fmt::kMaxChunkRawLen) return Fail("chunk raw_len too big");
    const uint8_t* payload = file.data() + off + sizeof(ch);
    if (file.size() - off - sizeof(ch) < ch.payload_len) {
      return g_allow_truncated_tail || Fail("truncated chunk payload");
    }
    if (fmt::Crc32c(payload, ch.payload_len) != ch.payload_crc32c) return Fail("bad payload crc");
    if (ch.codec == fmt::kCodecRaw) {
      raw.assign(payload, payload + ch.payload_len);
    } else if (ch.codec == fmt::kCodecZstd) {
      raw.resize(ch.raw_len);
      size_t r = ZSTD_decompress(raw.data(), raw.size(), payload, ch.payload_len);
      if (ZSTD_isError(r) || r != ch.raw_len) return Fail("zstd decompression failed");
    } else {
      return Fail("unknown codec");
    }
    if (!ParseRecords(raw.data(), raw.size(), s)) return false;
    ++s->chunks;
    off += sizeof(ch) + ch.payload_len;
  }
  return true;
}

// Reads the whole file at `path` into *file; false (and perror) when it
// cannot be opened.
bool ReadFile(const char* path, std::vector<uint8_t>* file) {
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) {
    std::perror(path);
    return false;
  }
  uint8_t buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) file->insert(file->end(), buf, buf + n);
  std::fclose(f);
  return true;
}

// The options that change how the file is parsed (before it is).
void ParseModeOptions(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    g_dump |= std::strcmp(argv[i], "--dump") == 0;
    g_allow_truncated_tail |= std::strcmp(argv[i], "--allow-truncated-tail") == 0;
    if (std::strcmp(argv[i], "--expect-planted-top") == 0 && i + 2 < argc) {
      g_planted_size = std::strtoull(argv[i + 2], nullptr, 10);
    }
    if (std::strcmp(argv[i], "--expect-planted-usable") == 0 && i + 2 < argc) {
      g_planted_size = std::strtoull(argv[i + 1], nullptr, 10);
      g_planted_usable = std::strtoull(argv[i + 2], nullptr, 10);
    }
  }
}

void PrintSummary(bool ok, const Stats& s) {
  std::printf(
      "ok=%d chunks=%d allocs=%d frees=%d stacks=%d nonzero_stacks=%d strings=%d mappings=%d "
      "mmaps=%d munmaps=%d mremaps=%d steps=%d stages=%d counters=%d lost=%d notices=%d "
      "trailers=%d clean=%d fork_child=%d epochs=%d alerts=%d snapshots=%d parent=%s\n",
      ok, s.chunks, s.allocs, s.frees, s.stacks, s.nonzero_stacks, s.strings, s.mappings, s.mmaps,
      s.munmaps, s.mremaps, s.steps, s.stages, s.counters, s.lost, s.notices, s.trailers, s.clean,
      (s.flags & fmt::kFlagForkChild) != 0, s.epochs, s.alerts, s.snapshots,
      s.parent.empty() ? "-" : s.parent.c_str());
}

// --expect-planted-top STAGE SIZE: every stage-peak snapshot of STAGE has a
// planted stack on top.
bool PlantedTopOk(const Stats& s, const std::string& stage) {
  int n = 0, good = 0;
  for (auto& [name, top] : s.snapshot_tops) {
    if (name != stage) continue;
    ++n;
    good += g_planted_stacks.count(top) != 0;
  }
  std::printf("planted_top %s: %d of %d stage-peak snapshots\n", stage.c_str(), good, n);
  return !(n == 0 || good != n) || Fail("stage-peak snapshot top is not the planted site");
}

// Checks the expectation option at argv[*i] (advancing *i over its
// arguments); clears *ok when the trace does not meet it. False: an unknown
// option.
bool CheckExpectation(int argc, char** argv, int* i, const Stats& s, bool* ok) {
  std::string a = argv[*i];
  auto need = [&](const char* what, long have) {
    long want = std::atol(argv[++*i]);
    if (have < want) {
      std::fprintf(stderr, "trace_check: %s=%ld < %ld\n", what, have, want);
      *ok = false;
    }
  };
  const bool arg = *i + 1 < argc;
  if (a == "--dump" || a == "--allow-truncated-tail") {
    return true;
  } else if (a == "--expect-trailer") {
    if (s.trailers != 1 || !s.clean) *ok = Fail("no clean trailer");
  } else if (a == "--expect-fork-child") {
    if ((s.flags & fmt::kFlagForkChild) == 0 || s.parent.empty()) *ok = Fail("not a fork child");
  } else if (a == "--min-allocs" && arg) {
    need("allocs", s.allocs);
  } else if (a == "--min-frees" && arg) {
    need("frees", s.frees);
  } else if (a == "--min-stacks" && arg) {
    need("nonzero_stacks", s.nonzero_stacks);
  } else if (a == "--min-steps" && arg) {
    need("steps", s.steps);
  } else if (a == "--min-mappings" && arg) {
    need("mappings", s.mappings);
  } else if (a == "--min-epochs" && arg) {
    need("epochs", s.epochs);
  } else if (a == "--min-snapshots" && arg) {
    need("snapshots", s.snapshots);
  } else if (a == "--min-notices" && arg) {
    need("notices", s.notices);
  } else if (a == "--expect-interval" && arg) {
    unsigned long long want = std::strtoull(argv[++*i], nullptr, 10);
    if (s.sample_interval != want) {
      std::fprintf(stderr, "trace_check: sample_interval=%llu != %llu\n",
                   (unsigned long long)s.sample_interval, want);
      *ok = false;
    }
  } else if (a == "--expect-alerts" && arg) {
    long want = std::atol(argv[++*i]);
    if (s.alerts != want) {
      std::fprintf(stderr, "trace_check: alerts=%d != %ld\n", s.alerts, want);
      *ok = false;
    }
  } else if (a == "--expect-planted-top" && *i + 2 < argc) {
    std::string stage = argv[++*i];
    ++*i;
    if (!PlantedTopOk(s, stage)) *ok = false;
  } else if (a == "--expect-planted-usable" && *i + 2 < argc) {
    *i += 2;
    std::printf("planted_usable: %d snapshot entries, %d not count x %llu\n", g_usable_entries,
                g_usable_wrong, (ull)g_planted_usable);
    if (g_usable_entries == 0 || g_usable_wrong != 0) {
      *ok = Fail("planted site's snapshot bytes are not its blocks' usable size");
    }
  } else if (a == "--min-mmaps" && arg) {
    need("mmaps", s.mmaps);
  } else if (a == "--expect-stage" && arg) {
    std::string name = argv[++*i];
    bool found = false;
    for (auto& st : s.stage_names) found |= st == name;
    if (!found) *ok = Fail("stage name not found");
  } else {
    std::fprintf(stderr, "trace_check: unknown option %s\n", a.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: trace_check FILE [options]\n");
    return 2;
  }
  std::vector<uint8_t> file;
  if (!ReadFile(argv[1], &file)) return 1;
  ParseModeOptions(argc, argv);
  Stats s;
  bool ok = Check(file, &s);
  PrintSummary(ok, s);
  for (int i = 2; i < argc; ++i) {
    if (!CheckExpectation(argc, argv, &i, s, &ok)) return 2;
  }
  return ok ? 0 : 1;
}
