// Unit tests of libmemstep.so's internal pieces, compiled into this test
// binary (not the .so): sampler, region allocator, dictionary, interval set,
// glibc chunk-size read, memstep's own descriptors. The address tables:
// addr_map_test.cc.

#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "preload/core/dictionary.h"
#include "preload/core/fds.h"
#include "preload/core/glibc_chunk.h"
#include "preload/core/interval_set.h"
#include "preload/core/region.h"
#include "preload/core/sampler.h"
#include "preload/python/pymem_layout.h"
#include "src/format/format.h"

namespace memstep::preload {
namespace {

// ---- memstep's own descriptors (preload/core/fds.h) ----

// A thread with a private table holds none of the program's files (a pipe's
// reader sees end-of-file once the program closes its end) and what it opens
// is not in the program's table.
TEST(PrivateFdTable, HoldsNothingOfTheProgramsAndShowsNothing) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  char path[] = "/tmp/memstep-fds-XXXXXX";
  int keep = mkstemp(path);
  ASSERT_GE(keep, 0);
  struct stat want;
  ASSERT_EQ(fstat(keep, &want), 0);
  close(keep);
  int opened = -1;
  std::thread([&] {
    ASSERT_TRUE(TakePrivateFdTable());
    EXPECT_TRUE(HasPrivateFdTable());
    EXPECT_EQ(fcntl(p[1], F_GETFD), -1) << "the program's pipe was copied and kept";
    opened = OpenOwn(path, O_RDONLY);
    EXPECT_EQ(opened, 0) << "the first number of an empty table";
  }).join();
  EXPECT_FALSE(HasPrivateFdTable());
  close(p[1]);
  char c;
  EXPECT_EQ(read(p[0], &c, 1), 0) << "end-of-file once the program closed its end";
  close(p[0]);
  // No descriptor of the program's refers to the file the thread opened.
  for (int fd = 0; fd < 1024; ++fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) continue;
    EXPECT_FALSE(st.st_dev == want.st_dev && st.st_ino == want.st_ino) << "descriptor " << fd;
  }
  unlink(path);
}

// In the program's table, OpenOwn's descriptor is above the floor, and
// close-on-exec.
TEST(PrivateFdTable, OpenOwnInTheProgramsTableLandsHigh) {
  int fd = OpenOwn("/proc/self/stat", O_RDONLY);
  ASSERT_GE(fd, 0);
  EXPECT_GE(fd, FdFloor());
  EXPECT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  close(fd);
}

