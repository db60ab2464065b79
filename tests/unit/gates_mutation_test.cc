// Fuzzes the --fail-on parser (src/analysis/gates.cc ParseGate) with a few
// tens of thousands of deterministic mutations of valid gates (fixed seed), so
// that every test run, and the sanitizer build in CI, exercises it: the parser
// never crashes or reads out of bounds, and every input either parses into a
// sane gate or is refused with a message that quotes it.

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/analysis/gates.h"

namespace memstep::analysis {
namespace {

const std::vector<std::string> kSeeds = {
    "growth > 1MiB/step",
    "peak(forward) >= 2GiB",
    "leaks > 0",
    "device_peak(backward) < 70GiB",
    "live_end <= 512KiB",
    "rss_peak > 1.5G",
    "device_growth > 1.5MiB/step",
    "live_growth > 0.25 M/step",
    "device_peak > 80G",
};

// Bytes that matter to the grammar, plus a few that must be refused cleanly.
const char kAlphabet[] =
    "()<>=/.0123456789 \t_-+eEKMGTBbik"
    "step\xff\x80";

std::string Mutate(std::string s, std::mt19937& rng) {
  std::uniform_int_distribution<int> op(0, 5);
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (op(rng)) {
      case 0:  // insert a grammar byte
        s.insert(at, 1, kAlphabet[pick(rng)]);
        break;
      case 1:  // delete one
        if (!s.empty() && at < s.size()) s.erase(at, 1);
        break;
      case 2:  // replace one
        if (!s.empty() && at < s.size()) s[at] = kAlphabet[pick(rng)];
        break;
      case 3:  // truncate
        s.resize(at);
        break;
      case 4:  // any byte, NUL included
        s.insert(at, 1, static_cast<char>(rng() & 0xff));
        break;
      default:  // repeat a piece (long numbers, nested parentheses)
        if (!s.empty()) s.insert(at, s.substr(0, 1 + rng() % s.size()));
        break;
    }
  }
  return s;
}

TEST(GatesMutationTest, SeedsParse) {
  for (const std::string& seed : kSeeds) {
    absl::StatusOr<Gate> g = ParseGate(seed);
    ASSERT_TRUE(g.ok()) << seed << ": " << g.status();
  }
}

TEST(GatesMutationTest, MutationsParseOrAreRefusedClearly) {
  std::mt19937 rng(0x6a7e5);  // fixed: the same 40,000 inputs every run
  int parsed = 0, refused = 0;
  for (int i = 0; i < 40000; ++i) {
    const std::string input = Mutate(kSeeds[i % kSeeds.size()], rng);
    absl::StatusOr<Gate> g = ParseGate(input);
    if (g.ok()) {
      ++parsed;
      EXPECT_FALSE(g->metric.empty()) << input;
      EXPECT_TRUE(std::isfinite(g->threshold)) << input;
      // A negative threshold only as a change (memstep diff) written with '-'.
      if (g->threshold < 0) {
        EXPECT_TRUE(g->relative && absl::StrContains(input, "-"))
            << input << " -> " << g->threshold;
      }
      if (!g->relative) {
        EXPECT_GE(g->threshold, 0) << input;
      }
      if (g->percent) {
        EXPECT_TRUE(g->relative && absl::StrContains(input, "%")) << input;
      }
      EXPECT_EQ(g->expression, input);
    } else {
      ++refused;
      EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << input;
      EXPECT_TRUE(absl::StartsWith(g.status().message(), "bad --fail-on expression '"))
          << g.status();
      EXPECT_TRUE(absl::StrContains(g.status().message(), "expected e.g.")) << g.status();
    }
  }
  // Both outcomes must be exercised, or the mutations test nothing.
  EXPECT_GT(parsed, 1000);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace memstep::analysis
