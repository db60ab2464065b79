// Tensor blocks inside PyTorch's caching allocator: the two C functions the
// Python helper (python/memstep/_torch_blocks.py) calls at each step end for
// every block that appeared or disappeared since the previous one
// (docs/gpu.md "Tensor blocks inside the caching allocator").
//
// Contract:
//  - A block is an inner layer: its DEV_ALLOC / DEV_FREE (kind tensor_block,
//    api torch.cuda.caching_allocator) touch no address table and no device
//    counter; the segments around it (cudaMalloc, cuMemCreate) stay the
//    device totals.
//  - Sampling: the device sampler's per-thread Poisson byte countdown decides
//    (memstep_torch_block_sample), so blocks are sampled at the same mean
//    interval T_dev as device allocations; only a sampled block carries a
//    stack, built from the Python frames PyTorch recorded for it.
//  - Never allocates from the hooked heap, takes no lock of its own; does
//    nothing while the caller is inside memstep (guard) or nothing records.

#include <stdint.h>

#include "preload/core/base.h"
#include "preload/cuda/cuda_internal.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "src/format/format.h"

namespace memstep::preload {
namespace {

namespace fmt = ::memstep::format;

// Interns "name\0file\0line\0" triples (innermost first, at most kMaxFrames)
// as Python frames of one stack; 0 when there is none.
uint32_t FramesStack(const char* frames, uint64_t len) {
  if (frames == nullptr || len == 0) return 0;
  uint64_t ips[fmt::kMaxFrames];
  uint32_t n = 0;
  uint64_t pos = 0;
  while (pos < len && n < fmt::kMaxFrames) {
    const uint64_t start = pos;
    int nuls = 0;
    while (pos < len && nuls < 3) {
      if (frames[pos] == '\0') ++nuls;
      ++pos;
    }
    if (nuls < 3) break;  // a truncated triple: ignored
    // The frame's string is the triple without its last NUL.
    const uint32_t id = g_dict.InternString(frames + start, pos - 1 - start);
    if (id == 0) break;
    ips[n++] = fmt::kPyFrameTag | id;
  }
  return n == 0 ? 0 : g_dict.InternStack(ips, n);
}

}  // namespace
}  // namespace memstep::preload

using namespace memstep::preload;  // NOLINT: the exported C functions below

// -1 when a new block of `size` bytes is not sampled; otherwise the mean
// interval its gap was drawn with (0: p = 1), to pass to memstep_torch_block.
MEMSTEP_EXPORT int64_t memstep_torch_block_sample(uint64_t size) {
  ThreadState& t = t_state;
  if (t.guard || !Recording()) return -1;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  uint64_t interval = 0;
  if (!cuda::TorchBlockSample(size, &interval)) return -1;
  return static_cast<int64_t>(interval & (~uint64_t{0} >> 1));
}

// A block event: `alloc` 1 (appeared) or 0 (gone). For an allocation,
// `interval` is what memstep_torch_block_sample returned (-1: not sampled)
// and `frames` (`len` bytes, "qualname\0filename\0line\0" per frame,
// innermost first) its Python stack; a free ignores both.
MEMSTEP_EXPORT void memstep_torch_block(int alloc, int32_t device, uint64_t addr, uint64_t size,
                                        int64_t interval, const char* frames, uint64_t len) {
  ThreadState& t = t_state;
  if (t.guard || !Recording()) return;
  GuardScope guard(t);
  ErrnoSaver errno_saver;
  EnsureThread(t);
  const bool sampled = alloc != 0 && interval >= 0;
  const uint32_t stack = sampled ? FramesStack(frames, len) : 0;
  cuda::RecordTorchBlock(alloc != 0, device, addr, size, stack, sampled,
                         sampled ? static_cast<uint64_t>(interval) : 0);
}
