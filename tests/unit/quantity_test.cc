// The one grammar of sizes, rates and percentages (src/format/quantity.h):
// a table of accepted and refused forms, the --fail-on gates reading the same
// values, and a seeded fuzz: generated valid quantities parse to the value
// they were built from, and random or mutated strings never crash, never
// read past their length, and are either refused or parse to a finite value.

#include "src/format/quantity.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/analysis/gates.h"

namespace memstep::format {
namespace {

constexpr uint32_t kSize = kAcceptSize | kAcceptFraction;
constexpr uint32_t kGrowth = kAcceptSize | kAcceptFraction | kAcceptPerStep;
constexpr uint32_t kPercent = kAcceptPercent | kAcceptFraction;

double Parse(const std::string& s, uint32_t accept, const char** err = nullptr) {
  Quantity q;
  const char* e = ParseQuantity(s.data(), s.size(), accept, &q);
  if (err != nullptr) *err = e;
  return e == nullptr ? q.value : -1;
}

TEST(QuantityTest, AcceptedForms) {
  struct Case {
    const char* text;
    uint32_t accept;
    double value;
  } cases[] = {
      {"4096", kSize, 4096},
      {"0", kSize, 0},
      {"512K", kSize, 512 * 1024.0},
      {"512k", kSize, 512 * 1024.0},
      {"512KiB", kSize, 512 * 1024.0},
      {"512kib", kSize, 512 * 1024.0},
      {"512kB", kSize, 512000},
      {"512KB", kSize, 512000},
      {"1.5MiB", kSize, 1.5 * 1024 * 1024},
      {"1.5M", kSize, 1.5 * 1024 * 1024},
      {"1MB", kSize, 1e6},
      {"2GB", kSize, 2e9},
      {"2GiB", kSize, 2.0 * (1 << 30)},
      {"1T", kSize, 1024.0 * 1024 * 1024 * 1024},
      {"1TB", kSize, 1e12},
      {"  64 B ", kSize, 64},
      {"1MB/step", kGrowth, 1e6},
      {"1.5 MiB / step", kGrowth, 1.5 * 1024 * 1024},
      {"10", kPercent, 10},
      {"10%", kPercent, 10},
      {"2.5 %", kPercent, 2.5},
      {"100%", kPercent, 100},
  };
  for (const Case& c : cases) {
    const char* err = nullptr;
    EXPECT_DOUBLE_EQ(Parse(c.text, c.accept, &err), c.value) << c.text << ": " << (err ? err : "");
  }
}

TEST(QuantityTest, RefusedFormsSayWhy) {
  struct Case {
    const char* text;
    uint32_t accept;
    const char* why;
  } cases[] = {
      {"", kSize, "expected a number"},
      {"-1", kSize, "expected a number"},
      {"K", kSize, "expected a number"},
      {"1.", kSize, "expected digits after '.'"},
      {"1.5K", kAcceptSize, "expected a whole number"},
      {"12Q", kSize, "unknown unit"},
      {"1KIBB", kSize, "unknown unit"},
      {"1MB/step", kSize, "'/step' is not accepted here"},
      {"1MB/hour", kGrowth, "expected '/step' or '/s'"},
      {"10%", kSize, "a percentage is not accepted here"},
      {"1MiB", kPercent, "a size is not accepted here"},
      {"101%", kPercent, "a percentage above 100"},
      {"1 2", kSize, "unexpected characters after the quantity"},
  };
  for (const Case& c : cases) {
    const char* err = nullptr;
    EXPECT_EQ(Parse(c.text, c.accept, &err), -1) << c.text;
    ASSERT_NE(err, nullptr) << c.text;
    EXPECT_STREQ(err, c.why) << c.text;
  }
  EXPECT_NE(std::string(QuantityForms(kSize)).find("1000-based"), std::string::npos);
}

// The gates read thresholds with the same grammar: what was rejected before
// ('growth > 1MB/step') works, and every size means the same bytes.
TEST(QuantityTest, GatesReadTheSameGrammar) {
  for (const char* t : {"1MB", "1.5MiB", "512K", "2GB", "4096", "3 KiB"}) {
    Quantity q;
    ASSERT_EQ(ParseQuantity(t, kSize, &q), nullptr) << t;
    auto peak = analysis::ParseGate(std::string("peak > ") + t);
    ASSERT_TRUE(peak.ok()) << t << ": " << peak.status();
    EXPECT_DOUBLE_EQ(peak->threshold, q.value) << t;
    auto growth = analysis::ParseGate(std::string("growth > ") + t + "/step");
    ASSERT_TRUE(growth.ok()) << t << ": " << growth.status();
    EXPECT_DOUBLE_EQ(growth->threshold, q.value) << t;
  }
  auto bad = analysis::ParseGate("peak > 1MB/step");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("'/step' only applies to growth"),
            std::string::npos)
      << bad.status();
  auto unit = analysis::ParseGate("peak > 1XB");
  ASSERT_FALSE(unit.ok());
  EXPECT_NE(std::string(unit.status().message()).find("1000-based"), std::string::npos)
      << unit.status();
  EXPECT_FALSE(analysis::ParseGate("leaks > 1MB").ok());
  EXPECT_TRUE(analysis::ParseGate("leaks > 0").ok());
}

// Generated valid quantities parse to what they were built from (relative
// error 1e-12: decimal fractions are not exact in binary); random and
// mutated strings, parsed from an exact-size heap copy (ASan sees a read
// past the end), never crash and never yield a non-finite value. Seeded.
TEST(QuantityTest, SeededFuzz) {
  std::mt19937_64 rng(20261125);
  const char* units[] = {"",    "B",  "b",  "K", "k",   "KiB", "kib", "kB",  "KB", "M",
                         "MiB", "MB", "mb", "G", "GiB", "GB",  "T",   "TiB", "TB"};
  const double scales[] = {1,
                           1,
                           1,
                           1024,
                           1024,
                           1024,
                           1024,
                           1e3,
                           1e3,
                           1048576,
                           1048576,
                           1e6,
                           1e6,
                           1073741824.0,
                           1073741824.0,
                           1e9,
                           1099511627776.0,
                           1099511627776.0,
                           1e12};
  std::vector<std::string> valid;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t whole = rng() % 100000;
    const int frac_digits = static_cast<int>(rng() % 4);
    uint64_t frac = 0, den = 1;
    for (int d = 0; d < frac_digits; ++d) frac = frac * 10 + rng() % 10, den *= 10;
    const size_t u = rng() % (sizeof(units) / sizeof(units[0]));
    std::string text = std::to_string(whole);
    if (frac_digits > 0) {
      std::string f = std::to_string(frac);
      text += "." + std::string(static_cast<size_t>(frac_digits) - f.size(), '0') + f;
    }
    if (rng() % 3 == 0) text += " ";
    text += units[u];
    const bool per = rng() % 2 == 0;
    if (per) text += "/step";
    Quantity q;
    const char* err = ParseQuantity(text.data(), text.size(), kGrowth, &q);
    ASSERT_EQ(err, nullptr) << text;
    const double want = (static_cast<double>(whole) + static_cast<double>(frac) / den) * scales[u];
    ASSERT_NEAR(q.value, want, 1e-12 * want + 1e-9) << text;
    ASSERT_EQ(q.per, per ? kPerStep : kPerNone) << text;
    valid.push_back(text);
  }
  const std::string alphabet = "0123456789.%/ kKmMgGtTbBiIsStep\t-+xQ";
  int refused = 0, accepted = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string s;
    if (i % 2 == 0) {
      s = valid[rng() % valid.size()];
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits && !s.empty(); ++e) {
        const size_t at = rng() % s.size();
        switch (rng() % 3) {
          case 0:
            s.erase(at, 1);
            break;
          case 1:
            s.insert(at, 1, alphabet[rng() % alphabet.size()]);
            break;
          default:
            s[at] = static_cast<char>(rng() % 256);
            break;
        }
      }
    } else {
      const size_t len = rng() % 16;
      for (size_t k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
    }
    std::vector<char> exact(s.begin(), s.end());  // no terminator to lean on
    Quantity q;
    const uint32_t accept = static_cast<uint32_t>(rng() % 32);
    const char* err = ParseQuantity(exact.data(), exact.size(), accept, &q);
    if (err != nullptr) {
      ++refused;
      continue;
    }
    ++accepted;
    ASSERT_TRUE(std::isfinite(q.value)) << s;
    ASSERT_GE(q.value, 0) << s;
  }
  printf("fuzz: %d accepted, %d refused\n", accepted, refused);
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace memstep::format