// From a private table, the program's descriptors are borrowed by number;
// where one cannot be (here: a closed number), SayOnStderr queues and a
// program thread writes the queue to its own descriptor 2.
TEST(PrivateFdTable, BorrowsTheProgramsDescriptorsAndQueuesWhatItCannotSay) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  std::thread([&] {
    ASSERT_TRUE(TakePrivateFdTable());
    int w = BorrowProgramFd(p[1], 3);
    ASSERT_GE(w, 3);
    EXPECT_EQ(write(w, "x", 1), 1);
    close(w);
  }).join();
  char c = 0;
  EXPECT_EQ(read(p[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');

  // The program's stderr closed: the message waits for a program thread.
  int saved = dup(2);
  ASSERT_GE(saved, 0);
  close(2);
  std::thread([] {
    ASSERT_TRUE(TakePrivateFdTable());
    SayOnStderr("queued\n", 7);
  }).join();
  EXPECT_TRUE(StderrQueued());
  ASSERT_EQ(dup2(p[1], 2), 2);
  FlushQueuedStderr();
  EXPECT_FALSE(StderrQueued());
  ASSERT_EQ(dup2(saved, 2), 2);
  close(saved);
  char got[16] = {};
  EXPECT_EQ(read(p[0], got, sizeof(got) - 1), 7);
  EXPECT_STREQ(got, "queued\n");
  close(p[0]);
  close(p[1]);
}

// ---- pymalloc's pool header (preload/python/pymem_layout.h) ----

// A pool header as CPython's init_pool and pymalloc_alloc leave it after
// `used` blocks of size class `szidx` were handed out from a fresh pool.
void FakePool(uint8_t* hdr, size_t pool_size, uint32_t szidx, uint32_t used) {
  memset(hdr, 0xAB, pymem::kPoolHeaderSize);
  const uint32_t bs = static_cast<uint32_t>(pymem::BlockSize(szidx));
  // pymalloc bumps nextoffset one block ahead while it is <= maxnextoffset.
  const uint32_t capacity = static_cast<uint32_t>((pool_size - pymem::kPoolHeaderSize) / bs);
  const uint32_t ahead = used + 1 < capacity ? used + 1 : capacity;
  const uint32_t next = static_cast<uint32_t>(pymem::kPoolHeaderSize) + ahead * bs;
  const uint32_t max_next = static_cast<uint32_t>(pool_size) - bs;
  memcpy(hdr + pymem::kPoolCount, &used, 4);
  memcpy(hdr + pymem::kPoolSzidx, &szidx, 4);
  memcpy(hdr + pymem::kPoolNextOffset, &next, 4);
  memcpy(hdr + pymem::kPoolMaxNextOffset, &max_next, 4);
}

TEST(PymemLayoutTest, SizeClassesAndBlockSizes) {
  for (size_t n = 1; n <= 512; ++n) {
    uint32_t c = pymem::SizeClass(n);
    size_t bs = pymem::BlockSize(c);
    EXPECT_GE(bs, n);
    EXPECT_LT(bs - n, 16u) << n;
    EXPECT_EQ(bs % 16, 0u);
  }
  EXPECT_EQ(pymem::BlockSize(0), 16u);
  EXPECT_EQ(pymem::BlockSize(31), 512u);
  EXPECT_EQ(pymem::SizeClass(16), 0u);
  EXPECT_EQ(pymem::SizeClass(17), 1u);
}

TEST(PymemLayoutTest, HeaderOfEveryBlockMatches) {
  uint8_t hdr[pymem::kPoolHeaderSize];
  for (size_t ps : {size_t{1} << 14, size_t{1} << 12}) {
    for (size_t n : {1, 8, 16, 17, 100, 256, 257, 500, 512}) {
      const uint32_t c = pymem::SizeClass(n);
      const size_t bs = pymem::BlockSize(c);
      const uint32_t capacity = static_cast<uint32_t>((ps - pymem::kPoolHeaderSize) / bs);
      for (uint32_t used = 1; used <= capacity; used += 7) {
        FakePool(hdr, ps, c, used);
        for (uint32_t i = 0; i < used; ++i) {
          const size_t off = pymem::kPoolHeaderSize + i * bs;
          EXPECT_TRUE(pymem::HeaderMatches(hdr, ps, off, n)) << ps << " " << n << " " << i;
          EXPECT_FALSE(pymem::HeaderMatches(hdr, ps, off + 16, n) && bs > 16);
          EXPECT_FALSE(pymem::HeaderMatches(hdr, ps, off, n + 16 <= 512 ? n + 16 : n - 16));
        }
        // The other pool size, a block beyond the used ones, zero and large requests.
        EXPECT_FALSE(
            pymem::HeaderMatches(hdr, ps == 4096 ? 16384 : 4096, pymem::kPoolHeaderSize, n));
        EXPECT_FALSE(pymem::HeaderMatches(hdr, ps, pymem::kPoolHeaderSize + (used + 1) * bs, n));
        EXPECT_FALSE(pymem::HeaderMatches(hdr, ps, pymem::kPoolHeaderSize, 0));
        EXPECT_FALSE(pymem::HeaderMatches(hdr, ps, pymem::kPoolHeaderSize, 513));
        EXPECT_FALSE(pymem::HeaderMatches(hdr, ps, 0, n));
      }
    }
  }
}

TEST(PymemLayoutTest, GarbageDoesNotMatch) {
  // glibc chunk headers and zeroed memory where a pool header would be.
  uint8_t hdr[pymem::kPoolHeaderSize] = {};
  EXPECT_FALSE(pymem::HeaderMatches(hdr, 16384, 48, 1));
  Sampler s;
  s.Seed(99);
  int matched = 0;
  for (int i = 0; i < 100000; ++i) {
    for (size_t k = 0; k < sizeof(hdr); ++k) hdr[k] = static_cast<uint8_t>(s.Next());
    matched += pymem::HeaderMatches(hdr, 16384, 48, 1);
  }
  EXPECT_EQ(matched, 0);
}

// ---- Sampler ----
// Tolerances are 5 standard errors: with a fixed seed the tests are
// deterministic; over random seeds the false-failure rate would be < 1e-6.

TEST(SamplerTest, GapMeanMatchesInterval) {
  for (uint64_t T : {uint64_t{4096}, uint64_t{512} << 10, uint64_t{2} << 20}) {
    Sampler s;
    s.Seed(12345 + T);
    const int n = 200000;
    double sum = 0;
    int below_median = 0;
    for (int i = 0; i < n; ++i) {
      int64_t g = s.NextGap(T);
      ASSERT_GE(g, 0);
      sum += static_cast<double>(g);
      if (static_cast<double>(g) < static_cast<double>(T) * log(2.0)) ++below_median;
    }
    double mean = sum / n;
    double se = static_cast<double>(T) / sqrt(static_cast<double>(n));  // exponential: sd = T
    EXPECT_NEAR(mean, static_cast<double>(T) + 0.5, 5 * se) << "T=" << T;
    // Exponential median is T ln 2: half the gaps fall below it.
    EXPECT_NEAR(below_median / static_cast<double>(n), 0.5, 5 * 0.5 / sqrt(n));
  }
}

TEST(SamplerTest, IntervalOneSamplesEverything) {
  Sampler s;
  s.Seed(1);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(s.NextGap(1), 0);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(s.NextGap(0), 0);
}

TEST(SamplerTest, SampleProbabilityMatchesPoisson) {
  // The hook's countdown: bytes_until_sample -= size + 1; sample when < 0.
  const uint64_t T = 4096;
  const size_t size = 1000;
  Sampler s;
  s.Seed(77);
  int64_t left = s.NextGap(T);
  const int n = 200000;
  int sampled = 0;
  for (int i = 0; i < n; ++i) {
    left -= static_cast<int64_t>(size + 1);
    if (left < 0) {
      ++sampled;
      left = s.NextGap(T);
    }
  }
  double p = 1 - exp(-static_cast<double>(size + 1) / static_cast<double>(T));
  double se = sqrt(p * (1 - p) / n);
  EXPECT_NEAR(sampled / static_cast<double>(n), p, 5 * se);
}

TEST(SamplerTest, UniformIsInHalfOpenUnitInterval) {
  Sampler s;
  s.Seed(3);
  for (int i = 0; i < 100000; ++i) {
    double u = s.NextUniform();
    ASSERT_GT(u, 0.0);
    ASSERT_LE(u, 1.0);
  }
}

// ---- Region ----

class RegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    size_t want = size_t{64} << 20;  // 64 MiB: 1 MiB bootstrap + 17 x 2 MiB spans + meta
    mem_ = static_cast<char*>(mmap(nullptr, want + Region::kAlign, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    ASSERT_NE(mem_, MAP_FAILED);
    // Page-sized residency (LiveBytesAndUsedRanges counts resident pages).
    madvise(mem_, want + Region::kAlign, MADV_NOHUGEPAGE);
    uintptr_t a = (reinterpret_cast<uintptr_t>(mem_) + Region::kAlign - 1) & ~(Region::kAlign - 1);
    region_.Init(reinterpret_cast<char*>(a), want);
    ASSERT_GE(region_.span(), Region::kMaxBlock);
  }
  void TearDown() override { munmap(mem_, (size_t{64} << 20) + Region::kAlign); }
  char* mem_ = nullptr;
  Region region_;
};

TEST_F(RegionTest, ClassOf) {
  EXPECT_EQ(Region::ClassOf(0, 16), 0);
  EXPECT_EQ(Region::ClassOf(1, 16), 0);
  EXPECT_EQ(Region::ClassOf(16, 16), 0);
  EXPECT_EQ(Region::ClassOf(17, 16), 1);
  EXPECT_EQ(Region::ClassOf(100, 4096), 8);
  EXPECT_EQ(Region::ClassOf(1 << 20, 16), 16);
  EXPECT_EQ(Region::ClassOf((1 << 20) + 1, 16), -1);
  EXPECT_EQ(Region::ClassOf(10, 2 << 20), -1);
}

TEST_F(RegionTest, AlignmentAndRequestedSize) {
  for (size_t size : {size_t{1}, size_t{15}, size_t{16}, size_t{24}, size_t{1000}, size_t{4096},
                      size_t{70000}, size_t{1} << 20}) {
    for (size_t align = 16; align <= 65536; align *= 2) {
      void* p = region_.Alloc(size, align);
      ASSERT_NE(p, nullptr) << size << " " << align;
      EXPECT_TRUE(region_.Contains(p));
      EXPECT_FALSE(region_.IsBootstrap(p));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u);
      // Natural alignment to the class size.
      size_t need = size > align ? size : align;
      size_t cls = size_t{16} << Region::ClassOf(size, align);
      EXPECT_GE(cls, need);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % cls, 0u);
      EXPECT_EQ(region_.RequestedSize(p), size);
      memset(p, 0xCD, size);
      size_t req = 0;
      EXPECT_TRUE(region_.Free(p, &req));
      EXPECT_EQ(req, size);
    }
  }
}

