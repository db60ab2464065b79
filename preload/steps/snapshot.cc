// Memory snapshots (docs/gpu.md "Out of memory"): a MEM_SNAPSHOT record marks
// the moment of an out-of-memory error, or of a request, with the step, the
// stage, the device, the bytes asked for and what the driver said was free.
// What was live by site then is not copied here: the trace already holds it
// (every device allocation and free, and the host samples), and the report
// replays the trace up to the record's sequence number. So the record is
// small, costs nothing to take, and is in the file one writer cycle later
// (the writer is woken at once), before a crash that follows the error.
//
// Three ways in:
//  - a device allocation that fails with out of memory (cuda_account.cc
//    RecordFail, in the failing thread: it has a context, so free/total come
//    from the driver);
//  - memstep_out_of_memory() (the Python helper calls it when PyTorch reports
//    an OutOfMemoryError) and memstep_snapshot() (any time);
//  - the snapshot signal (MEMSTEP_SNAPSHOT_SIGNAL, SIGUSR2 by default): the
//    handler only sets a flag and wakes the writer (both async-signal-safe);
//    the writer thread writes the record. The handler is installed only if
//    the signal has its default disposition when the trace opens: a program
//    that handles (or ignores) the signal keeps it.

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

#include "memstep/memstep.h"
#include "preload/cuda/cuda.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "preload/steps/config.h"
#include "src/format/format.h"
#include "src/format/records.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace {

std::atomic<int> g_snap_pending{0};  // set by the handler, taken by the writer
std::atomic<bool> g_snap_installed{false};

void OnSnapshotSignal(int) {
  g_snap_pending.store(1, std::memory_order_relaxed);
  WakeWriter();  // an atomic and a futex system call: async-signal-safe
}

}  // namespace

void WriteMemSnapshot(ThreadState& t, uint8_t cause, int device, uint64_t requested, uint64_t free,
                      uint64_t total, uint8_t api, uint64_t error) {
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  if (!Recording()) return;
  uint8_t buf[fmt::kMaxEncodedSize<fmt::MemSnapshotRecord>];
  fmt::MemSnapshotRecord rec;
  rec.ts = NowRel();
  rec.seq = NextSeq();
  rec.tid = t.tid;
  rec.step = g_cur_step.load(std::memory_order_relaxed);
  rec.stage_str = g_cur_stage.load(std::memory_order_relaxed);
  rec.cause = cause;
  rec.device = device;
  rec.requested = requested;
  rec.free = free;
  rec.total = total;
  rec.api = api;
  rec.error = error;
  fmt::RecordEncoder e(buf, sizeof(buf));
  if (fmt::Encode(e, rec)) Push(t, buf, e.size());
  WakeWriter();
}

void InitSnapshotSignal() {
  const int sig = g_features.snapshot_signal;
  if (sig <= 0 || g_snap_installed.load(std::memory_order_relaxed)) return;
  struct sigaction old;
  memset(&old, 0, sizeof(old));
  if (sigaction(sig, nullptr, &old) != 0) return;
  const bool dfl = (old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_DFL;
  if (!dfl) {
    // The program's (or its parent's SIG_IGN): never taken over.
    ThreadState& t = t_state;
    GuardScope guard(t);
    EnsureThread(t);
    EmitNoticeRecord(t,
                     "the snapshot signal is already handled by the program: no snapshots on "
                     "request (MEMSTEP_SNAPSHOT_SIGNAL picks another)");
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSnapshotSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, nullptr) == 0) g_snap_installed.store(true, std::memory_order_relaxed);
}

void SnapshotWriterPoll() {
  if (g_snap_pending.load(std::memory_order_relaxed) == 0 ||
      g_snap_pending.exchange(0, std::memory_order_relaxed) == 0) {
    return;
  }
  // The writer thread has no CUDA context: free/total stay unknown (0); the
  // report shows the last step end's DEV_INFO instead.
  WriteMemSnapshot(t_state, fmt::kMemSnapSignal, -1, 0, 0, 0, 0, 0);
}

}  // namespace memstep::preload

using memstep::preload::ThreadState;

MEMSTEP_EXPORT void memstep_out_of_memory(int32_t device, uint64_t requested, uint64_t free_bytes,
                                          uint64_t total_bytes) {
  ThreadState& t = memstep::preload::t_state;
  if (t.guard || !memstep::preload::Recording()) return;
  memstep::preload::WriteMemSnapshot(t, memstep::format::kMemSnapTorchOom, device, requested,
                                     free_bytes, total_bytes, 0, 2);
}

MEMSTEP_EXPORT void memstep_snapshot(void) {
  ThreadState& t = memstep::preload::t_state;
  if (t.guard || !memstep::preload::Recording()) return;
  int device = -1;
  uint64_t free = 0, total = 0;
  if (!memstep::preload::CudaMemInfo(t, &device, &free, &total)) device = -1;
  memstep::preload::WriteMemSnapshot(t, memstep::format::kMemSnapRequest, device, 0, free, total, 0,
                                     0);
}
