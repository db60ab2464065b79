// Writes the two runs html_diff_browser_test.py compares with
// `memstep diff BASE NEW --format html`:
//   diff_html_writer BASE_TRACE NEW_TRACE
// Both: 40 steps (RANK 0), stage "forward" keeps a block a step at stack
// 0x1000 and holds a temporary (its peak), stage NAME (a hostile string:
// </script>, markup, quotes and &) allocates and frees. BASE keeps 16 KiB a
// step and holds 1 MiB; NEW keeps 64 KiB and holds 2 MiB, and leaks 32 KiB a
// step at a new stack 0x4000 in the hostile stage. Every record is exact.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/unit/test_util.h"
#include "tests/unit/trace_builder.h"

namespace {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;
const char kHostile[] = "</script><script>document.title='pwned'</script><b>&amp;\"'</b>";

memstep::format::Counters C(uint64_t alloc, uint64_t live, uint64_t peak, uint64_t count) {
  memstep::format::Counters c{};
  c.alloc_bytes = alloc;
  c.alloc_count = count;
  c.live_bytes = live;
  c.peak_bytes = peak;
  return c;
}

std::vector<uint8_t> Trace(bool next) {
  memstep::reader::TraceHeaderInfo info;
  info.pid = next ? 2000 : 1000;
  info.tlvs = {{memstep::format::kTlvRankEnv, std::string("RANK=0") + std::string(1, '\0')}};
  memstep::reader::TraceBuilder b(info);
  b.String(1, "forward");
  b.String(2, kHostile);
  b.Stack(1, {0x1000});
  b.Stack(3, {0x3000});
  b.Stack(4, {0x4000});
  const uint64_t keep = next ? 64 * kKiB : 16 * kKiB;
  const uint64_t temp = next ? 2 * kMiB : kMiB;
  uint64_t ts = 1, addr = 0x100000, alloc = 0, live = 0, count = 0, peak = 0;
  for (uint64_t step = 0; step < 40; ++step) {
    b.Step(ts++, step, 0, C(alloc, live, peak, count));
    b.Stage(ts++, 1, step, 0, C(alloc, live, live, count));
    b.Alloc(ts++, 1, addr++, keep, 0, 0, step, 1);
    const uint64_t t = addr++;
    b.Alloc(ts++, 3, t, temp, 0, 0, step, 1);
    b.Free(ts++, t);
    alloc += keep + temp;
    count += 2;
    live += keep;
    peak = std::max(peak, live + temp);
    b.Stage(ts++, 1, step, 1, C(alloc, live, live + temp, count));
    b.Stage(ts++, 2, step, 0, C(alloc, live, live, count));
    if (next) {
      b.Alloc(ts++, 4, addr++, 32 * kKiB, 0, 0, step, 2);
      alloc += 32 * kKiB;
      live += 32 * kKiB;
      ++count;
    }
    b.Stage(ts++, 2, step, 1, C(alloc, live, live, count));
    b.Step(ts++, step, 1, C(alloc, live, peak, count));
  }
  b.Trailer(ts++, C(alloc, live, peak, count), true);
  return b.Finish();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: diff_html_writer BASE_TRACE NEW_TRACE\n");
    return 1;
  }
  return memstep::testing::WriteFile(argv[1], Trace(false)) &&
                 memstep::testing::WriteFile(argv[2], Trace(true))
             ? 0
             : 1;
}
