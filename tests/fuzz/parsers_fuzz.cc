// libFuzzer entry point for the text parsers users type into: the one quantity
// grammar (src/format/quantity.h: MEMSTEP_* sizes, CLI sizes and percentages)
// and the --fail-on gate parser (src/analysis/gates.cc). Built with clang by
// scripts/fuzz.sh; tests/unit/fuzz_regress_test.cc runs the same entry point
// over tests/fuzz/regress/parsers/ with GCC in every CI run.
//
// Input: byte 0 picks the accepted forms (its low five bits are a
// QuantityAccept mask); the rest is the text. Beyond "no crash", each parse
// that succeeds must satisfy the grammar's promises; a broken one traps, so
// the fuzzer reports it as a crash:
//  - the NUL-terminated and the length-delimited parsers agree;
//  - a value is finite, >= 0 and <= 1e300; a percentage is <= 100;
//  - a unit or "/step" or "/s" appears only where the mask accepts it;
//  - `bytes` is the value rounded down when it fits in 64 bits;
//  - a gate has a known metric and op, a finite threshold (>= 0 unless it
//    is a change between two runs), a stage only on peak(...) metrics, and
//    keeps the expression it was given; a percentage is a change; a change
//    is written with a sign or a '%'; site_growth is always a change; a
//    negative threshold comes from a '-'.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "src/analysis/gates.h"
#include "src/format/quantity.h"

namespace {

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void FuzzQuantity(const char* s, size_t n, uint32_t accept) {
  using namespace memstep::format;  // NOLINT
  Quantity q;
  const char* err = ParseQuantity(s, n, accept, &q);
  if (memchr(s, '\0', n) == nullptr) {
    std::string z(s, n);
    Quantity q2;
    const char* err2 = ParseQuantity(z.c_str(), accept, &q2);
    Check((err == nullptr) == (err2 == nullptr));
    if (err == nullptr) Check(q.value == q2.value && q.unit == q2.unit && q.per == q2.per);
  }
  if (err != nullptr) {
    Check(err[0] != '\0');
    return;
  }
  Check(std::isfinite(q.value) && q.value >= 0 && q.value <= 1e300);
  if (q.unit == kQuantityPercent) Check((accept & kAcceptPercent) != 0 && q.value <= 100);
  if (q.unit == kQuantityBytes || q.unit == kQuantityNone) Check((accept & kAcceptSize) != 0);
  if (q.per == kPerStep) Check((accept & kAcceptPerStep) != 0);
  if (q.per == kPerSecond) Check((accept & kAcceptPerSecond) != 0);
  if ((accept & kAcceptFraction) == 0) Check(memchr(s, '.', n) == nullptr);
  if (q.fits) {
    Check(q.value < 18446744073709551616.0);
    Check(static_cast<double>(q.bytes) <= q.value &&
          q.value - static_cast<double>(q.bytes) < 1.0 + q.value * 1e-15);
  } else {
    Check(q.bytes == UINT64_MAX);
  }
}

void FuzzGate(const char* s, size_t n) {
  using memstep::analysis::Gate;
  const std::string text(s, n);
  absl::StatusOr<Gate> g = memstep::analysis::ParseGate(text);
  if (!g.ok()) {
    Check(!g.status().message().empty());
    return;
  }
  static const char* const kMetrics[] = {"growth",   "live_growth", "peak",        "live_end",
                                         "rss_peak", "leaks",       "device_peak", "device_growth",
                                         "churn",    "site_growth"};
  bool known = false;
  for (const char* m : kMetrics) known = known || g->metric == m;
  Check(known);
  Check(g->op == Gate::Op::kGt || g->op == Gate::Op::kGe || g->op == Gate::Op::kLt ||
        g->op == Gate::Op::kLe);
  Check(std::isfinite(g->threshold));
  if (!g->relative) Check(g->threshold >= 0);
  if (g->percent) Check(g->relative && memchr(s, '%', n) != nullptr);
  if (g->relative)
    Check(memchr(s, '+', n) != nullptr || memchr(s, '-', n) != nullptr || g->percent);
  if (g->threshold < 0) Check(g->relative && memchr(s, '-', n) != nullptr);
  if (g->metric == "site_growth") Check(g->relative);
  if (!g->stage.empty()) Check(g->metric == "peak" || g->metric == "device_peak");
  Check(g->expression == text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint32_t accept = data[0] & 0x1f;
  const char* text = reinterpret_cast<const char*>(data + 1);
  const size_t n = size - 1;
  FuzzQuantity(text, n, accept);
  FuzzGate(text, n);
  return 0;
}
