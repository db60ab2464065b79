// The HTML report (formats.h FormatHtml, FormatHtmlData): its data object on
// the export tests' trace against a golden file (tests/unit/golden; rewrite
// with MEMSTEP_UPDATE_GOLDEN=1 and review the diff), its escaping of hostile
// names, and its aggregation of a run of 100,000 steps and 50,000 sites. The
// page itself is opened in Chromium by html_browser_test.py.

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/analysis/gates.h"
#include "src/report/formats.h"
#include "tests/unit/export_trace.h"
#include "tests/unit/html_test_data.h"
#include "tests/unit/test_util.h"

namespace memstep::report {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

analysis::Report Analyzed(const std::vector<uint8_t>& trace) {
  testing::TempDir dir;
  const std::string file = dir.File("t.trace");
  EXPECT_TRUE(testing::WriteFile(file, trace));
  analysis::Options o;
  o.symbolize = false;
  o.memory_limit = uint64_t{64} << 30;
  absl::StatusOr<analysis::Report> r = analysis::AnalyzeRun(file, o);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  r->path = "export.trace";  // not the temporary directory
  return *std::move(r);
}

void ExpectGolden(const std::string& name, const std::string& actual) {
  const std::string path = absl::StrCat(MEMSTEP_SOURCE_DIR, "/tests/unit/golden/", name);
  if (const char* u = getenv("MEMSTEP_UPDATE_GOLDEN"); u != nullptr && *u == '1') {
    ASSERT_TRUE(testing::WriteFile(path, actual)) << path;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << path << " missing (MEMSTEP_UPDATE_GOLDEN=1 writes it)";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "differs from " << path;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(HtmlGoldenTest, ExportTrace) {
  analysis::Report r = Analyzed(testing::ExportTrace());
  std::vector<analysis::Gate> gates;
  for (const char* g : {"growth > 32KiB/step", "peak(forward) > 1GiB"}) {
    gates.push_back(*analysis::ParseGate(g));
  }
  EXPECT_TRUE(analysis::EvaluateGates(gates, &r));
  const std::string data = FormatHtmlData(r);
  ExpectGolden("export.html-data.json", data);
  // The planted facts: 40 steps; the leak (64 KiB/step, exact) is the one
  // growing site; the stage named to break formats is there, escaped; the
  // alert at step 30 and the failed cudaMalloc at step 35 are markers.
  EXPECT_THAT(data, HasSubstr("\"steps\":40,"));
  EXPECT_THAT(data, HasSubstr("\"class\":\"LEAK\",\"kind\":\"host\""));
  EXPECT_THAT(data, HasSubstr("\"slope\":65536,"));
  EXPECT_THAT(data, HasSubstr("\"opt;im,\\\"zer\\\"\""));
  EXPECT_THAT(data, HasSubstr("[30,\"alert\","));
  EXPECT_THAT(data, HasSubstr("[35,\"fail\",\"cudaMalloc of 1.00 GiB failed: out of memory\"]"));
  EXPECT_THAT(data,
              HasSubstr("{\"expression\":\"growth \\u003e 32KiB/step\",\"metric\":\"growth\","));
  EXPECT_THAT(data, HasSubstr("\"passed\":false"));
  const std::string page = FormatHtml(r);
  EXPECT_THAT(page, HasSubstr(data));
  EXPECT_EQ(Count(page, "<script"), 2u);
  EXPECT_EQ(Count(page, "</script>"), 2u);
  // Nothing to fetch: the only URL is the SVG namespace (a name, not loaded).
  EXPECT_EQ(Count(page, "://"), 1u);
  EXPECT_THAT(page, HasSubstr("'http://www.w3.org/2000/svg'"));
  EXPECT_THAT(page, Not(HasSubstr("src=")));
  EXPECT_THAT(page, Not(HasSubstr("href=")));
}

TEST(HtmlTest, HostileNamesAreEscaped) {
  analysis::Report r = Analyzed(testing::HostileTrace());
  r.path = "</title><script>alert(1)</script>";
  ASSERT_FALSE(r.sites.empty());
  ASSERT_EQ(r.sites[0].frames.at(0).function, testing::kHostileFunction);
  ASSERT_FALSE(r.stage_peaks.empty());
  ASSERT_EQ(r.stage_peaks[0].stage, testing::kHostileStage);
  const std::string page = FormatHtml(r);
  // Only the page's own two script elements open and close; no comment opens;
  // U+2028 (a line break to old JavaScript parsers) is escaped.
  EXPECT_EQ(Count(page, "<script"), 2u);
  EXPECT_EQ(Count(page, "</script"), 2u);
  EXPECT_EQ(Count(page, "<!--"), 0u);
  EXPECT_EQ(Count(page, "\xE2\x80\xA8"), 0u);
  EXPECT_THAT(page, HasSubstr("\\u003cscript\\u003ealert(\\\"x\\\")\\u003c/script\\u003e"));
  EXPECT_THAT(page, HasSubstr("\\u2028"));
  EXPECT_THAT(page, HasSubstr("<title>memstep report: &lt;/title&gt;&lt;script&gt;alert(1)"));
}

TEST(HtmlTest, LargeRunsAreAggregated) {
  const analysis::Report r = testing::ScaleReport(100000, 50000);
  const std::string data = FormatHtmlData(r);
  // 1,000 chart points, 50 growing sites of 60 points, pruned flame graphs:
  // well under 2 MB where the per-step and per-site data are hundreds.
  EXPECT_LT(data.size(), 2u << 20);
  EXPECT_THAT(data, HasSubstr("\"steps\":100000,\"per_bucket\":100,"));
  EXPECT_THAT(data, HasSubstr("\"more_sites\":10,"));
  EXPECT_THAT(data, HasSubstr("\"sites\":49940,"));  // the NO_TREND rest, summed
  EXPECT_THAT(data, HasSubstr("smaller frames]"));
  EXPECT_THAT(data, HasSubstr("\"alert_count\":500,"));
}

}  // namespace
}  // namespace memstep::report
