#include "src/reader/reader.h"

#include <cstring>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/format/records.h"
#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"

namespace memstep::reader {
namespace {

using ::testing::HasSubstr;

format::Counters MakeCounters(uint64_t base) {
  return format::Counters{base + 1, base + 2, base + 3, base + 4,
                          base + 5, base + 6, base + 7, base + 8};
}

bool SameCounters(const format::Counters& a, const format::Counters& b) {
  return memcmp(&a, &b, sizeof(a)) == 0;
}

// A small trace using every record type, in two chunks.
TraceBuilder AllRecords(uint8_t codec) {
  TraceHeaderInfo info;
  info.pid = 4242;
  info.ppid = 7;
  info.sample_interval = 524288;
  info.tlvs = {
      {format::kTlvCmdline, std::string("python\0train.py\0", 16)},
      {format::kTlvHostname, "node1"},
      {format::kTlvRankEnv, std::string("RANK=3\0LOCAL_RANK=1\0", 20)},
      {0x7777, "unknown tlv payload"},
      {format::kTlvAllocator, "glibc"},
      {format::kTlvProfiler, reader::ProfilerTlv(0x7f0000000000, 0x7f0000200000, "\xbe\xef")}};
  TraceBuilder b(info, codec);
  b.String(1, "/usr/lib/libfoo.so");
  b.String(2, "forward");
  b.String(3, "torch.allocated");
  b.String(4, "sampler stopped");
  b.Mapping(1, 5, 0x400000, 0x500000, 0x3f0000, 1, std::string("\x01\x02\xab", 3));
  b.Stack(7, {0x401000, 0x402000, 0xffffffffffffffffull});
  b.Alloc(10, 7, 0x1000, 4096, 524288, format::kKindCalloc, 3, 2, 99);
  b.Free(11, 0x1000, 98);
  b.Mmap(12, 7, 0x7f0000000000, 1 << 20, 3, 2);
  b.Flush(format::kChunkData);
  b.Munmap(13, 0x7f0000000000, 4096);
  b.Mremap(14, 7, 0x7f0000001000, 8192, 0x7f0000100000, 16384);
  b.Step(15, 3, 0, MakeCounters(0));
  b.Stage(16, 2, 3, 1, MakeCounters(100));
  b.Counter(17, 3, -12345);
  b.Rate(18, 131072);
  b.Lost(19, 5, 500, 1);
  b.Notice(20, 2, 4);
  b.MappingGone(1, 21);
  b.Trailer(22, MakeCounters(1000), true);
  return b;
}

// A profiler TLV too short, or with an empty range, is ignored (not an error).
TEST(ReaderTest, MalformedProfilerTlvIgnored) {
  for (const std::string& value : {std::string(8, '\x01'), ProfilerTlv(0x2000, 0x2000, ""),
                                   ProfilerTlv(0x3000, 0x1000, "x")}) {
    TraceHeaderInfo info;
    info.tlvs = {{format::kTlvProfiler, value}};
    TraceBuilder b(info);
    const std::vector<uint8_t>& bytes = b.Finish();
    absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->profiler_start, 0u);
    EXPECT_EQ(t->profiler_end, 0u);
    EXPECT_EQ(t->profiler_build_id, "");
  }
}

class RoundTripTest : public ::testing::TestWithParam<uint8_t> {};

TEST_P(RoundTripTest, EveryRecordType) {
  TraceBuilder b = AllRecords(GetParam());
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->truncated);
  EXPECT_EQ(t->chunks, 2u);
  EXPECT_EQ(t->header.pid, 4242u);
  EXPECT_EQ(t->header.ppid, 7u);
  EXPECT_EQ(t->header.sample_interval, 524288u);
  EXPECT_EQ(t->cmdline, std::string("python\0train.py\0", 16));
  EXPECT_EQ(t->hostname, "node1");
  EXPECT_EQ(t->RankValue("RANK"), "3");
  EXPECT_EQ(t->RankValue("LOCAL_RANK"), "1");
  EXPECT_EQ(t->RankValue("WORLD_SIZE"), "");
  EXPECT_EQ(t->allocator, "glibc");
  EXPECT_EQ(t->profiler_start, 0x7f0000000000u);
  EXPECT_EQ(t->profiler_end, 0x7f0000200000u);
  EXPECT_EQ(t->profiler_build_id, "\xbe\xef");
  EXPECT_EQ(t->String(2), "forward");
  EXPECT_EQ(t->unknown_refs, 0u);