TEST_F(RegionTest, ReuseAndDoubleFree) {
  void* a = region_.Alloc(100, 16);
  void* b = region_.Alloc(100, 16);
  ASSERT_NE(a, b);
  size_t req;
  EXPECT_TRUE(region_.Free(a, &req));
  EXPECT_FALSE(region_.Free(a, &req));  // double free ignored
  void* c = region_.Alloc(120, 16);     // same class (128): reuses a
  EXPECT_EQ(c, a);
  EXPECT_EQ(region_.RequestedSize(c), 120u);
  EXPECT_FALSE(region_.Free(static_cast<char*>(b) + 8, &req));  // interior pointer
  EXPECT_TRUE(region_.Free(b, &req));
  EXPECT_TRUE(region_.Free(c, &req));
}

TEST_F(RegionTest, ExhaustionReturnsNull) {
  // Class 16 (1 MiB blocks) has span / 1 MiB blocks.
  size_t blocks = region_.span() / Region::kMaxBlock;
  std::vector<void*> v;
  for (size_t i = 0; i < blocks; ++i) {
    void* p = region_.Alloc(Region::kMaxBlock, 16);
    ASSERT_NE(p, nullptr);
    v.push_back(p);
  }
  EXPECT_EQ(region_.Alloc(Region::kMaxBlock, 16), nullptr);
  size_t req;
  EXPECT_TRUE(region_.Free(v.back(), &req));
  EXPECT_EQ(region_.Alloc(Region::kMaxBlock, 16), v.back());
}

