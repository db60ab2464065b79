// trace_check: a small validator of the files libmemstep.so writes, used by
// the preload behaviour tests (the full reader lives in src/reader).
//
// Usage: trace_check FILE [--expect-trailer] [--expect-fork-child]
//                         [--min-allocs N] [--min-stacks N] [--min-steps N]
//                         [--min-mappings N] [--expect-stage NAME] [--dump]
//                         [--allow-truncated-tail] [--min-epochs N]
//                         [--expect-alerts N] [--min-snapshots N] [--min-notices N]
//                         [--expect-planted-top STAGE SIZE]
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

namespace fmt = memstep::format;

namespace {

struct Stats {
  int chunks = 0, allocs = 0, frees = 0, mmaps = 0, munmaps = 0, mremaps = 0, stacks = 0,
      strings = 0, mappings = 0, steps = 0, stages = 0, counters = 0, lost = 0, notices = 0,
      trailers = 0, nonzero_stacks = 0, epochs = 0, alerts = 0, snapshots = 0;
  bool clean = false;
  uint32_t flags = 0;
  std::string parent;
  std::vector<std::string> stage_names;
  // Stage-peak snapshots as (stage name, top stack).
  std::vector<std::pair<std::string, uint64_t>> snapshot_tops;
};

std::set<uint64_t> g_stacks, g_strings, g_maps;
bool g_dump = false;
bool g_allow_truncated_tail = false;  // a kill -9 may cut the last write
uint64_t g_planted_size = 0;            // --expect-planted-top: allocation size
std::set<uint64_t> g_planted_stacks;    // stacks of allocations of that size
std::vector<std::pair<uint64_t, std::string>> g_string_text;

bool Fail(const char* what) {
  std::fprintf(stderr, "trace_check: %s\n", what);
  return false;
}

bool Fields(fmt::RecordDecoder& d, int n, uint64_t* out) {
  for (int i = 0; i < n; ++i) {
    if (!d.U(&out[i])) return false;
  }
  return true;
}

bool StringDefined(uint64_t id) { return id == 0 || g_strings.count(id) != 0; }

std::string StringText(uint64_t id) {
  for (auto& [sid, text] : g_string_text) {
    if (sid == id) return text;
  }
  return "-";
}

bool ParseRecords(const uint8_t* p, size_t n, Stats* s) {
  fmt::RecordDecoder d(p, n);
  uint64_t f[16];
  while (!d.AtEnd()) {
    uint8_t tag;
    if (!d.Byte(&tag)) return Fail("truncated tag");
    switch (tag) {
      case fmt::kTagString: {
        const uint8_t* b;
        if (!Fields(d, 2, f) || !d.Bytes(f[1], &b)) return Fail("bad STRING");
        g_strings.insert(f[0]);
        g_string_text.emplace_back(f[0], std::string(reinterpret_cast<const char*>(b), f[1]));
        ++s->strings;
        break;
      }
      case fmt::kTagMapping: {
        const uint8_t* b;
        if (!Fields(d, 7, f) || !d.Bytes(f[6], &b)) return Fail("bad MAPPING");
        if (!StringDefined(f[5])) return Fail("MAPPING path before its STRING");
        if (f[2] <= f[1] && f[2] != 0) {
        }
        if (f[3] <= f[2]) return Fail("MAPPING end <= start");
        if (g_dump) {
          std::printf("MAPPING id=%llu %s\n", (unsigned long long)f[0], StringText(f[5]).c_str());
        }
        g_maps.insert(f[0]);
        ++s->mappings;
        break;
      }
      case fmt::kTagMappingGone:
        if (!Fields(d, 2, f)) return Fail("bad MAPPING_GONE");
        if (!g_maps.count(f[0])) return Fail("MAPPING_GONE of unknown id");
        break;
      case fmt::kTagStack: {
        if (!Fields(d, 2, f) || f[1] > fmt::kMaxFrames) return Fail("bad STACK");
        for (uint64_t i = 0; i < f[1]; ++i) {
          uint64_t ip;
          if (!d.U(&ip)) return Fail("bad STACK ip");
        }
        g_stacks.insert(f[0]);
        ++s->stacks;
        break;
      }
      case fmt::kTagAlloc:
        if (!Fields(d, 10, f)) return Fail("bad ALLOC");
        if (f[3] != 0 && !g_stacks.count(f[3])) return Fail("ALLOC stack before its STACK");
        if (!StringDefined(f[9])) return Fail("ALLOC stage before its STRING");
        if (f[3] != 0) ++s->nonzero_stacks;
        if (g_planted_size != 0 && f[5] == g_planted_size) g_planted_stacks.insert(f[3]);
        ++s->allocs;
        break;
      case fmt::kTagFree:
        if (!Fields(d, 4, f)) return Fail("bad FREE");
        ++s->frees;
        break;
      case fmt::kTagMmap:
        if (!Fields(d, 10, f)) return Fail("bad MMAP");
        if (f[3] != 0 && !g_stacks.count(f[3])) return Fail("MMAP stack before its STACK");
        ++s->mmaps;
        break;
      case fmt::kTagMunmap:
        if (!Fields(d, 5, f)) return Fail("bad MUNMAP");
        ++s->munmaps;
        break;
      case fmt::kTagMremap:
        if (!Fields(d, 10, f)) return Fail("bad MREMAP");
        ++s->mremaps;
        break;
      case fmt::kTagDevAlloc:
        if (!Fields(d, 12, f)) return Fail("bad DEV_ALLOC");
        if (f[3] != 0 && !g_stacks.count(f[3])) return Fail("DEV_ALLOC stack before its STACK");
        if (!StringDefined(f[11])) return Fail("DEV_ALLOC stage before its STRING");
        break;
      case fmt::kTagDevFree:
        if (!Fields(d, 8, f)) return Fail("bad DEV_FREE");
        break;
      case fmt::kTagDevFail:
        if (!Fields(d, 11, f)) return Fail("bad DEV_FAIL");
        if (f[3] != 0 && !g_stacks.count(f[3])) return Fail("DEV_FAIL stack before its STACK");
        if (!StringDefined(f[10])) return Fail("DEV_FAIL stage before its STRING");
        break;
      case fmt::kTagDevInfo:
        if (!Fields(d, 8, f)) return Fail("bad DEV_INFO");
        break;
      case fmt::kTagStep: {
        fmt::Counters c;
        if (!Fields(d, 5, f) || !d.GetCounters(&c)) return Fail("bad STEP");
        if (c.peak_bytes < c.live_bytes) return Fail("STEP peak < live");
        if (g_dump) {
          std::printf(
              "STEP step=%llu phase=%llu live=%llu peak=%llu allocs=%llu frees=%llu mmap=%llu "
              "rss=%llu\n",
              (unsigned long long)f[3], (unsigned long long)f[4], (unsigned long long)c.live_bytes,
              (unsigned long long)c.peak_bytes, (unsigned long long)c.alloc_count,
              (unsigned long long)c.free_count, (unsigned long long)c.mmap_live_bytes,
              (unsigned long long)c.rss_bytes);
        }
        ++s->steps;
        break;
      }
      case fmt::kTagStage: {
        fmt::Counters c;
        if (!Fields(d, 6, f) || !d.GetCounters(&c)) return Fail("bad STAGE");
        if (!StringDefined(f[3])) return Fail("STAGE name before its STRING");
        for (auto& [id, text] : g_string_text) {
          if (id != f[3]) continue;
          s->stage_names.push_back(text);
          if (g_dump) {
            std::printf("STAGE %s step=%llu phase=%llu live=%llu peak=%llu\n", text.c_str(),
                        (unsigned long long)f[4], (unsigned long long)f[5],
                        (unsigned long long)c.live_bytes, (unsigned long long)c.peak_bytes);
          }
        }
        ++s->stages;
        break;
      }
      case fmt::kTagCounter: {
        int64_t v;
        if (!Fields(d, 4, f) || !d.S(&v)) return Fail("bad COUNTER");
        if (!StringDefined(f[3])) return Fail("COUNTER name before its STRING");
        if (g_dump) std::printf("COUNTER %s=%lld\n", StringText(f[3]).c_str(), (long long)v);
        ++s->counters;
        break;
      }
      case fmt::kTagRate:
        if (!Fields(d, 2, f)) return Fail("bad RATE");
        break;
      case fmt::kTagEpoch:
        if (!Fields(d, 4, f)) return Fail("bad EPOCH");
        if (g_dump) std::printf("EPOCH epoch=%llu\n", (unsigned long long)f[3]);
        ++s->epochs;
        break;
      case fmt::kTagAlert:
        if (!Fields(d, 8, f)) return Fail("bad ALERT");
        if (f[3] < fmt::kAlertGrowth || f[3] > fmt::kAlertDevicePeak) return Fail("ALERT rule");
        if (!StringDefined(f[6])) return Fail("ALERT stage before its STRING");
        if (f[7] != 0 && !g_stacks.count(f[7])) return Fail("ALERT site before its STACK");
        if (g_dump) {
          std::printf("ALERT step=%llu rule=%llu value=%llu threshold=%llu stage=%s site=%llu\n",
                      (unsigned long long)f[2], (unsigned long long)f[3],
                      (unsigned long long)f[4], (unsigned long long)f[5],
                      StringText(f[6]).c_str(), (unsigned long long)f[7]);
        }
        ++s->alerts;
        break;
      case fmt::kTagSiteSnapshot: {
        if (!Fields(d, 6, f)) return Fail("bad SITE_SNAPSHOT");
        if (f[3] > fmt::kSnapshotStepEnd) return Fail("SITE_SNAPSHOT cause");
        if (!StringDefined(f[4])) return Fail("SITE_SNAPSHOT stage before its STRING");
        if (f[5] > 4096) return Fail("SITE_SNAPSHOT n");
        uint64_t top = 0, top_bytes = 0, prev = UINT64_MAX;
        for (uint64_t i = 0; i < f[5]; ++i) {
          uint64_t e[3];
          if (!Fields(d, 3, e)) return Fail("bad SITE_SNAPSHOT entry");
          if (e[0] != 0 && !g_stacks.count(e[0])) return Fail("SITE_SNAPSHOT stack before STACK");
          if (e[1] > prev) return Fail("SITE_SNAPSHOT not sorted by bytes");
          prev = e[1];
          if (i == 0) top = e[0], top_bytes = e[1];
        }
        std::string stage = StringText(f[4]);
        if (f[3] == fmt::kSnapshotStagePeak && f[5] > 0) s->snapshot_tops.emplace_back(stage, top);
        if (g_dump) {
          std::printf("SNAPSHOT step=%llu cause=%llu stage=%s n=%llu top=%llu top_bytes=%llu\n",
                      (unsigned long long)f[2], (unsigned long long)f[3], stage.c_str(),
                      (unsigned long long)f[5], (unsigned long long)top,
                      (unsigned long long)top_bytes);
        }
        ++s->snapshots;
        break;
      }
      case fmt::kTagLost:
        if (!Fields(d, 4, f)) return Fail("bad LOST");
        ++s->lost;
        break;
      case fmt::kTagNotice:
        if (!Fields(d, 3, f)) return Fail("bad NOTICE");
        if (g_dump) std::printf("NOTICE code=%llu %s\n", (unsigned long long)f[1],
                                StringText(f[2]).c_str());
        ++s->notices;
        break;
      case fmt::kTagTrailer: {
        fmt::Counters c;
        if (!Fields(d, 1, f) || !d.GetCounters(&c) || !d.U(&f[1])) return Fail("bad TRAILER");
        s->clean = f[1] == 1;
        ++s->trailers;
        break;
      }
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: trace_check FILE [options]\n");
    return 2;
  }
  FILE* f = std::fopen(argv[1], "rb");
  if (f == nullptr) {
    std::perror(argv[1]);
    return 1;
  }
  std::vector<uint8_t> file;
  uint8_t buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) file.insert(file.end(), buf, buf + n);
  std::fclose(f);
  for (int i = 2; i < argc; ++i) {
    g_dump |= std::strcmp(argv[i], "--dump") == 0;
    g_allow_truncated_tail |= std::strcmp(argv[i], "--allow-truncated-tail") == 0;
    if (std::strcmp(argv[i], "--expect-planted-top") == 0 && i + 2 < argc) {
      g_planted_size = std::strtoull(argv[i + 2], nullptr, 10);
    }
  }
  Stats s;
  bool ok = Check(file, &s);
  std::printf(
      "ok=%d chunks=%d allocs=%d frees=%d stacks=%d nonzero_stacks=%d strings=%d mappings=%d "
      "mmaps=%d munmaps=%d mremaps=%d steps=%d stages=%d counters=%d lost=%d notices=%d "
      "trailers=%d clean=%d fork_child=%d epochs=%d alerts=%d snapshots=%d parent=%s\n",
      ok, s.chunks, s.allocs, s.frees, s.stacks, s.nonzero_stacks, s.strings, s.mappings, s.mmaps,
      s.munmaps, s.mremaps, s.steps, s.stages, s.counters, s.lost, s.notices, s.trailers, s.clean,
      (s.flags & fmt::kFlagForkChild) != 0, s.epochs, s.alerts, s.snapshots, s.parent.empty() ? "-" : s.parent.c_str());
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto need = [&](const char* what, long have) {
      long want = std::atol(argv[++i]);
      if (have < want) {
        std::fprintf(stderr, "trace_check: %s=%ld < %ld\n", what, have, want);
        ok = false;
      }
    };
    if (a == "--dump" || a == "--allow-truncated-tail") {
      continue;
    } else if (a == "--expect-trailer") {
      if (s.trailers != 1 || !s.clean) ok = Fail("no clean trailer");
    } else if (a == "--expect-fork-child") {
      if ((s.flags & fmt::kFlagForkChild) == 0 || s.parent.empty()) ok = Fail("not a fork child");
    } else if (a == "--min-allocs" && i + 1 < argc) {
      need("allocs", s.allocs);
    } else if (a == "--min-frees" && i + 1 < argc) {
      need("frees", s.frees);
    } else if (a == "--min-stacks" && i + 1 < argc) {
      need("nonzero_stacks", s.nonzero_stacks);
    } else if (a == "--min-steps" && i + 1 < argc) {
      need("steps", s.steps);
    } else if (a == "--min-mappings" && i + 1 < argc) {
      need("mappings", s.mappings);
    } else if (a == "--min-epochs" && i + 1 < argc) {
      need("epochs", s.epochs);
    } else if (a == "--min-snapshots" && i + 1 < argc) {
      need("snapshots", s.snapshots);
    } else if (a == "--min-notices" && i + 1 < argc) {
      need("notices", s.notices);
    } else if (a == "--expect-alerts" && i + 1 < argc) {
      long want = std::atol(argv[++i]);
      if (s.alerts != want) {
        std::fprintf(stderr, "trace_check: alerts=%d != %ld\n", s.alerts, want);
        ok = false;
      }
    } else if (a == "--expect-planted-top" && i + 2 < argc) {
      std::string stage = argv[++i];
      ++i;
      int n = 0, good = 0;
      for (auto& [name, top] : s.snapshot_tops) {
        if (name != stage) continue;
        ++n;
        good += g_planted_stacks.count(top) != 0;
      }
      std::printf("planted_top %s: %d of %d stage-peak snapshots\n", stage.c_str(), good, n);
      if (n == 0 || good != n) ok = Fail("stage-peak snapshot top is not the planted site");
    } else if (a == "--min-mmaps" && i + 1 < argc) {
      need("mmaps", s.mmaps);
    } else if (a == "--expect-stage" && i + 1 < argc) {
      std::string name = argv[++i];
      bool found = false;
      for (auto& st : s.stage_names) found |= st == name;
      if (!found) ok = Fail("stage name not found");
    } else {
      std::fprintf(stderr, "trace_check: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  return ok ? 0 : 1;
}