  ASSERT_EQ(t->mappings.size(), 1u);
  EXPECT_EQ(t->mappings[0].path, "/usr/lib/libfoo.so");
  EXPECT_EQ(t->mappings[0].start, 0x400000u);
  EXPECT_EQ(t->mappings[0].end, 0x500000u);
  EXPECT_EQ(t->mappings[0].load_bias, 0x3f0000u);
  EXPECT_EQ(t->mappings[0].build_id, std::string("\x01\x02\xab", 3));
  EXPECT_EQ(t->mappings[0].gone_ts, 21u);
  ASSERT_TRUE(t->stacks.contains(7));
  EXPECT_EQ(t->stacks.at(7), (std::vector<uint64_t>{0x401000, 0x402000, 0xffffffffffffffffull}));

  ASSERT_EQ(t->events.size(), 8u);
  const Event& a = t->events[0];
  EXPECT_EQ(a.tag, format::kTagAlloc);
  EXPECT_EQ(a.ts, 10u);
  EXPECT_EQ(a.seq, 0u);
  EXPECT_EQ(a.tid, 99u);
  EXPECT_EQ(a.stack, 7u);
  EXPECT_EQ(a.addr, 0x1000u);
  EXPECT_EQ(a.size, 4096u);
  EXPECT_EQ(a.interval, 524288u);
  EXPECT_EQ(a.kind, format::kKindCalloc);
  EXPECT_EQ(a.step, 3u);
  EXPECT_EQ(a.str, 2u);
  EXPECT_EQ(t->events[1].tag, format::kTagFree);
  EXPECT_EQ(t->events[1].addr, 0x1000u);
  EXPECT_EQ(t->events[1].tid, 98u);
  EXPECT_EQ(t->events[2].tag, format::kTagMmap);
  EXPECT_EQ(t->events[2].size, 1u << 20);
  EXPECT_EQ(t->events[3].tag, format::kTagMunmap);
  EXPECT_EQ(t->events[3].size, 4096u);
  const Event& r = t->events[4];
  EXPECT_EQ(r.tag, format::kTagMremap);
  EXPECT_EQ(r.addr, 0x7f0000001000u);
  EXPECT_EQ(r.size, 8192u);
  EXPECT_EQ(r.new_addr, 0x7f0000100000u);
  EXPECT_EQ(r.new_len, 16384u);
  EXPECT_EQ(t->events[5].tag, format::kTagStep);
  EXPECT_EQ(t->events[5].step, 3u);
  EXPECT_EQ(t->events[5].phase, 0);
  EXPECT_TRUE(SameCounters(t->counters[t->events[5].counters], MakeCounters(0)));
  EXPECT_EQ(t->events[6].tag, format::kTagStage);
  EXPECT_EQ(t->events[6].str, 2u);
  EXPECT_EQ(t->events[6].phase, 1);
  EXPECT_TRUE(SameCounters(t->counters[t->events[6].counters], MakeCounters(100)));
  EXPECT_EQ(t->events[7].tag, format::kTagCounter);
  EXPECT_EQ(t->events[7].value, -12345);

  ASSERT_EQ(t->rates.size(), 1u);
  EXPECT_EQ(t->rates[0].interval, 131072u);
  ASSERT_EQ(t->lost.size(), 1u);
  EXPECT_EQ(t->lost[0].records, 5u);
  EXPECT_EQ(t->lost[0].bytes, 500u);
  ASSERT_EQ(t->notices.size(), 1u);
  EXPECT_EQ(t->notices[0].message, "sampler stopped");
  ASSERT_TRUE(t->has_trailer);
  EXPECT_TRUE(t->trailer.clean_exit);
  EXPECT_TRUE(SameCounters(t->trailer.counters, MakeCounters(1000)));
  EXPECT_EQ(t->max_ts, 22u);
}

INSTANTIATE_TEST_SUITE_P(Codecs, RoundTripTest,
                         ::testing::Values(format::kCodecRaw, format::kCodecZstd));

