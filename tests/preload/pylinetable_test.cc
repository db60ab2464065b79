// The line-table decoders (preload/python/pylinetable.h) against the lines the
// real interpreters report, and Layout313FromDebugOffsets
// (preload/python/pyframes_layout.h) against the offsets CPython 3.13
// publishes. The fixtures in tests/preload/data were written by
// tests/python/gen_linetable_fixtures.py with pyenv's CPython 3.10.13,
// 3.11.7, 3.12.1 and 3.13.0; this test needs none of them.

#include "preload/python/pylinetable.h"

#include <stdint.h>
#include <string.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "preload/python/pyframes_layout.h"

namespace memstep::preload {
namespace {

struct Range {
  int64_t start, end;
  int line;
};
struct Code {
  std::string name;
  int firstlineno = 0;
  std::vector<uint8_t> table;
  std::vector<Range> ranges;
};
struct Fixture {
  std::string version;
  std::vector<Code> codes;
  std::vector<uint8_t> debug_offsets;
};

std::vector<uint8_t> FromHex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

Fixture Load(const std::string& name) {
  Fixture f;
  std::ifstream in(std::string(MEMSTEP_PYLINETABLE_DATA) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream is(line);
    std::string kind;
    is >> kind;
    if (kind == "version") {
      is >> f.version;
    } else if (kind == "debug_offsets") {
      std::string hex;
      is >> hex;
      f.debug_offsets = FromHex(hex);
    } else if (kind == "code") {
      Code c;
      std::string hex;
      is >> c.name >> c.firstlineno >> hex;
      c.table = FromHex(hex);
      f.codes.push_back(c);
    } else if (kind == "range") {
      Range r;
      is >> r.start >> r.end >> r.line;
      f.codes.back().ranges.push_back(r);
    }
  }
  return f;
}

using LineFn = int (*)(const uint8_t*, size_t, int, int64_t);

// Every instruction of every code object decodes to the interpreter's line;
// past the end, -1; a negative offset, co_firstlineno.
void CheckFixture(const char* file, const char* version, LineFn fn) {
  const Fixture f = Load(file);
  ASSERT_EQ(f.version, version);
  ASSERT_GE(f.codes.size(), 8u);
  int checked = 0, none = 0, far = 0;
  for (const Code& c : f.codes) {
    // An exact-size copy: a read past the table trips the sanitizers.
    std::vector<uint8_t> t(c.table);
    int64_t last = 0;
    for (const Range& r : c.ranges) {
      for (int64_t off = r.start; off < r.end; off += 2) {
        ASSERT_EQ(fn(t.data(), t.size(), c.firstlineno, off), r.line)
            << file << " " << c.name << " offset " << off;
        ++checked;
        none += r.line == -1;
        far += r.line > 255;
      }
      last = r.end;
    }
    EXPECT_EQ(fn(t.data(), t.size(), c.firstlineno, last), -1) << c.name;
    EXPECT_EQ(fn(t.data(), t.size(), c.firstlineno, -1), c.firstlineno) << c.name;
  }
  // The fixture covers what it is meant to: instructions without a line and
  // lines far from the first.
  EXPECT_GT(checked, 100);
  EXPECT_GT(none, 0);
  EXPECT_GT(far, 0);
}

TEST(PyLineTable, Cpython310) { CheckFixture("pylinetable_310.txt", "3.10", pyline::Line310); }
TEST(PyLineTable, Cpython311) { CheckFixture("pylinetable_311.txt", "3.11", pyline::Line311); }
TEST(PyLineTable, Cpython312) { CheckFixture("pylinetable_312.txt", "3.12", pyline::Line311); }
TEST(PyLineTable, Cpython313) { CheckFixture("pylinetable_313.txt", "3.13", pyline::Line311); }

// The worked examples of pylinetable.h.
TEST(PyLineTable, WorkedExamples) {
  const uint8_t t310[] = {0x06, 0x01, 0x08, 0x01, 0x02, 0x80};
  EXPECT_EQ(pyline::Line310(t310, sizeof(t310), 4, 0), 5);
  EXPECT_EQ(pyline::Line310(t310, sizeof(t310), 4, 5), 5);
  EXPECT_EQ(pyline::Line310(t310, sizeof(t310), 4, 6), 6);
  EXPECT_EQ(pyline::Line310(t310, sizeof(t310), 4, 14), -1);
  EXPECT_EQ(pyline::Line310(t310, sizeof(t310), 4, 16), -1);
  // 1 0000 000: one unit, short form (one byte of columns); 1 1101 000: one
  // unit, no columns, line delta +1 (varint 2); 1 1111 000: one unit, none.
  const uint8_t t311[] = {0x80, 0x00, 0xE8, 0x02, 0xF8};
  EXPECT_EQ(pyline::Line311(t311, sizeof(t311), 4, 0), 4);
  EXPECT_EQ(pyline::Line311(t311, sizeof(t311), 4, 2), 5);
  EXPECT_EQ(pyline::Line311(t311, sizeof(t311), 4, 4), -1);
  EXPECT_EQ(pyline::Line311(t311, sizeof(t311), 4, 6), -1);
  // Long form: line delta -3 (varint 7), end line, columns; then a varint of
  // two groups (+64: 128 = 0x40 | 0, 0x02).
  const uint8_t longf[] = {0xF0, 0x07, 0x00, 0x01, 0x02, 0xE8, 0x40, 0x02};
  EXPECT_EQ(pyline::Line311(longf, sizeof(longf), 10, 0), 7);
  EXPECT_EQ(pyline::Line311(longf, sizeof(longf), 10, 2), 71);
}

// Truncated tables (every prefix of every fixture table) are read within
// their bounds and give -1 or a line, never a crash.
TEST(PyLineTable, TruncatedTables) {
  const char* files[] = {"pylinetable_310.txt", "pylinetable_313.txt"};
  for (int k = 0; k < 2; ++k) {
    const Fixture f = Load(files[k]);
    LineFn fn = k == 0 ? pyline::Line310 : pyline::Line311;
    for (const Code& c : f.codes) {
      for (size_t n = 0; n < c.table.size(); ++n) {
        std::vector<uint8_t> t(c.table.begin(), c.table.begin() + static_cast<ptrdiff_t>(n));
        for (int64_t off = 0; off < 64; off += 2) {
          const int line = fn(t.data(), t.size(), c.firstlineno, off);
          EXPECT_TRUE(line == -1 || line >= 0) << line;
        }
      }
    }
  }
  // Continuation bits to the end: no line, no overrun.
  const uint8_t runaway[] = {0xE8, 0x40, 0x40, 0x40};
  EXPECT_EQ(pyline::Line311(runaway, sizeof(runaway), 1, 0), -1);
}

// Random mutations of the real tables and random bytes (fixed seed): every
// answer is -1 or a line reachable from the table, and nothing is read past
// the end (the sanitizers watch the exact-size copies).
TEST(PyLineTable, RandomMutationsStayInBounds) {
  std::mt19937 rng(1);
  const char* files[] = {"pylinetable_310.txt", "pylinetable_311.txt", "pylinetable_312.txt",
                         "pylinetable_313.txt"};
  int decoded = 0;
  for (int k = 0; k < 4; ++k) {
    const Fixture f = Load(files[k]);
    LineFn fn = k == 0 ? pyline::Line310 : pyline::Line311;
    for (const Code& c : f.codes) {
      for (int round = 0; round < 200; ++round) {
        std::vector<uint8_t> t(c.table);
        if (round % 4 == 3) {  // random bytes of a random length
          t.resize(rng() % 64);
          for (uint8_t& b : t) b = static_cast<uint8_t>(rng());
        } else {
          for (int m = 0; m < 1 + round % 3 && !t.empty(); ++m) {
            t[rng() % t.size()] = static_cast<uint8_t>(rng());
          }
          t.resize(t.size() - rng() % (t.size() / 2 + 1));
        }
        // Past what the table can cover (3.10: 255 bytes per pair; 3.11+:
        // 8 code units per entry of at least one byte), no line.
        const int64_t covered = k == 0 ? int64_t{255} * static_cast<int64_t>(t.size() / 2)
                                       : int64_t{16} * static_cast<int64_t>(t.size());
        for (int64_t off = -2; off < 512; off += 2) {
          const int line = fn(t.data(), t.size(), c.firstlineno, off);
          if (off < 0) {
            EXPECT_EQ(line, c.firstlineno);
          } else if (off >= covered) {
            EXPECT_EQ(line, -1) << off;
          }
          ++decoded;
        }
      }
    }
  }
  EXPECT_GT(decoded, 100000);
}

// The offsets CPython 3.13.0 publishes give the layout of its headers.
TEST(PyLayout313, FromRealDebugOffsets) {
  const Fixture f = Load("pylinetable_313.txt");
  ASSERT_EQ(f.debug_offsets.size(), size_t{pylayout::kDbgSize313});
  pylayout::MemstepPyLayout l;
  const char* why =
      pylayout::Layout313FromDebugOffsets(f.debug_offsets.data(), f.debug_offsets.size(), &l);
  ASSERT_EQ(why, nullptr) << why;
  EXPECT_EQ(memcmp(&l, &pylayout::kLayout313, sizeof(l)), 0);
}

TEST(PyLayout313, RefusesWhatItCannotRead) {
  const Fixture f = Load("pylinetable_313.txt");
  ASSERT_EQ(f.debug_offsets.size(), size_t{pylayout::kDbgSize313});
  pylayout::MemstepPyLayout l;
  auto refuse = [&](uint32_t off, uint64_t value, const char* expect) {
    std::vector<uint8_t> d(f.debug_offsets);
    memcpy(d.data() + off, &value, sizeof(value));
    const char* why = pylayout::Layout313FromDebugOffsets(d.data(), d.size(), &l);
    ASSERT_NE(why, nullptr);
    EXPECT_NE(strstr(why, expect), nullptr) << why;
  };
  refuse(0, 0x7970677562656478ull + 1, "cookie");                          // not "xdebugpy"
  refuse(pylayout::kDbgVersion, 0x030E00A0, "not those of CPython 3.13");  // 3.14
  refuse(pylayout::kDbgFreeThreaded, 1, "free-threaded");
  refuse(pylayout::kDbgCodeLinetable, 0, "incomplete");
  refuse(pylayout::kDbgTstateCurrentFrame, 1u << 20, "out of range");
  EXPECT_NE(pylayout::Layout313FromDebugOffsets(f.debug_offsets.data(), 100, &l), nullptr);
  // Another code object layout: published offsets used, _co_firsttraceable unknown.
  std::vector<uint8_t> d(f.debug_offsets);
  const uint64_t adaptive = pylayout::kLayout313.code_adaptive + 8;
  memcpy(d.data() + pylayout::kDbgCodeAdaptive, &adaptive, sizeof(adaptive));
  ASSERT_EQ(pylayout::Layout313FromDebugOffsets(d.data(), d.size(), &l), nullptr);
  EXPECT_EQ(l.code_adaptive, adaptive);
  EXPECT_EQ(l.code_basicsize, adaptive);
  EXPECT_EQ(l.code_firsttraceable, 0u);
}

}  // namespace
}  // namespace memstep::preload
