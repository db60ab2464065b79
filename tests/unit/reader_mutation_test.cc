// Runs the fuzz entry point (tests/fuzz/reader_fuzz.cc) over a few thousand
// deterministic mutations of valid traces, so that every test run exercises
// what the libFuzzer target does. Half of the mutations re-seal the chunk
// CRCs, so that the record decoder (not only the CRC check) sees garbage.

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "src/reader/reader.h"
#include "tests/unit/trace_builder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace memstep::reader {
namespace {

std::vector<uint8_t> Seed(uint8_t codec, std::vector<size_t>* chunks) {
  TraceHeaderInfo info;
  info.tlvs = {{format::kTlvCmdline, "prog"}, {format::kTlvHostname, "h"}};
  TraceBuilder b(info, codec);
  b.String(1, "/bin/prog");
  b.String(2, "forward");
  b.Mapping(1, 0, 0x1000, 0x9000, 0, 1, "id");
  b.Stack(1, {0x1100, 0x1200});
  b.Stack(2, {0x1300});
  format::Counters c{100, 2, 50, 1, 50, 80, 4096, 1 << 20};
  b.Step(1, 0, 0, c);
  for (int i = 0; i < 20; ++i) {
    b.Alloc(2 + i, 1 + i % 2, 0x100000 + 64 * i, 32 + i, i % 3 ? 524288 : 0, 0, 0, 2);
    if (i % 4 == 0) b.Free(3 + i, 0x100000 + 64 * i);
    if (i % 7 == 0) b.Flush();
  }
  b.Mmap(30, 2, 0x7f0000000000, 65536);
  b.Munmap(31, 0x7f0000004000, 4096);
  b.Mremap(32, 2, 0x7f0000000000, 4096, 0x7f0000100000, 8192);
  b.Stage(33, 2, 0, 1, c);
  b.Step(34, 0, 1, c);
  b.Counter(35, 2, -7);
  b.DevAlloc(35, 1, format::kDevVmm, 0, 0xabc, 2 << 20, format::kApiCuMemCreate, 0, 0, 2);
  b.DevFail(35, 2, format::kDevDevice, -1, 1ull << 36, format::kApiCudaMalloc, 2, 0, 2);
  b.DevInfo(35, 0, 0, 1000, 2000, 30, 20);
  b.DevFree(35, format::kDevVmm, 0, 0xabc, 2 << 20, format::kApiCuMemRelease);
  b.Lost(36, 1, 2, 3);
  b.Notice(37, 1, 2);
  b.Trailer(38, c, true);
  std::vector<uint8_t> out = b.Finish();
  *chunks = b.chunk_offsets();
  return out;
}

// Recomputes both CRCs of every well-framed raw chunk.
void Reseal(std::vector<uint8_t>& bytes, const std::vector<size_t>& chunks) {
  for (size_t off : chunks) {
    if (off + sizeof(format::ChunkHeader) > bytes.size()) return;
    format::ChunkHeader h;
    memcpy(&h, bytes.data() + off, sizeof(h));
    const size_t payload = off + sizeof(h);
    if (h.payload_len > bytes.size() - payload) return;
    h.payload_crc32c = format::Crc32c(bytes.data() + payload, h.payload_len);
    h.header_crc32c = format::Crc32c(&h, 32);
    memcpy(bytes.data() + off, &h, sizeof(h));
  }
}

TEST(ReaderMutationTest, RandomMutationsNeverCrash) {
  std::vector<size_t> raw_chunks, zstd_chunks;
  const std::vector<uint8_t> raw = Seed(format::kCodecRaw, &raw_chunks);
  const std::vector<uint8_t> zstd = Seed(format::kCodecZstd, &zstd_chunks);
  std::mt19937_64 rng(20261122);
  int parsed = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    const bool use_raw = iter % 2 == 0;
    std::vector<uint8_t> bytes = use_raw ? raw : zstd;
    const std::vector<size_t>& chunks = use_raw ? raw_chunks : zstd_chunks;
    const int mutations = 1 + static_cast<int>(rng() % 6);
    for (int m = 0; m < mutations && !bytes.empty(); ++m) {
      const size_t pos = rng() % bytes.size();
      switch (rng() % 6) {
        case 0:
          bytes[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:
          bytes[pos] = static_cast<uint8_t>(rng());
          break;
        case 2:
          bytes[pos] = (rng() % 2) ? 0xFF : 0x80;
          break;
        case 3:
          bytes.resize(pos);
          break;
        case 4:
          bytes.insert(bytes.begin() + pos, static_cast<uint8_t>(rng()));
          break;
        default: {
          const size_t n = std::min<size_t>(bytes.size() - pos, 1 + rng() % 16);
          bytes.erase(bytes.begin() + pos, bytes.begin() + pos + n);
        }
      }
    }
    if (use_raw && iter % 4 == 0) Reseal(bytes, chunks);
    std::vector<uint8_t> exact(bytes);  // exact-size buffer so ASan sees overreads
    parsed += ParseTrace(exact.data(), exact.size()).ok();
    // The fuzz entry point: its first byte selects CRC checking (odd: off).
    exact.insert(exact.begin(), static_cast<uint8_t>(iter & 1));
    std::vector<uint8_t> fuzz_input(exact);
    LLVMFuzzerTestOneInput(fuzz_input.data(), fuzz_input.size());
  }
  EXPECT_GT(parsed, 100);  // the mutations reach past the header often enough
}

// The kept fuzz inputs tests/fuzz/regress/reader/all_kinds_raw and
// all_kinds_zstd are Seed()'s traces as the fuzz entry point takes them (first
// byte 1: CRC checks off, raw chunks; 0: on, zstd chunks). A change to a
// record or to the version makes them stale (they would stop at the header or
// a corrupt chunk and fuzz nothing): this test then fails, and
//   MEMSTEP_WRITE_READER_SEEDS=1 build/bin/reader_mutation_test
// rewrites them (commit the two files).
TEST(ReaderMutationTest, KeptAllKindsInputsAreCurrent) {
  std::vector<size_t> chunks;
  const std::vector<uint8_t> raw = Seed(format::kCodecRaw, &chunks);
  const std::vector<uint8_t> zstd = Seed(format::kCodecZstd, &chunks);
  struct Kept {
    const char* name;
    uint8_t first;
    const std::vector<uint8_t>* seed;
  };
  const std::string dir = MEMSTEP_READER_REGRESS_DIR;
  for (const Kept& k : {Kept{"all_kinds_raw", 1, &raw}, Kept{"all_kinds_zstd", 0, &zstd}}) {
    std::vector<uint8_t> fresh{k.first};
    fresh.insert(fresh.end(), k.seed->begin(), k.seed->end());
    const std::string path = dir + "/" + k.name;
    if (getenv("MEMSTEP_WRITE_READER_SEEDS") != nullptr) {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(fresh.data()), fresh.size());
    }
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(in) << path;
    const std::vector<uint8_t> kept{std::istreambuf_iterator<char>(in), {}};
    ASSERT_FALSE(kept.empty()) << path;
    EXPECT_EQ(kept[0], k.first) << path;
    // Decoded, not byte for byte: zstd's output may differ between versions.
    auto want = ParseTrace(fresh.data() + 1, fresh.size() - 1);
    auto got = ParseTrace(kept.data() + 1, kept.size() - 1);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << path << " is stale (" << got.status()
                          << "): rewrite it with MEMSTEP_WRITE_READER_SEEDS=1 "
                             "build/bin/reader_mutation_test";
    EXPECT_TRUE(got->warnings.empty() && !got->truncated)
        << path << " is stale: rewrite it with MEMSTEP_WRITE_READER_SEEDS=1";
    EXPECT_EQ(got->events.size(), want->events.size()) << path << " is stale";
    if (k.first == 1) {
      EXPECT_TRUE(kept == fresh) << path << " is stale (raw: byte for byte)";
    }
  }
}

}  // namespace
}  // namespace memstep::reader