TEST_P(RoundTripTest, StepAwareRecords) {
  TraceBuilder b({}, GetParam());
  b.String(2, "forward");
  b.Stack(7, {0x401000});
  b.Stack(8, {0x402000, 0x403000});
  b.Epoch(5, 2);
  b.Step(6, 10, 0, MakeCounters(0));
  b.Alert(7, 10, format::kAlertStagePeak, 3u << 30, 2u << 30, 2, 7);
  b.SiteSnapshot(8, 10, format::kSnapshotStagePeak, 2, {{7, 1u << 20, 16}, {8, 12345678901ull, 3}});
  b.Flush();
  b.Alert(9, 11, format::kAlertGrowth, 100, 50);
  b.SiteSnapshot(10, 11, format::kSnapshotRunPeak, 0, {});
  b.Epoch(11, 3);
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->truncated);
  EXPECT_EQ(t->unknown_refs, 0u);
  ASSERT_EQ(t->events.size(), 3u);
  EXPECT_EQ(t->events[0].tag, format::kTagEpoch);
  EXPECT_EQ(t->events[0].step, 2u);
  EXPECT_EQ(t->events[0].ts, 5u);
  EXPECT_EQ(t->events[1].tag, format::kTagStep);
  EXPECT_EQ(t->events[2].tag, format::kTagEpoch);
  EXPECT_EQ(t->events[2].step, 3u);

  ASSERT_EQ(t->alerts.size(), 2u);
  const Alert& a = t->alerts[0];
  EXPECT_EQ(a.ts, 7u);
  EXPECT_EQ(a.step, 10u);
  EXPECT_EQ(a.rule, format::kAlertStagePeak);
  EXPECT_EQ(a.value, 3u << 30);
  EXPECT_EQ(a.threshold, 2u << 30);
  EXPECT_EQ(a.stage, "forward");
  EXPECT_EQ(a.site_stack, 7u);
  EXPECT_EQ(t->alerts[1].rule, format::kAlertGrowth);
  EXPECT_EQ(t->alerts[1].stage, "");
  EXPECT_EQ(t->alerts[1].site_stack, 0u);
  EXPECT_LT(t->alerts[0].seq, t->alerts[1].seq);

  ASSERT_EQ(t->snapshots.size(), 2u);
  const SiteSnapshot& s = t->snapshots[0];
  EXPECT_EQ(s.step, 10u);
  EXPECT_EQ(s.cause, format::kSnapshotStagePeak);
  EXPECT_EQ(s.stage, "forward");
  ASSERT_EQ(s.sites.size(), 2u);
  EXPECT_EQ(s.sites[0].stack, 7u);
  EXPECT_EQ(s.sites[0].live_bytes, 1u << 20);
  EXPECT_EQ(s.sites[0].live_count, 16u);
  EXPECT_EQ(s.sites[1].stack, 8u);
  EXPECT_EQ(s.sites[1].live_bytes, 12345678901ull);
  EXPECT_EQ(t->snapshots[1].cause, format::kSnapshotRunPeak);
  EXPECT_TRUE(t->snapshots[1].sites.empty());
  EXPECT_EQ(t->max_ts, 11u);
}

TEST(ReaderTest, SnapshotWithHugeCountIsMalformed) {
  TraceBuilder b({}, format::kCodecRaw);
  b.Epoch(1, 0);
  b.Flush();
  // SITE_SNAPSHOT claiming 2^40 sites in a few bytes.
  b.RawBytes(
      {format::kTagSiteSnapshot, 1, 1, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 1, 1, 1});
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->truncated);
  EXPECT_EQ(t->events.size(), 1u);
  EXPECT_TRUE(t->snapshots.empty());
}

TEST(ReaderTest, UnknownStacksInAlertsAndSnapshotsAreCounted) {
  TraceBuilder b;
  b.Alert(1, 1, format::kAlertPeak, 10, 5, 0, 99);
  b.SiteSnapshot(2, 1, format::kSnapshotStepEnd, 77, {{98, 1, 1}});
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->unknown_refs, 3u);  // stack 99, string 77, stack 98
}

