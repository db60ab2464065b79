// RSS growth explained, end to end (docs/analysis.md "RSS growth explained"):
// planted programs whose RSS grows by heap fragmentation pinned by a small
// leak, by glibc's top chunk (caching), or by a true leak, run under
// libmemstep.so (and one over jemalloc); the report must say which, with the
// allocator's statistics recorded at step ends.
//
// Sampled blocks are served from memstep's own region, not the program's
// allocator; at interval 1 every block would be, and glibc's heap would see
// nothing. So rss-frag runs at a fixed T = kRssFragInterval (64 KiB, no
// progressive sampling, fixed seed): each 32-124 KiB medium block is sampled
// (and leaves no hole) with p = 1 - exp(-size/T) <= 86 %, most at 40-70 %, and
// the 1 KiB kept blocks with p = 1.6 %, about 0.5 samples per step, 30 over the
// run: enough to classify the pin's site. rss-frag frees about 32 x (32 KiB +
// 1 KiB x step) per step into pinned holes and keeps 32 KiB; rss-cache grows
// the top chunk by 512 KiB per step; rss-leak keeps 512 KiB per step
// (interval 1: exact).

#include <unistd.h>

#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "src/analysis/analysis.h"
#include "src/report/report.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/planted_facts.h"

namespace memstep::e2e {
namespace {

using namespace facts;  // NOLINT

constexpr char kJemalloc[] = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
constexpr uint64_t kRssFragInterval = 64 * 1024;

analysis::Report RunRss(const TempDir& dir, const std::string& mode, const std::string& after = "",
                        uint64_t interval = 1, const std::string& extra_env = "") {
  std::vector<std::string> env = TracedEnv(dir.path(), interval);
  if (!extra_env.empty()) env.push_back(extra_env);
  // A fixed T and seed: the same samples every run.
  env.push_back("MEMSTEP_PROGRESSIVE=0");
  env.push_back("MEMSTEP_SEED=9");
  PreloadAfter(&env, after);
  ChildResult r = RunChild({PlantedProgram(), mode}, env);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto report = analysis::AnalyzeRun(dir.path());
  EXPECT_TRUE(report.ok()) << report.status();
  if (!report.ok()) return analysis::Report{};
  EXPECT_EQ(report->processes.size(), 1u);
  return *std::move(report);
}

// The class the text report prints on its "RSS:" line and the JSON's
// rss_growth.class must be the same; LEAK only with rising live bytes.
void ExpectReportsAgree(const analysis::Report& report, const std::string& want) {
  ASSERT_EQ(report.processes.size(), 1u);
  const analysis::ProcessSummary& p = report.processes[0];
  const std::string text = report::FormatText(report);
  const std::string json = report::FormatJson(report);
  EXPECT_NE(text.find("    RSS: " + want + "  "), std::string::npos) << text;
  EXPECT_NE(json.find("\"rss_growth\":{\"class\":\"" + want + "\""), std::string::npos);
  EXPECT_NE(json.find("\"rss_explain\":{\"verdict\":\"" + want + "\""), std::string::npos);
  const bool live_rises = p.rss_explain.live_p < 0.01 && p.rss_explain.live_per_step > 0;
  const bool mmap_rises = p.rss_explain.mmap_p < 0.01 && p.rss_explain.mmap_per_step > 0;
  if (!live_rises && !mmap_rises) {
    EXPECT_EQ(text.find("    RSS: LEAK"), std::string::npos) << text;
    EXPECT_EQ(json.find("\"rss_growth\":{\"class\":\"LEAK\""), std::string::npos);
  }
}

std::string Describe(const analysis::ProcessSummary& p) {
  const analysis::RssExplain& x = p.rss_explain;
  return "verdict '" + x.verdict + "' (" + x.reason + ") allocator " + x.allocator + " stat_rows " +
         std::to_string(x.stat_rows) + " rss " + std::to_string(x.rss_per_step) + " live " +
         std::to_string(x.live_per_step) + " frag " + std::to_string(x.frag_per_step) + " cache " +
         std::to_string(x.cache_per_step) + " mmap " + std::to_string(x.mmap_per_step) + " file " +
         std::to_string(x.file_per_step) + " (" + x.file_source + ") own " +
         std::to_string(x.own_per_step) + " other " + std::to_string(x.other_per_step) + " arena " +
         std::to_string(x.arena) + " of " + std::to_string(x.arenas) + " rss class " +
         analysis::GrowthClassName(p.rss_growth.cls);
}

TEST(RssExplainE2E, FragmentationPinnedBySmallLeak) {
  TempDir dir;
  const analysis::Report report = RunRss(dir, "rss-frag", "", kRssFragInterval);
  ASSERT_EQ(report.processes.size(), 1u);
  const analysis::ProcessSummary& p = report.processes[0];
  const analysis::RssExplain& x = p.rss_explain;
  SCOPED_TRACE(Describe(p));
  EXPECT_EQ(x.verdict, "FRAGMENTATION");
  EXPECT_EQ(x.allocator, "glibc");
  EXPECT_TRUE(p.fragmentation);
  // Rate-limited: mallinfo2 walks the ~2,000 free chunks (~80 us here), so
  // the collection runs every second or third step end; the split needs 10.
  EXPECT_TRUE(x.has_allocator);
  EXPECT_GE(x.stat_rows, 10u);
  // Free space inside the heap grows by at least half of what is freed into
  // the holes per step (the smallest step's), and far faster than the leak.
  EXPECT_GT(x.frag_per_step, 0.1 * kRssFragBlocks * kRssFragBase);
  EXPECT_GT(x.frag_per_step, 5 * x.live_per_step);
  EXPECT_GT(x.live_per_step, 0);
  // The leaking site is named as the pin, with the ratio.
  // (PlantedRssPin has two sites: its malloc, freed by the realloc, and the
  // realloc, kept.)
  const SiteTotals pin = FindSites(report, "PlantedRssPin");
  ASSERT_GE(pin.sites, 1) << DescribeSites(report);
  ASSERT_FALSE(x.pins.empty());
  bool named = false;
  for (const analysis::Site* s : pin.matches) named |= s->id == x.pins[0].site_id;
  EXPECT_TRUE(named) << "pin site #" << x.pins[0].site_id << "\n" << DescribeSites(report);
  EXPECT_GT(x.pins[0].ratio, 5);
  // Per arena (malloc_info): the main arena's free chunks grow, not its top.
  EXPECT_EQ(x.arena, 0);
  EXPECT_GT(x.arena_frag_per_step, 0.9 * x.frag_per_step);
  EXPECT_LT(x.arena_top_per_step, 0.1 * x.frag_per_step);
  // memstep's own memory is measured and subtracted (here its sampled-block
  // region keeps the shrunk blocks' old slots): little is left unexplained.
  EXPECT_TRUE(x.has_own);
  EXPECT_LT(std::abs(x.other_per_step), 0.1 * x.rss_per_step);
  ExpectReportsAgree(report, "FRAGMENTATION");
}

TEST(RssExplainE2E, TopChunkIsCaching) {
  TempDir dir;
  const analysis::Report report = RunRss(dir, "rss-cache");
  ASSERT_EQ(report.processes.size(), 1u);
  const analysis::ProcessSummary& p = report.processes[0];
  const analysis::RssExplain& x = p.rss_explain;
  SCOPED_TRACE(Describe(p));
  EXPECT_EQ(x.verdict, "CACHING");
  EXPECT_GT(x.cache_per_step, 0.5 * kRssCacheUnit);
  EXPECT_NE(p.live_growth.cls, analysis::GrowthClass::kLeak);
  EXPECT_EQ(x.arena, 0);
  EXPECT_GT(x.arena_top_per_step, 0.5 * kRssCacheUnit);
  ExpectReportsAgree(report, "CACHING");
}

// Without the allocator's statistics (MEMSTEP_ALLOC_STATS=0) the same growth
// is not explained, and still never called a LEAK.
TEST(RssExplainE2E, WithoutStatisticsTopChunkIsUnexplained) {
  TempDir dir;
  const analysis::Report report = RunRss(dir, "rss-cache", "", 1, "MEMSTEP_ALLOC_STATS=0");
  ASSERT_EQ(report.processes.size(), 1u);
  const analysis::ProcessSummary& p = report.processes[0];
  const analysis::RssExplain& x = p.rss_explain;
  SCOPED_TRACE(Describe(p));
  EXPECT_EQ(x.stat_rows, 0u);
  EXPECT_FALSE(x.has_allocator);
  EXPECT_EQ(x.verdict, "UNEXPLAINED");
  ExpectReportsAgree(report, "UNEXPLAINED");
}

TEST(RssExplainE2E, TrueLeakIsLeak) {
  TempDir dir;
  const analysis::Report report = RunRss(dir, "rss-leak");
  ASSERT_EQ(report.processes.size(), 1u);
  const analysis::ProcessSummary& p = report.processes[0];
  const analysis::RssExplain& x = p.rss_explain;
  SCOPED_TRACE(Describe(p));
  EXPECT_EQ(x.verdict, "LEAK");
  EXPECT_EQ(x.allocator, "glibc");
  EXPECT_NEAR(x.live_per_step, kRssLeakBlocks * kRssLeakSize, 0.05 * kRssLeakBlocks * kRssLeakSize);
  EXPECT_FALSE(p.fragmentation);
  ExpectReportsAgree(report, "LEAK");
}

// A shared file mapping written a little further each step: file-backed pages
// grow (from smaps_rollup: Rss - Anonymous), the heap does not.
TEST(RssExplainE2E, GrowingFileMappingIsFile) {
  TempDir dir;
  const analysis::Report report = RunRss(dir, "rss-file");
  ASSERT_EQ(report.processes.size(), 1u);
  const analysis::ProcessSummary& p = report.processes[0];
  const analysis::RssExplain& x = p.rss_explain;
  SCOPED_TRACE(Describe(p));
  EXPECT_EQ(x.verdict, "FILE");
  EXPECT_TRUE(x.has_file);
  // smaps_rollup has its own rate limit (1000 times its cost): the split
  // comes from it when it was read at 10 steps of the window, else statm.
  EXPECT_NE(x.file_source, "");
  EXPECT_GT(x.median_smaps_ns, 0);
  EXPECT_NEAR(x.file_per_step, kRssFileUnit, 0.1 * kRssFileUnit);
  EXPECT_LT(x.anon_per_step, 0.1 * kRssFileUnit);
  EXPECT_NE(p.live_growth.cls, analysis::GrowthClass::kLeak);
  ExpectReportsAgree(report, "FILE");
}

// jemalloc preloaded after memstep: its own statistics (mallctl) are used.
TEST(RssExplainE2E, JemallocStatisticsAreUsed) {
  ASSERT_EQ(access(kJemalloc, R_OK), 0)
      << "no " << kJemalloc << " (scripts/install-deps.sh installs libjemalloc-dev)";
  TempDir dir;
  const analysis::Report report = RunRss(dir, "rss-leak", kJemalloc);
  ASSERT_EQ(report.processes.size(), 1u);
  const analysis::ProcessSummary& p = report.processes[0];
  const analysis::RssExplain& x = p.rss_explain;
  SCOPED_TRACE(Describe(p));
  EXPECT_EQ(x.allocator, "jemalloc");
  EXPECT_TRUE(x.has_allocator);
  // The statistics are rate-limited by their own cost (at most 1 % of wall
  // time), so how many steps have them depends on the machine's load (26 of
  // 60 in the sanitizer pass of a loaded 2-core CI run): the analysis needs 10.
  EXPECT_GE(x.stat_rows, 10u);
  EXPECT_EQ(x.verdict, "LEAK");
  EXPECT_EQ(x.arena, -1);  // no glibc arenas
  ExpectReportsAgree(report, "LEAK");
}

}  // namespace
}  // namespace memstep::e2e
