// The kind of memory a call site allocated (Site::kind), a stage peak
// measured (StagePeak::kind) or a failed device allocation asked for
// (DeviceFailure::kind). Reports print it by SiteKindName: those names are
// the "kind" strings of the JSON report (docs/report-schema.md).

#ifndef MEMSTEP_SRC_ANALYSIS_SITE_KIND_H_
#define MEMSTEP_SRC_ANALYSIS_SITE_KIND_H_

#include <cstdint>

#include "src/format/format.h"

namespace memstep::analysis {

enum class SiteKind : uint8_t {
  kHost,           // "host": the malloc family (sampled); a stage peak: the exact host heap
  kMmap,           // "mmap": anonymous mappings (sampled)
  kDevice,         // "device": cudaMalloc & co; a stage peak: one device's resident bytes
  kDeviceManaged,  // "device_managed"
  kPinnedHost,     // "pinned_host": page-locked host memory from CUDA
  kDeviceVmm,      // "device_vmm": physical memory of the VMM API
  kDevicePool,     // "device_pool": stream-ordered allocations
  kDeviceUnknown,  // "device_unknown": a device kind this version does not know
  kTensorBlock,    // "tensor_block": a block of PyTorch's caching allocator (inside segments)
};

inline const char* SiteKindName(SiteKind kind) {
  switch (kind) {
    case SiteKind::kHost:
      return "host";
    case SiteKind::kMmap:
      return "mmap";
    case SiteKind::kDevice:
      return "device";
    case SiteKind::kDeviceManaged:
      return "device_managed";
    case SiteKind::kPinnedHost:
      return "pinned_host";
    case SiteKind::kDeviceVmm:
      return "device_vmm";
    case SiteKind::kDevicePool:
      return "device_pool";
    case SiteKind::kTensorBlock:
      return "tensor_block";
    case SiteKind::kDeviceUnknown:
      break;
  }
  return "device_unknown";
}

// Host memory sampled by the hooks (host heap or anonymous mappings), as
// opposed to memory from CUDA, which is recorded exactly (pinned_host too).
inline bool IsHost(SiteKind kind) { return kind == SiteKind::kHost || kind == SiteKind::kMmap; }

// The kind of a device site from its DEV_* records' format::DeviceKind.
inline SiteKind DeviceSiteKind(uint8_t device_kind) {
  switch (device_kind) {
    case format::kDevDevice:
      return SiteKind::kDevice;
    case format::kDevManaged:
      return SiteKind::kDeviceManaged;
    case format::kDevPinnedHost:
      return SiteKind::kPinnedHost;
    case format::kDevVmm:
      return SiteKind::kDeviceVmm;
    case format::kDevPool:
      return SiteKind::kDevicePool;
    case format::kDevTensorBlock:
      return SiteKind::kTensorBlock;
    default:
      return SiteKind::kDeviceUnknown;
  }
}

}  // namespace memstep::analysis

#endif  // MEMSTEP_SRC_ANALYSIS_SITE_KIND_H_