TEST(ReaderTest, DeviceRecordsRoundTrip) {
  TraceBuilder b;
  b.String(2, "forward");
  b.Stack(7, {0x401000});
  b.DevAlloc(5, 7, format::kDevPool, 1, 0x7f00dead0000, 3 << 20, format::kApiCudaMallocAsync, 0xabc,
             4, 2, 9);
  b.DevFree(6, format::kDevPool, 1, 0x7f00dead0000, 3 << 20, format::kApiCudaFreeAsync);
  b.DevFail(7, 7, format::kDevDevice, -1, uint64_t{80} << 30, format::kApiCuMemAlloc, 2, 5, 2);
  b.DevInfo(8, 5, 0, 1000, 8000, 300, 200);
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->truncated);
  ASSERT_EQ(t->events.size(), 3u);
  const Event& a = t->events[0];
  EXPECT_EQ(a.tag, format::kTagDevAlloc);
  EXPECT_EQ(a.kind, format::kDevPool);
  EXPECT_EQ(a.device, 1);
  EXPECT_EQ(a.addr, 0x7f00dead0000u);
  EXPECT_EQ(a.size, 3u << 20);
  EXPECT_EQ(a.api, format::kApiCudaMallocAsync);
  EXPECT_EQ(a.aux, 0xabcu);
  EXPECT_EQ(a.step, 4u);
  EXPECT_EQ(t->String(a.str), "forward");
  EXPECT_EQ(a.tid, 9u);
  EXPECT_EQ(t->events[1].tag, format::kTagDevFree);
  EXPECT_EQ(t->events[1].size, 3u << 20);
  const Event& f = t->events[2];
  EXPECT_EQ(f.tag, format::kTagDevFail);
  EXPECT_EQ(f.device, -1);
  EXPECT_EQ(f.size, uint64_t{80} << 30);
  EXPECT_EQ(f.value, 2);
  EXPECT_EQ(f.stack, 7u);
  ASSERT_EQ(t->device_info.size(), 1u);
  EXPECT_EQ(t->device_info[0].step, 5u);
  EXPECT_EQ(t->device_info[0].free_bytes, 1000u);
  EXPECT_EQ(t->device_info[0].total_bytes, 8000u);
  EXPECT_EQ(t->device_info[0].pool_reserved, 300u);
  EXPECT_EQ(t->device_info[0].pool_used, 200u);
  EXPECT_EQ(t->unknown_refs, 0u);
  EXPECT_STREQ(format::DeviceKindName(format::kDevVmm), "device_vmm");
}

TEST(ReaderTest, Crc32cCheckValue) {
  EXPECT_EQ(format::Crc32c("123456789", 9), 0xE3069283u);  // as docs/format.md states
}

TEST(ReaderTest, TruncationAtEveryOffsetKeepsCompleteChunks) {
  TraceBuilder b = AllRecords(format::kCodecZstd);
  const std::vector<uint8_t> bytes = b.Finish();
  const std::vector<size_t> chunks = b.chunk_offsets();
  ASSERT_EQ(chunks.size(), 2u);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);  // exact size for ASan
    absl::StatusOr<Trace> t = ParseTrace(prefix.data(), prefix.size());
    if (n < b.header_len()) {
      EXPECT_FALSE(t.ok()) << n;
      continue;
    }
    ASSERT_TRUE(t.ok()) << n << ": " << t.status();
    const uint64_t complete = n >= chunks[1] ? 1 : 0;
    EXPECT_EQ(t->chunks, complete) << n;
    EXPECT_EQ(t->events.size(), complete ? 3u : 0u) << n;
    const bool at_boundary = n == chunks[0] || n == chunks[1];
    EXPECT_EQ(t->truncated, !at_boundary) << n;
    if (!at_boundary) {
      EXPECT_EQ(t->truncated_at_offset, complete ? chunks[1] : chunks[0]) << n;
      ASSERT_FALSE(t->warnings.empty());
      EXPECT_THAT(t->warnings.back(), HasSubstr("truncated at offset"));
    }
  }
}

TEST(ReaderTest, PayloadCrcMismatchStopsAtThatChunk) {
  TraceBuilder b = AllRecords(format::kCodecRaw);
  std::vector<uint8_t> bytes = b.Finish();
  bytes[b.chunk_offsets()[1] + sizeof(format::ChunkHeader) + 3] ^= 0x40;
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->truncated);
  EXPECT_EQ(t->truncated_at_offset, b.chunk_offsets()[1]);
  EXPECT_EQ(t->chunks, 1u);
  EXPECT_EQ(t->events.size(), 3u);
  EXPECT_FALSE(t->has_trailer);
  EXPECT_THAT(t->warnings.back(), HasSubstr("payload CRC mismatch"));
}

TEST(ReaderTest, ChunkHeaderCrcMismatchStops) {
  TraceBuilder b = AllRecords(format::kCodecZstd);
  std::vector<uint8_t> bytes = b.Finish();
  bytes[b.chunk_offsets()[0] + 12] ^= 1;  // seq
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->truncated);
  EXPECT_EQ(t->truncated_at_offset, b.chunk_offsets()[0]);
  EXPECT_EQ(t->chunks, 0u);
}