// What the step-end statistics read (preload/steps/alloc_stats.cc): the
// live blocks' requested bytes, and the used ranges, whose resident pages
// mincore counts.
TEST_F(RegionTest, LiveBytesAndUsedRanges) {
  EXPECT_EQ(region_.LiveBytes(), 0u);
  void* a = region_.Alloc(100, 16);    // class 128 B
  void* b = region_.Alloc(70000, 16);  // class 128 KiB
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(region_.LiveBytes(), 70100u);
  memset(b, 1, 70000);  // 18 pages touched (17.1 of them with data)
  uint64_t used = 0, resident = 0;
  region_.ForEachUsedRange([&](uintptr_t start, size_t len) {
    used += len;
    if (len > 0) resident += ResidentBytes(start, len);
  });
  EXPECT_GE(used, 128u + (128u << 10));
  EXPECT_GE(resident, 70000u);
  EXPECT_LE(resident, (128u << 10) + 4 * 4096u);  // blocks + metadata pages
  size_t req;
  EXPECT_TRUE(region_.Free(b, &req));
  EXPECT_EQ(region_.LiveBytes(), 100u);
  EXPECT_TRUE(region_.Free(a, &req));
  EXPECT_EQ(region_.LiveBytes(), 0u);
}

// memstep's own mappings: RawMmap lists them, RawMunmap forgets them, and
// ResidentBytes counts the touched pages (a prefix scan stops after 4 MiB
// without one).
TEST(OwnMappingsTest, ListedAndMeasured) {
  const size_t len = size_t{64} << 20;
  char* p = static_cast<char*>(RawMmap(len));
  ASSERT_NE(p, nullptr);
  madvise(p, len, MADV_NOHUGEPAGE);  // page-sized residency
  bool listed = false;
  ForEachOwnMapping([&](uintptr_t start, size_t l) {
    listed |= start == reinterpret_cast<uintptr_t>(p) && l == len;
  });
  EXPECT_TRUE(listed);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  EXPECT_EQ(ResidentBytes(a, len), 0u);
  memset(p, 1, 3 * 4096);           // the first 3 pages
  memset(p + (2 << 20), 1, 4096);   // one at 2 MiB
  memset(p + (40 << 20), 1, 4096);  // one past a 38 MiB gap
  EXPECT_EQ(ResidentBytes(a, len), 5 * 4096u);
  EXPECT_EQ(ResidentBytes(a, len, /*prefix=*/true), 4 * 4096u);  // stops in the gap
  RawMunmap(p, len);
  listed = false;
  ForEachOwnMapping(
      [&](uintptr_t start, size_t) { listed |= start == reinterpret_cast<uintptr_t>(p); });
  EXPECT_FALSE(listed);
}

