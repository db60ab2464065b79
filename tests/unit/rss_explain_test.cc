// RSS growth explained (src/analysis/rss_explain.h) on synthetic series: each
// case builds per-step RSS, exact live bytes, mappings and allocator
// statistics with a known composition plus noise, classifies RSS like the
// analysis does, and checks the verdict and the per-step split.
//
// Noise: Gaussian, seeded (one fixed seed per case and repetition), SD 64 KiB
// on RSS and 16 KiB on the allocator's figures, against component rates of
// 256 KiB/step and more over 60 steps: the Mann-Kendall tests at p < 0.01 of
// a 256 KiB/step trend at that noise have a z far above 10, so a wrong
// verdict from noise has probability well below 1e-9 per case; 50
// repetitions per case must all agree.

#include "src/analysis/rss_explain.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/analysis/growth.h"
#include "src/reader/reader.h"
#include "tests/unit/trace_builder.h"

namespace memstep::analysis {
namespace {

struct Rates {
  double live = 0, frag = 0, cache = 0, mmap = 0, file = 0, other = 0, own = 0;
  bool stats = true;      // allocator statistics recorded
  size_t stat_every = 1;  // ... at every k-th step (rate limit)
};

constexpr size_t kSteps = 60;

RssInput Build(const Rates& r, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> big(0, 64 * 1024), small(0, 16 * 1024);
  RssInput in;
  in.rss.resize(kSteps);
  in.live.resize(kSteps);
  in.mmap.resize(kSteps);
  in.stats.resize(kSteps);
  const double base = 100 << 20;
  for (size_t k = 0; k < kSteps; ++k) {
    const double s = static_cast<double>(k);
    const double live = 50e6 + r.live * s, frag = 1e6 + r.frag * s + std::abs(small(rng));
    const double cache = 2e5 + r.cache * s + std::abs(small(rng));
    const double mmap = 1e6 + r.mmap * s, file = 30e6 + r.file * s + std::abs(small(rng));
    in.live[k] = live;
    in.mmap[k] = mmap;
    const double own = 4e6 + r.own * s;
    in.rss[k] = base + live + frag + cache + mmap + file + own + r.other * s + big(rng);
    if (r.stats && k % r.stat_every == 0) {
      RowAllocStats& st = in.stats[k];
      st.has = true;
      st.allocator = "glibc";
      st.frag_bytes = static_cast<int64_t>(frag);
      st.cache_bytes = static_cast<int64_t>(cache);
      st.file_bytes = static_cast<int64_t>(file);
      st.anon_bytes = static_cast<int64_t>(in.rss[k] - file);
      st.rss_source = 1;
      st.own_bytes = static_cast<int64_t>(own);
      st.cost_ns = 5000;
    }
  }
  const GrowthOptions options;
  in.rss_growth = ClassifyGrowth(GrowthInput{in.rss, {}, {}, {}, {}, {}, {}, {}}, 0, options);
  GrowthOptions exact = options;
  exact.min_rate /= 16;
  exact.min_window_growth /= 16;
  in.live_growth = ClassifyGrowth(GrowthInput{in.live, {}, {}, {}, {}, {}, {}, {}}, 0, exact);
  return in;
}

void ExpectVerdict(const Rates& r, const std::string& verdict, RssInput* last = nullptr,
                   RssExplain* out = nullptr) {
  for (uint32_t rep = 0; rep < 50; ++rep) {
    RssInput in = Build(r, 1000 + rep);
    if (last != nullptr) in.sites = last->sites;
    const RssExplain x = ExplainRss(in, GrowthOptions{});
    ASSERT_EQ(x.verdict, verdict) << "rep " << rep << ": " << x.reason << " rss " << x.rss_per_step
                                  << " live " << x.live_per_step << " frag " << x.frag_per_step
                                  << " cache " << x.cache_per_step;
    if (out != nullptr && rep == 0) *out = x;
  }
}

TEST(RssExplain, LeakWhenLiveBytesGrowWithRss) {
  Rates r;
  r.live = 512 << 10;
  r.frag = 16 << 10;
  RssExplain x;
  ExpectVerdict(r, "LEAK", nullptr, &x);
  EXPECT_NEAR(x.live_per_step, 512 << 10, 1);
  EXPECT_TRUE(x.pins.empty() || x.frag_per_step > 0);
}

TEST(RssExplain, FragmentationPinnedBySmallLeak) {
  Rates r;
  r.live = 4 << 10;  // a small leak
  r.frag = 1 << 20;  // pins 256x as much free space
  RssInput sites;
  sites.sites = {RssSite{7, 4096, GrowthClass::kLeak}, RssSite{8, 0, GrowthClass::kNoTrend}};
  RssExplain x;
  ExpectVerdict(r, "FRAGMENTATION", &sites, &x);
  EXPECT_NEAR(x.frag_per_step, 1 << 20, 8 << 10);
  ASSERT_EQ(x.pins.size(), 1u);
  EXPECT_EQ(x.pins[0].site_id, 7u);
  EXPECT_NEAR(x.pins[0].ratio, 256, 4);
}

TEST(RssExplain, FragmentationWithoutSitesPinsTheExactHeap) {
  Rates r;
  r.live = 4 << 10;
  r.frag = 1 << 20;
  RssExplain x;
  ExpectVerdict(r, "FRAGMENTATION", nullptr, &x);
  ASSERT_EQ(x.pins.size(), 1u);
  EXPECT_EQ(x.pins[0].site_id, 0u);
}

TEST(RssExplain, CachingWhenTheTopChunkGrows) {
  Rates r;
  r.cache = 512 << 10;
  ExpectVerdict(r, "CACHING");
}

TEST(RssExplain, FileWhenFilePagesGrow) {
  Rates r;
  r.file = 512 << 10;
  ExpectVerdict(r, "FILE");
}

TEST(RssExplain, NeverLeakWithoutLiveGrowth) {
  // RSS grows in anonymous memory nobody accounts for: not a LEAK.
  Rates r;
  r.other = 512 << 10;
  ExpectVerdict(r, "UNEXPLAINED");
  r.stats = false;
  ExpectVerdict(r, "UNEXPLAINED");
}

TEST(RssExplain, RateLimitedStatisticsStillSplit) {
  // Statistics at every 4th step only: slopes use the step index.
  Rates r;
  r.live = 2 << 10;
  r.frag = 768 << 10;
  r.stat_every = 4;
  RssExplain x;
  ExpectVerdict(r, "FRAGMENTATION", nullptr, &x);
  EXPECT_EQ(x.stat_rows, 15u);
  EXPECT_NEAR(x.frag_per_step, 768 << 10, 8 << 10);
}

TEST(RssExplain, MemstepsOwnMemoryIsNotTheProgram) {
  // RSS grows by memstep's own memory only: MEMSTEP, never LEAK, and not
  // left in "other".
  Rates r;
  r.own = 512 << 10;
  RssExplain x;
  ExpectVerdict(r, "MEMSTEP", nullptr, &x);
  EXPECT_TRUE(x.has_own);
  EXPECT_NEAR(x.own_per_step, 512 << 10, 1);
  EXPECT_LT(std::abs(x.other_per_step), 64 << 10);
  // Next to a larger fragmentation it is subtracted, not the verdict, even
  // when RSS grows by little more than memstep's own (free chunks that are
  // not resident: the PyTorch loop once had RSS +74 KiB/step, memstep's own
  // +73 KiB and free chunks +163 KiB).
  r.frag = 1 << 20;
  r.own = 512 << 10;
  r.other = -(1 << 20);
  ExpectVerdict(r, "FRAGMENTATION", nullptr, &x);
  r.other = 0;
  // Next to a larger fragmentation it is subtracted, not the verdict.
  r.frag = 1 << 20;
  r.live = 4 << 10;
  ExpectVerdict(r, "FRAGMENTATION", nullptr, &x);
  EXPECT_NEAR(x.own_per_step, 512 << 10, 1);
  EXPECT_LT(std::abs(x.other_per_step), 64 << 10);
}

TEST(RssExplain, AShareAboveTheWholeSaysSo) {
  // memstep's own memory rises twice as fast as RSS (another part falls):
  // the reason says it rises faster than RSS, never "200 % of the RSS
  // growth" (each part's rate is fitted on its own).
  Rates r;
  r.own = 512 << 10;
  r.other = -(256 << 10);
  RssExplain x;
  ExpectVerdict(r, "MEMSTEP", nullptr, &x);
  EXPECT_GT(x.own_per_step, x.rss_per_step);
  EXPECT_EQ(x.reason.find("of the RSS growth"), std::string::npos) << x.reason;
  EXPECT_NE(x.reason.find("as fast as the RSS itself"), std::string::npos) << x.reason;
  // Within the whole, the share is stated.
  r.other = 0;
  ExpectVerdict(r, "MEMSTEP", nullptr, &x);
  EXPECT_NE(x.reason.find("% of the RSS growth"), std::string::npos) << x.reason;
}

TEST(RssExplain, ReportClassIsNeverLeakWithoutTheVerdict) {
  Growth g;
  g.cls = GrowthClass::kLeak;
  RssExplain x;
  EXPECT_EQ(RssClassName(g, x), "GROWS");
  x.verdict = "FRAGMENTATION";
  EXPECT_EQ(RssClassName(g, x), "FRAGMENTATION");
  g.cls = GrowthClass::kNoTrend;
  x.verdict.clear();
  EXPECT_EQ(RssClassName(g, x), "NO_TREND");
}

// StepAllocStats reads the COUNTERs and the ARENA_STATS record of each step
// end (the ones between the previous STEP record and its STEP end).
TEST(RssExplain, StepAllocStatsReadsArenasAndOwnMemory) {
  reader::TraceBuilder b;
  b.String(1, "memstep.stats_ns");
  b.String(2, "memstep.own_bytes");
  b.String(3, "memstep.sampled_bytes");
  b.String(4, "rss.source");
  b.String(5, "memstep.region_bytes");
  const format::Counters c = {};
  for (uint64_t k = 0; k < 3; ++k) {
    const uint64_t ts = 1000 * (k + 1);
    b.set_next_seq(10 * k);
    b.Step(ts, k, 0, c);
    if (k != 1) {  // step 1: no collection (rate limit)
      b.Counter(ts, 1, 5000);
      b.Counter(ts, 2, 3 << 20);
      b.Counter(ts, 3, 1 << 20);
      b.Counter(ts, 4, 1);
      b.Counter(ts, 5, 5 << 20);
      // (system, free, top, free_chunks) per arena.
      const uint64_t arenas[2][4] = {{100 << 20, (10 << 20) + k, 2 << 20, 40},
                                     {8 << 20, 3 << 20, 1 << 20, 5}};
      format::ArenaStatsRecord rec;
      rec.ts = ts;
      rec.seq = 10 * k + 5;
      rec.tid = 1;
      rec.arenas.values = &arenas[0][0];
      rec.arenas.count = 2;
      b.Put(rec);
      b.set_next_seq(10 * k + 6);
    }
    b.Step(ts + 1, k, 1, c);
  }
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<reader::Trace> t = reader::ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->arena_stats.size(), 2u);
  const absl::flat_hash_map<uint64_t, size_t> rows = {{0, 0}, {1, 1}, {2, 2}};
  const std::vector<RowAllocStats> s = StepAllocStats(*t, rows, 3);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_FALSE(s[1].has);
  for (size_t k : {size_t{0}, size_t{2}}) {
    SCOPED_TRACE(k);
    ASSERT_TRUE(s[k].has);
    EXPECT_EQ(s[k].allocator, "glibc");
    ASSERT_EQ(s[k].arenas.size(), 2u);
    EXPECT_EQ(s[k].frag_bytes, (8 << 20) + static_cast<int64_t>(k) + (2 << 20));
    EXPECT_EQ(s[k].cache_bytes, 3 << 20);
    EXPECT_EQ(s[k].own_bytes, (3 << 20) + (4 << 20));  // own + (region - sampled)
    EXPECT_EQ(s[k].rss_source, 1);
    EXPECT_EQ(s[k].cost_ns, 5000);
  }
}

// The writer thread's part: a `stats.step` COUNTER names the step its
// resident split and own-memory COUNTERs belong to, written after that step's
// STEP end (and after the next step's begin); the heap part stays before the
// STEP end, also when the writer thread ends the steps (time windows: same tid).
TEST(RssExplain, StepAllocStatsMergesTheWritersPartByItsStep) {
  reader::TraceBuilder b;
  b.String(1, "memstep.stats_ns");
  b.String(2, "stats.step");
  b.String(3, "rss.anon_bytes");
  b.String(4, "rss.source");
  b.String(5, "glibc.free_bytes");
  b.String(6, "glibc.top_bytes");
  const format::Counters c = {};
  constexpr uint64_t kWriter = 7;
  for (uint64_t k = 0; k < 4; ++k) {
    const uint64_t ts = 1000 * (k + 1);
    const uint64_t tid = k == 3 ? kWriter : 1;  // step 3 ended by the writer thread
    b.Step(ts, k, 0, c, tid);
    if (k == 1 || k == 3) {  // the heap part (steps 0 and 2: rate-limited away)
      b.Counter(ts, 1, 100 + static_cast<int64_t>(k), tid);
      b.Counter(ts, 5, 1000 * static_cast<int64_t>(k + 1), tid);
      b.Counter(ts, 6, 10 * static_cast<int64_t>(k + 1), tid);
    }
    b.Step(ts + 1, k, 1, c, tid);
    if (k >= 1) {
      // The writer's part for the step that just ended, after the next begins.
      b.Step(ts + 2, k + 1, 0, c, tid);
      b.Counter(ts + 3, 2, static_cast<int64_t>(k), kWriter);
      b.Counter(ts + 3, 3, (5 << 20) + static_cast<int64_t>(k), kWriter);
      b.Counter(ts + 3, 4, 2, kWriter);
      b.Step(ts + 4, k + 1, 1, c, tid);  // (an empty step k + 1: ignored below)
    }
  }
  const std::vector<uint8_t>& bytes = b.Finish();
  absl::StatusOr<reader::Trace> t = reader::ParseTrace(bytes.data(), bytes.size());
  ASSERT_TRUE(t.ok()) << t.status();
  const absl::flat_hash_map<uint64_t, size_t> rows = {{0, 0}, {1, 1}, {2, 2}, {3, 3}};
  const std::vector<RowAllocStats> s = StepAllocStats(*t, rows, 4);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_FALSE(s[0].has);
  // Step 1: both parts.
  ASSERT_TRUE(s[1].has);
  EXPECT_EQ(s[1].cost_ns, 101);
  EXPECT_EQ(s[1].frag_bytes, 2000 - 20);
  EXPECT_EQ(s[1].anon_bytes, (5 << 20) + 1);
  EXPECT_EQ(s[1].rss_source, 2);
  // Step 2: the writer's part only.
  ASSERT_TRUE(s[2].has);
  EXPECT_EQ(s[2].cost_ns, -1);
  EXPECT_EQ(s[2].allocator, "");
  EXPECT_EQ(s[2].anon_bytes, (5 << 20) + 2);
  // Step 3, ended by the writer thread itself: its heap part is step 3's,
  // not the step its last `stats.step` named.
  ASSERT_TRUE(s[3].has);
  EXPECT_EQ(s[3].cost_ns, 103);
  EXPECT_EQ(s[3].frag_bytes, 4000 - 40);
  EXPECT_EQ(s[3].anon_bytes, (5 << 20) + 3);
}

// A staircase: RSS (and the free space inside the heap, which makes it up)
// flat but for `jumps` rises of 8 MiB, noise as in Build. Its trend test is
// significant, but the 95 % interval of its rate reaches 0.
// `live_jumps`: the jumps are in the exact live bytes (a leak in bursts),
// not in the free space.
RssInput Staircase(int jumps, uint32_t seed, bool live_jumps = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> big(0, 64 * 1024), small(0, 16 * 1024);
  RssInput in;
  in.rss.resize(kSteps);
  in.live.resize(kSteps);
  in.mmap.resize(kSteps);
  in.stats.resize(kSteps);
  for (size_t k = 0; k < kSteps; ++k) {
    const double stairs = std::floor(static_cast<double>(k) * (jumps + 1) / kSteps);
    const double jump = stairs * (8 << 20);
    const double frag = 1e6 + (live_jumps ? 0 : jump) + std::abs(small(rng));
    in.live[k] = 50e6 + (live_jumps ? jump : 0);
    in.mmap[k] = 1e6;
    in.rss[k] = (100 << 20) + in.live[k] + frag + 1e6 + 30e6 + big(rng);
    RowAllocStats& st = in.stats[k];
    st.has = true;
    st.allocator = "glibc";
    st.frag_bytes = static_cast<int64_t>(frag);
    st.cache_bytes = 200000;
    st.file_bytes = 30000000;
    st.anon_bytes = static_cast<int64_t>(in.rss[k]) - st.file_bytes;
    st.rss_source = 1;
    st.own_bytes = 4000000;
  }
  in.rss_growth =
      ClassifyGrowth(GrowthInput{in.rss, {}, {}, {}, {}, {}, {}, {}}, 0, GrowthOptions{});
  GrowthOptions exact;
  exact.min_rate /= 16;
  exact.min_window_growth /= 16;
  in.live_growth = ClassifyGrowth(GrowthInput{in.live, {}, {}, {}, {}, {}, {}, {}}, 0, exact);
  return in;
}

// Issue 9 items 4 and 5: an uneven rise (here staircases: a few jumps, flat
// between them) keeps the verdict of what it is made of, FRAGMENTATION, but
// its rate, whose 95 % interval reaches 0, is not established: the reason
// says so and the text prints the rise over the window instead. The planted
// staircases are checked to be such series first (the trend test
// significant, the interval reaching 0), so the test cannot pass vacuously.
// Deterministic: fixed seeds.
TEST(RssExplain, UnevenRiseKeepsItsVerdictWithoutARate) {
  int planted = 0;
  for (int jumps : {1, 2}) {
    for (uint32_t seed = 1; seed <= 10; ++seed) {
      const RssInput in = Staircase(jumps, seed);
      const Growth& rg = in.rss_growth;
      if (!(rg.p_value < GrowthOptions{}.p_value) || rg.slope_low > 0) continue;
      ++planted;
      const RssExplain x = ExplainRss(in, GrowthOptions{});
      const std::string at = absl::StrCat("jumps ", jumps, " seed ", seed, ": ", x.reason);
      EXPECT_EQ(x.verdict, "FRAGMENTATION") << at;
      EXPECT_FALSE(x.rate_established) << at;
      EXPECT_NE(x.reason.find("an uneven rise"), std::string::npos) << at;
      EXPECT_NE(x.reason.find("no rate is established"), std::string::npos) << at;
      // The rise over the window: the jumps of 8 MiB, within the noise.
      const double jumps_bytes = jumps * double{8 << 20};
      EXPECT_NEAR(x.rise_bytes, jumps_bytes, 512 * 1024) << at;
      EXPECT_GT(x.frag_per_step, 0) << at;
    }
  }
  EXPECT_GE(planted, 10) << "too few planted staircases have a significant trend and an "
                            "interval reaching 0: the test would check nothing";
}

// LEAK claims a rate, so an RSS LEAK whose rate's interval reaches 0 is not
// asserted (the rule every LEAK follows); the exact heap's line carries it.
TEST(RssExplain, NoLeakVerdictWhenTheRssIntervalReachesZero) {
  int planted = 0;
  for (int jumps : {1, 2}) {
    for (uint32_t seed = 1; seed <= 10; ++seed) {
      const RssInput in = Staircase(jumps, seed, /*live_jumps=*/true);
      const Growth& rg = in.rss_growth;
      if (!(rg.p_value < GrowthOptions{}.p_value) || rg.slope_low > 0) continue;
      if (!(in.live_growth.p_value < GrowthOptions{}.p_value)) continue;
      ++planted;
      const RssExplain x = ExplainRss(in, GrowthOptions{});
      const std::string at = absl::StrCat("jumps ", jumps, " seed ", seed, ": ", x.reason);
      EXPECT_EQ(x.verdict, "") << at;
      EXPECT_NE(x.reason.find("LEAK not asserted"), std::string::npos) << at;
      EXPECT_FALSE(x.rate_established) << at;
    }
  }
  EXPECT_GE(planted, 10) << "too few planted staircases: the test would check nothing";
}

// The other side: with the rate's interval above 0, the verdict stands with
// its rate established.
TEST(RssExplain, VerdictStandsWhenTheRssIntervalExcludesZero) {
  Rates r;
  r.frag = 1 << 20;
  for (uint32_t rep = 0; rep < 10; ++rep) {
    const RssInput in = Build(r, 2000 + rep);
    ASSERT_GT(in.rss_growth.slope_low, 0);
    const RssExplain x = ExplainRss(in, GrowthOptions{});
    EXPECT_EQ(x.verdict, "FRAGMENTATION");
    EXPECT_TRUE(x.rate_established);
    EXPECT_EQ(x.reason.find("uneven"), std::string::npos) << x.reason;
  }
}

TEST(RssExplain, NoVerdictWhenRssIsFlat) {
  Rates r;
  ExpectVerdict(r, "");
}

}  // namespace
}  // namespace memstep::analysis