TEST(ReaderTest, MalformedRecordInValidChunkDropsTheWholeChunk) {
  TraceBuilder b({}, format::kCodecRaw);
  b.String(1, "x");
  b.Flush();
  b.Alloc(1, 0, 0x10, 16);
  b.RawBytes({0x10, 0x80});  // ALLOC whose first varint never ends
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->truncated);
  EXPECT_EQ(t->chunks, 1u);
  EXPECT_TRUE(t->events.empty());
  EXPECT_EQ(t->String(1), "x");
}

TEST(ReaderTest, BadMagicIsAnError) {
  std::vector<uint8_t> bytes = AllRecords(format::kCodecZstd).Finish();
  bytes[0] = 'X';
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("not a memstep trace"));
  const char text[] = "hello, this is not a trace at all but it is long enough to be one....";
  t = ParseTrace(reinterpret_cast<const uint8_t*>(text), sizeof(text));
  EXPECT_FALSE(t.ok());
}

TEST(ReaderTest, UnsupportedMajorVersionIsAnError) {
  // An older trace (1.x: DEV_ALLOC had fewer fields) and a newer one.
  for (uint16_t major : {uint16_t{1}, uint16_t(format::kVersionMajor + 1)}) {
    TraceHeaderInfo info;
    info.version_major = major;
    TraceBuilder b(info);
    const std::vector<uint8_t>& bytes = b.Finish();
    absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
    ASSERT_FALSE(t.ok()) << major;
    EXPECT_THAT(std::string(t.status().message()),
                HasSubstr(absl::StrCat("unsupported memstep trace version ", major, ".")));
  }
}

TEST(ReaderTest, HeaderCrcMismatchIsAnError) {
  std::vector<uint8_t> bytes = AllRecords(format::kCodecZstd).Finish();
  bytes[offsetof(format::FileHeader, pid)] ^= 1;
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("CRC mismatch"));
}

TEST(ReaderTest, OutOfOrderSeqIsSorted) {
  TraceBuilder b;
  b.Stack(1, {0x10});
  b.set_next_seq(5);
  b.Alloc(50, 1, 0x5000, 8);
  b.Alloc(51, 1, 0x6000, 8);
  b.Flush();
  b.set_next_seq(2);  // another thread's records, flushed a cycle later
  b.Alloc(20, 1, 0x2000, 8);
  b.Free(21, 0x2000);
  b.Flush();
  b.set_next_seq(7);
  b.Free(70, 0x5000);
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok());
  std::vector<uint64_t> seqs;
  for (const Event& e : t->events) seqs.push_back(e.seq);
  EXPECT_EQ(seqs, (std::vector<uint64_t>{2, 3, 5, 6, 7}));
  EXPECT_EQ(t->events[1].tag, format::kTagFree);
}

// A random value of a random bit length (0 to 64 bits), so that every varint
// length from 1 to 10 bytes occurs.
uint64_t AnyWidth(std::mt19937_64& rng) {
  const int bits = static_cast<int>(rng() % 65);
  return bits == 0 ? 0 : rng() >> (64 - bits);
}