TEST_F(RegionTest, Bootstrap) {
  void* p = region_.BootstrapAlloc(100, 16);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(region_.IsBootstrap(p));
  EXPECT_EQ(region_.RequestedSize(p), 100u);
  void* q = region_.BootstrapAlloc(10, 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 4096, 0u);
  size_t req;
  EXPECT_FALSE(region_.Free(p, &req));  // never reused
  EXPECT_EQ(region_.BootstrapAlloc(Region::kBootstrapBytes, 16), nullptr);
}

TEST_F(RegionTest, ConcurrentAllocFree) {
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t) {
    th.emplace_back([this, t] {
      std::vector<void*> mine;
      for (int i = 0; i < 20000; ++i) {
        void* p = region_.Alloc(static_cast<size_t>((i * 7 + t) % 3000 + 1), 16);
        ASSERT_NE(p, nullptr);
        *static_cast<int*>(p) = t;
        mine.push_back(p);
        if (mine.size() > 50) {
          EXPECT_EQ(*static_cast<int*>(mine.front()), t);
          size_t req;
          EXPECT_TRUE(region_.Free(mine.front(), &req));
          mine.erase(mine.begin());
        }
      }
      size_t req;
      for (void* p : mine) EXPECT_TRUE(region_.Free(p, &req));
    });
  }
  for (auto& t : th) t.join();
}

// ---- Dictionary ----

TEST(DictionaryTest, StacksAndStringsDedup) {
  Dictionary d;
  ASSERT_TRUE(d.Init(size_t{1} << 20, 1024, 256));
  uint64_t a[] = {1, 2, 3};
  uint64_t b[] = {1, 2, 4};
  uint32_t ia = d.InternStack(a, 3);
  uint32_t ib = d.InternStack(b, 3);
  EXPECT_NE(ia, 0u);
  EXPECT_NE(ib, 0u);
  EXPECT_NE(ia, ib);
  EXPECT_EQ(d.InternStack(a, 3), ia);
  EXPECT_NE(d.InternStack(a, 2), ia);
  EXPECT_EQ(d.InternStack(a, 0), 0u);
  uint32_t s1 = d.InternString("forward", 7);
  EXPECT_EQ(d.InternString("forward", 7), s1);
  EXPECT_NE(d.InternString("backward", 8), s1);
  EXPECT_EQ(d.stack_count(), 3u);
  EXPECT_EQ(d.string_count(), 2u);
  // The log holds exactly the definitions, decodable, in id order.
  size_t off = 0, records = 0;
  std::set<uint64_t> stack_ids;
  while (off < d.End()) {
    uint32_t len;
    memcpy(&len, d.log() + off, 4);
    format::RecordDecoder dec(d.log() + off + 4, len);
    uint8_t tag;
    uint64_t id;
    ASSERT_TRUE(dec.Byte(&tag));
    ASSERT_TRUE(dec.U(&id));
    if (tag == format::kTagStack) stack_ids.insert(id);
    off += 4 + len;
    ++records;
  }
  EXPECT_EQ(records, 5u);
  EXPECT_EQ(stack_ids, (std::set<uint64_t>{ia, ib, d.InternStack(a, 2)}));
}