// The decoder's fast path (whole varint records read without a check per
// byte when the chunk has a record's worst case left) gives what the
// checked path gives: 3,000 ALLOC, DEV_ALLOC and COUNTER records with fields
// of every varint length (fixed seed), in chunks whose last records take the
// checked path, read back field by field. Exact: no tolerance.
TEST(ReaderTest, FastDecodePathReadsWhatWasWritten) {
  std::mt19937_64 rng(5);
  TraceBuilder b({}, format::kCodecRaw);
  std::vector<format::AllocRecord> allocs;
  std::vector<format::DevAllocRecord> devs;
  std::vector<format::CounterRecord> counters;
  for (uint64_t seq = 0; seq < 3000; ++seq) {
    switch (rng() % 3) {
      case 0: {
        format::AllocRecord r;
        r.ts = AnyWidth(rng), r.seq = seq, r.tid = static_cast<uint32_t>(AnyWidth(rng));
        r.stack = AnyWidth(rng), r.addr = AnyWidth(rng), r.size = AnyWidth(rng);
        r.interval = AnyWidth(rng), r.kind = static_cast<uint8_t>(rng()), r.step = AnyWidth(rng);
        r.stage_str = 0;
        b.Put(r);
        allocs.push_back(r);
        break;
      }
      case 1: {
        format::DevAllocRecord r;
        r.ts = AnyWidth(rng), r.seq = seq, r.tid = static_cast<uint32_t>(rng());
        r.kind = format::kDevDevice, r.device = static_cast<int32_t>(rng());
        r.addr = AnyWidth(rng), r.size = AnyWidth(rng), r.api = 1, r.aux = AnyWidth(rng);
        r.step = AnyWidth(rng), r.sampled = 1, r.interval = AnyWidth(rng);
        b.Put(r);
        devs.push_back(r);
        break;
      }
      default: {
        format::CounterRecord r;
        r.ts = AnyWidth(rng), r.seq = seq, r.tid = 1, r.name_str = 0;
        r.value = static_cast<int64_t>(rng());
        b.Put(r);
        counters.push_back(r);
        break;
      }
    }
    if (rng() % 500 == 0) b.Flush();
  }
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok());
  ASSERT_FALSE(t->truncated) << t->warnings[0];
  ASSERT_EQ(t->events.size(), 3000u);
  size_t a = 0, d = 0, c = 0;
  for (const Event& e : t->events) {
    if (e.tag == format::kTagAlloc) {
      const format::AllocRecord& r = allocs[a++];
      EXPECT_TRUE(e.ts == r.ts && e.seq == r.seq && e.tid == r.tid && e.stack == r.stack &&
                  e.addr == r.addr && e.size == r.size && e.interval == r.interval &&
                  e.kind == r.kind && e.step == r.step)
          << "ALLOC seq " << r.seq;
    } else if (e.tag == format::kTagDevAlloc) {
      const format::DevAllocRecord& r = devs[d++];
      EXPECT_TRUE(e.ts == r.ts && e.seq == r.seq && e.tid == r.tid && e.device == r.device &&
                  e.addr == r.addr && e.size == r.size && e.aux == r.aux && e.step == r.step &&
                  e.interval == r.interval)
          << "DEV_ALLOC seq " << r.seq;
    } else {
      ASSERT_EQ(e.tag, format::kTagCounter);
      const format::CounterRecord& r = counters[c++];
      EXPECT_TRUE(e.ts == r.ts && e.seq == r.seq && e.value == r.value) << "COUNTER " << r.seq;
    }
  }
}

// Malformed varints far from the chunk's end (the fast path) are rejected
// as the checked path rejects them: a varint of 10 bytes whose last byte
// overflows 64 bits, a varint that never ends, and a tid above 32 bits.
TEST(ReaderTest, FastDecodePathRejectsWhatTheCheckedPathRejects) {
  const std::vector<std::vector<uint8_t>> bad = {
      {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02},        // ts: 65 bits
      {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},  // 11 bytes
      {0x01, 0x01, 0x80, 0x80, 0x80, 0x80, 0x10},                          // ts 1, seq 1, tid 2^32
  };
  for (const std::vector<uint8_t>& fields : bad) {
    for (bool far : {true, false}) {
      TraceBuilder b({}, format::kCodecRaw);
      b.Alloc(1, 0, 0x10, 16);
      b.Flush();
      std::vector<uint8_t> rec = {format::kTagAlloc};
      rec.insert(rec.end(), fields.begin(), fields.end());
      rec.insert(rec.end(), 7, 0x01);  // the ALLOC's other fields
      b.RawBytes(rec);
      if (far) {
        for (int k = 0; k < 40; ++k) b.Free(2, 0x10);  // the fast path's distance
      }
      const std::vector<uint8_t>& bytes = b.Finish();
      absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
      ASSERT_TRUE(t.ok());
      EXPECT_TRUE(t->truncated) << "far " << far << " first byte " << int{fields[0]};
      EXPECT_EQ(t->events.size(), 1u);  // the first chunk only
    }
  }
}

// The streaming window releases records in the whole-file order (seq, then
// file order for equal seq) when threads interleave, one thread's records
// are out of order among themselves (another run) and seqs repeat: 4,000
// FREE records of 6 threads, shuffled in blocks (fixed seed).
TEST(ReaderTest, StreamOrderEqualsWholeFileOrder) {
  std::mt19937_64 rng(9);
  TraceBuilder b({}, format::kCodecZstd);
  std::vector<std::vector<uint64_t>> per_thread(6);
  for (uint64_t seq = 0; seq < 4000; ++seq) per_thread[rng() % 6].push_back(seq - seq % 3);
  std::swap(per_thread[2][10], per_thread[2][200]);  // thread 2 out of its own order
  std::vector<size_t> next(6, 0);
  for (bool left = true; left;) {
    left = false;
    for (size_t th = 0; th < 6; ++th) {
      const size_t n = 1 + rng() % 50;
      for (size_t k = 0; k < n && next[th] < per_thread[th].size(); ++k) {
        b.set_next_seq(per_thread[th][next[th]++]);
        b.Free(1, 0x1000 * th + k, th + 1);
      }
      left = left || next[th] < per_thread[th].size();
    }
    if (rng() % 4 == 0) b.Flush();
  }
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<Trace> whole = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(whole.ok());
  absl::StatusOr<Trace> scanned = ScanTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(scanned.ok()) << scanned.status();
  EventStream stream(bytes.data(), scanned->data_begin, scanned->data_end);
  size_t i = 0;
  for (Event e; stream.Next(&e); ++i) {
    ASSERT_LT(i, whole->events.size());
    ASSERT_EQ(e.seq, whole->events[i].seq) << i;
    ASSERT_EQ(e.tid, whole->events[i].tid) << i;
    ASSERT_EQ(e.addr, whole->events[i].addr) << i;
  }
  EXPECT_TRUE(stream.status().ok());
  EXPECT_EQ(i, 4000u);
}

TEST(ReaderTest, UnknownReferencesAreCounted) {
  TraceBuilder b;
  b.Alloc(1, 99, 0x10, 8, 0, 0, 0, 55);  // undefined stack 99 and string 55
  b.MappingGone(3, 2);                   // undefined mapping
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<Trace> t = ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->unknown_refs, 3u);
  EXPECT_EQ(t->events.size(), 1u);
}

TEST(ReaderTest, ReadTraceFileErrors) {
  testing::TempDir dir;
  EXPECT_EQ(ReadTraceFile(dir.File("missing.trace")).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(testing::WriteFile(dir.File("empty.trace"), std::string()));
  EXPECT_FALSE(ReadTraceFile(dir.File("empty.trace")).ok());
  ASSERT_TRUE(testing::WriteFile(dir.File("ok.trace"), AllRecords(format::kCodecZstd).Finish()));
  absl::StatusOr<Trace> t = ReadTraceFile(dir.File("ok.trace"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->events.size(), 8u);
}

}  // namespace

// Every fixed-field record (no BYTES or LIST field) at its widest: each
// unsigned field at its type's maximum, each signed one at its minimum (the
// widest zig-zag), fits a buffer of exactly kMaxEncodedSize<R> and not one
// byte less. libmemstep.so sizes its stack buffers with it, so a field added
// to a record can never make the record go unwritten.
template <class R>
void ExpectWidestFitsExactly(const R& r, const char* name) {
  std::vector<uint8_t> buf(format::kMaxEncodedSize<R>);
  format::RecordEncoder e(buf.data(), buf.size());
  ASSERT_TRUE(format::Encode(e, r)) << name;
  EXPECT_EQ(e.size(), buf.size()) << name;
  format::RecordEncoder small(buf.data(), buf.size() - 1);
  EXPECT_FALSE(format::Encode(small, r)) << name;
}

TEST(RecordsTest, MaxEncodedSizeIsTheWidestEncodingOfEveryFixedRecord) {
  int checked = 0;
#define MS_U(type, name) r.name = std::numeric_limits<type>::max();
#define MS_S(type, name) r.name = std::numeric_limits<type>::min();
#define MS_COUNTERS(name) memset(&r.name, 0xff, sizeof(r.name));
#define MS_BYTES(name, max) variable = true;
#define MS_LIST(name, width, max, count_doc, item_doc) variable = true;
#define MEMSTEP_RECORD_WIDEST(Name, tag, doc, fields) \
  {                                                   \
    format::Name##Record r;                           \
    bool variable = false;                            \
    fields if (!variable) {                           \
      ExpectWidestFitsExactly(r, doc);                \
      ++checked;                                      \
    }                                                 \
  }
  MEMSTEP_RECORDS(MEMSTEP_RECORD_WIDEST)
#undef MEMSTEP_RECORD_WIDEST
#undef MS_U
#undef MS_S
#undef MS_COUNTERS
#undef MS_BYTES
#undef MS_LIST
  EXPECT_GE(checked, 20);
}

}  // namespace memstep::reader