TEST(DictionaryTest, ConcurrentInternIsConsistent) {
  Dictionary d;
  ASSERT_TRUE(d.Init(size_t{8} << 20, 4096, 256));
  std::vector<std::vector<uint32_t>> ids(4, std::vector<uint32_t>(500));
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t) {
    th.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        for (int i = 0; i < 500; ++i) {
          uint64_t frames[4] = {static_cast<uint64_t>(i), 7, 8, static_cast<uint64_t>(i * 3)};
          ids[t][i] = d.InternStack(frames, 4);
        }
      }
    });
  }
  for (auto& t : th) t.join();
  EXPECT_EQ(d.stack_count(), 500u);
  for (int t = 1; t < 4; ++t) EXPECT_EQ(ids[t], ids[0]);
}

TEST(DictionaryTest, FullTableReturnsZero) {
  Dictionary d;
  ASSERT_TRUE(d.Init(size_t{1} << 20, 16, 16));
  int nonzero = 0;
  for (uint64_t i = 1; i <= 100; ++i) nonzero += d.InternStack(&i, 1) != 0;
  EXPECT_EQ(nonzero, 12);
  EXPECT_GT(d.dropped(), 0u);
}

// ---- IntervalSet ----

TEST(IntervalSetTest, PartialUnmaps) {
  IntervalSet s;
  ASSERT_TRUE(s.Init(64));
  EXPECT_EQ(s.Add(0x10000, 0x20000), 0x10000);
  EXPECT_EQ(s.Add(0x30000, 0x40000), 0x10000);
  EXPECT_EQ(s.Remove(0x18000, 0x19000), 0x1000u);  // split
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.Remove(0x1f000, 0x31000), 0x2000u);  // spans two
  EXPECT_EQ(s.Remove(0x50000, 0x60000), 0u);       // none
  EXPECT_EQ(s.Add(0x10000, 0x12000), 0);           // already live: net 0
  EXPECT_EQ(s.Remove(0, 0x100000), 0x10000u - 0x1000 - 0x1000 + 0x10000 - 0x1000);
  EXPECT_EQ(s.size(), 0u);
}

// ---- glibc chunk header ----

// Not built under a sanitizer, whose allocator replaces glibc's (the test
// would have nothing to check, and is not reported as skipped).
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST(GlibcChunkTest, MatchesMallocUsableSize) {
  std::vector<void*> blocks;
  for (size_t size = 0; size < 5000; size += 7) blocks.push_back(malloc(size));
  for (size_t size : {size_t{100000}, size_t{131072}, size_t{200000}, size_t{1} << 20,
                      size_t{5} << 20, size_t{33} << 20}) {
    blocks.push_back(malloc(size));  // >= 128 KiB: mmapped chunks
  }
  for (size_t a : {size_t{64}, size_t{4096}, size_t{65536}}) {
    void* p = nullptr;
    ASSERT_EQ(posix_memalign(&p, a, 1000), 0);
    blocks.push_back(p);
    blocks.push_back(memalign(a, 300000));
  }
  blocks.push_back(calloc(1000, 1000));
  std::thread t([&] { blocks.push_back(malloc(777)); });  // non-main arena
  t.join();
  int mmapped = 0;
  for (void* p : blocks) {
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(GlibcUsableSize(p), malloc_usable_size(p));
    uint64_t field;
    memcpy(&field, static_cast<char*>(p) - 8, 8);
    mmapped += (field & kGlibcIsMmapped) != 0;
  }
  EXPECT_GE(mmapped, 4);
  for (void* p : blocks) free(p);
}
#endif

}  // namespace
}  // namespace memstep::preload
