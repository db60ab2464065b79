// memstep trace format, version 2: the contract between the hot path (preload/)
// and the offline side (src/reader and above). docs/format.md specifies it byte
// by byte; keep the two in step.
//
// Contract of this header:
//  - Freestanding: no allocation, no exceptions, no libstdc++ (only <cstdint>,
//    <cstring>). It is compiled into libmemstep.so, which must not pull in the
//    C++ runtime.
//  - Encoders write into a caller-owned buffer and never overrun it: every
//    Put* returns false (and writes nothing) when the record would not fit.
//  - Decoders never read past the end of their input: every Get* returns false
//    on truncated or malformed input.
//
// Layout of a trace file:
//   FileHeader (fixed 64 bytes) | TLV* | u32 header_crc32c
//   Chunk*      each: ChunkHeader (36 bytes) | payload (payload_len bytes)
// A chunk's payload, once decompressed, is a sequence of records:
//   u8 tag | fields as LEB128 varints (unsigned) or zig-zag varints (signed).
// Definitions (STRING, STACK, MAPPING) always precede the first record that
// refers to them, in file order.

#ifndef MEMSTEP_SRC_FORMAT_FORMAT_H_
#define MEMSTEP_SRC_FORMAT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace memstep::format {

inline constexpr char kFileMagic[8] = {'M', 'E', 'M', 'S', 'T', 'E', 'P', '1'};
inline constexpr uint16_t kVersionMajor = 2;
inline constexpr uint16_t kVersionMinor = 0;
inline constexpr uint32_t kChunkMagic = 0x4B4E4843;    // "CHNK" little-endian.
inline constexpr uint32_t kMaxChunkRawLen = 1u << 20;  // 1 MiB decompressed.
inline constexpr uint32_t kMaxFrames = 64;

// Fixed part of the file header. All integers little-endian.
struct FileHeader {
  char magic[8];           // kFileMagic
  uint16_t version_major;  // kVersionMajor
  uint16_t version_minor;  // kVersionMinor
  uint32_t header_len;     // total bytes of the header: fixed part + TLVs + CRC
  uint64_t start_mono_ns;  // CLOCK_MONOTONIC at trace start; record ts are relative
  uint64_t start_real_ns;  // CLOCK_REALTIME at trace start
  uint32_t pid;
  uint32_t ppid;
  uint32_t page_size;
  uint32_t flags;            // FileFlags
  uint64_t sample_interval;  // mean sampling interval T in bytes at start (1 = every allocation)
  uint64_t always_bytes;     // S_always: allocations >= this are always recorded
};
static_assert(sizeof(FileHeader) == 64, "FileHeader is written to disk");

enum FileFlags : uint32_t {
  kFlagForkChild = 1u << 0,    // process is a fork() child of another traced process
  kFlagGlibcMalloc = 1u << 1,  // the underlying allocator is glibc's
};

// TLVs after the fixed header: u16 type | u32 len | len bytes. Type 0 ends the
// list (its len is 0). Unknown types are skipped by readers.
enum HeaderTlv : uint16_t {
  kTlvEnd = 0,
  kTlvCmdline = 1,  // argv joined with '\0'
  kTlvHostname = 2,
  kTlvRankEnv = 3,      // "RANK=..\0LOCAL_RANK=..\0WORLD_SIZE=..\0" (those set)
  kTlvExe = 4,          // /proc/self/exe target
  kTlvParentTrace = 5,  // path of the parent's trace (fork children)
  kTlvAllocator = 6,    // "glibc" | "jemalloc" | "other"
  // The profiler's own object (libmemstep.so, whatever its file is called):
  // u64 start, u64 end (little-endian; the [start, end) of its PT_LOAD
  // segments in this process), then its GNU build-id bytes (may be none).
  // Frames there are memstep's, not the program's.
  kTlvProfiler = 7,
  // memstep's Python directory in this process (`memstep run` passes it as
  // MEMSTEP_PYTHON_DIR and puts it on PYTHONPATH): Python frames of files
  // under it are memstep's hooks, not the program's.
  kTlvPythonDir = 8,
};

// Chunk header, 36 bytes on disk. Packed: base_mono_ns sits at offset 20,
// which natural alignment would pad to 24.
struct __attribute__((packed)) ChunkHeader {
  uint32_t magic;           // kChunkMagic
  uint32_t payload_len;     // bytes of payload on disk
  uint32_t raw_len;         // bytes after decompression (== payload_len if raw)
  uint32_t seq;             // 0, 1, 2, ... per file
  uint8_t codec;            // Codec
  uint8_t kind;             // ChunkKind
  uint16_t reserved;        // 0
  uint64_t base_mono_ns;    // writer time at chunk creation, relative to start
  uint32_t payload_crc32c;  // CRC-32C of the on-disk payload bytes
  uint32_t header_crc32c;   // CRC-32C of the preceding 32 header bytes
};
static_assert(sizeof(ChunkHeader) == 36, "ChunkHeader is written to disk");

enum Codec : uint8_t { kCodecRaw = 0, kCodecZstd = 1 };
enum ChunkKind : uint8_t { kChunkData = 0, kChunkDict = 1, kChunkTrailer = 3 };

// Record tags. Field lists (u = unsigned LEB128, s = zig-zag LEB128):
enum Tag : uint8_t {
  // u id, u len, len bytes. Id 0 is the empty string / "none".
  kTagString = 0x01,
  // u id, u ts, u start, u end, u load_bias, u path_str, u build_id_len, bytes
  // One loaded ELF object as dl_iterate_phdr saw it: [start, end) spans its
  // PT_LOAD segments at run time; load_bias is dlpi_addr (runtime address =
  // ELF virtual address + load_bias); path is absolute (the main program's is
  // /proc/self/exe's target); build_id is the raw NT_GNU_BUILD_ID bytes.
  kTagMapping = 0x02,
  // u id, u ts: the module of mapping `id` was unloaded (dlclose).
  kTagMappingGone = 0x03,
  // u id, u nframes, u ip[nframes]: innermost first, return addresses as unwound.
  // Stack id 0 means "no stack" (unwinding was not possible).
  kTagStack = 0x04,
  // u ts, u seq, u tid, u stack, u addr, u size, u interval, u kind, u step, u stage_str
  // A sampled allocation. `interval` is the mean sampling interval T in force
  // when it was drawn; 0 means recorded with probability 1 (size >= S_always,
  // or every allocation recorded). Estimated bytes: size / p with
  // p = 1 - exp(-(size+1)/T).
  kTagAlloc = 0x10,
  // u ts, u seq, u tid, u addr: free of a sampled allocation.
  kTagFree = 0x11,
  // u ts, u seq, u tid, u stack, u addr, u len, u prot, u flags, u step, u stage_str
  // Anonymous mmap (every one is recorded, p = 1).
  kTagMmap = 0x12,
  // u ts, u seq, u tid, u addr, u len: munmap of [addr, addr+len); may cover
  // parts of anonymous mappings or none.
  kTagMunmap = 0x13,
  // u ts, u seq, u tid, u stack, u old_addr, u old_len, u new_addr, u new_len, u step, u stage_str
  kTagMremap = 0x14,
  // u ts, u seq, u tid, u stack, u kind (DeviceKind), s device, u addr, u size,
  // u api (DeviceApi), u aux, u step, u stage_str
  // , u sampled, u interval
  // A device-side allocation (CUDA). Every one is recorded, so device totals
  // are exact; only a sampled one (`sampled` 1) carries a stack (0 otherwise)
  // and stands for size / p bytes of its site, p = 1 - exp(-(size+1)/interval)
  // (interval 0: p = 1), like an ALLOC. `addr` is the pointer it returned; for kDevVmm it is the
  // CUmemGenericAllocationHandle. `device` is the CUDA ordinal, -1 if unknown
  // (host kinds: -1). `aux`: the memory pool (kDevPool, 0 = default pool;
  // the CUDA graph for a graph memory node).
  kTagDevAlloc = 0x15,
  // u ts, u seq, u tid, u kind (DeviceKind), s device, u addr, u size, u api
  // The allocation (kind, addr) was freed; `size` is what its DEV_ALLOC
  // recorded (0 if memstep never saw that allocation). For kDevVmm this is
  // written when the physical memory is returned: after cuMemRelease and the
  // last cuMemUnmap of the handle.
  kTagDevFree = 0x16,
  // u ts, u seq, u tid, u stack, u kind, s device, u size, u api, u error,
  // u step, u stage_str
  // A device allocation call that failed (the error code is the CUresult or
  // cudaError_t the caller got; 2 = cudaErrorMemoryAllocation, 2 =
  // CUDA_ERROR_OUT_OF_MEMORY). Nothing was counted.
  kTagDevFail = 0x17,
  // u ts, u seq, u tid, u step, u phase(0 begin, 1 end), Counters
  kTagStep = 0x20,
  // u ts, u seq, u tid, u stage_str, u step, u phase(0 begin, 1 end), Counters
  kTagStage = 0x21,
  // u ts, u seq, u tid, u name_str, s value
  kTagCounter = 0x22,
  // u ts, u interval: the sampling interval changed (future allocations).
  kTagRate = 0x23,
  // u ts, u seq, u tid, u epoch: epoch `epoch` begins (it lasts until the next
  // EPOCH record); steps that follow belong to it.
  kTagEpoch = 0x24,
  // u ts, u seq, u step, u rule (AlertRule), u value, u threshold, u stage_str,
  // u site_stack (0 = unknown): an online alert fired at a step boundary.
  kTagAlert = 0x25,
  // u ts, u seq, u step, u cause (SnapshotCause), u stage_str, u n,
  // n x (u stack, u live_bytes_est, u live_count_est): the top call sites by
  // estimated live bytes at a peak, taken in process (peak composition).
  kTagSiteSnapshot = 0x26,
  // u ts, u seq, u step, s device, u free, u total, u pool_reserved,
  // u pool_used: device memory as the driver reports it (cudaMemGetInfo on the
  // current device; default-pool ReservedMemCurrent/UsedMemCurrent, 0 if no
  // stream-ordered allocation was seen), read at a step end.
  kTagDevInfo = 0x27,
  // The leak hunt (docs/analysis.md "Leak hunt") began (phase 0) or ended
  // (phase 1, `outcome` a HuntOutcome) at the end of `step`.
  kTagHunt = 0x28,
  // u ts, u seq, u tid, u step, u stage_str, u cause (MemSnapshotCause),
  // s device, u requested, u free, u total, u api, u error: the moment of an
  // out-of-memory error (or a snapshot on request); the analysis rebuilds
  // what was live by site at this `seq` from the trace.
  kTagMemSnapshot = 0x29,
  // u ts, u seq, u tid, u n, n x (u system, u free, u top, u free_chunks):
  // glibc's arenas at a step end (malloc_info), just before its STEP end
  // record (docs/format.md "Step-end allocator statistics").
  kTagArenaStats = 0x2C,
  // u ts, u records, u bytes, u cause: records dropped (buffer full, etc.).
  kTagLost = 0x30,
  // u ts, u code, u message_str: the profiler degraded (stopped recording etc.).
  kTagNotice = 0x31,
  // u ts, Counters, u clean_exit
  kTagTrailer = 0x3F,
};

// Online alert rules (kTagAlert `rule`).
enum AlertRule : uint8_t {
  kAlertGrowth = 1,      // host live bytes growth per step (after warm-up) > threshold
  kAlertPeak = 2,        // host peak within a step > threshold
  kAlertStagePeak = 3,   // peak within stage `stage_str` > threshold
  kAlertDevicePeak = 4,  // device peak > threshold (GPU issue)
};

// Why a SITE_SNAPSHOT was taken (kTagSiteSnapshot `cause`).
// How a leak hunt ended (kTagHunt phase 1).
enum HuntOutcome : uint8_t {
  kHuntExplained = 1,  // sampled sites explain the exact growth within the tolerance
  kHuntStopped = 2,    // the exact growth stopped before it was explained
  kHuntGaveUp = 3,     // still unexplained after the longest hunt
};

// Why a MEM_SNAPSHOT was written (kTagMemSnapshot `cause`).
enum MemSnapshotCause : uint8_t {
  kMemSnapDeviceOom = 1,  // a device allocation failed with out of memory (error 2)
  kMemSnapTorchOom = 2,   // PyTorch raised OutOfMemoryError (the Python helper)
  kMemSnapSignal = 3,     // the snapshot signal (MEMSTEP_SNAPSHOT_SIGNAL)
  kMemSnapRequest = 4,    // memstep_memory_snapshot() from the program
};
inline const char* MemSnapshotCauseName(uint8_t c) {
  switch (c) {
    case kMemSnapDeviceOom:
      return "device_oom";
    case kMemSnapTorchOom:
      return "torch_oom";
    case kMemSnapSignal:
      return "signal";
    case kMemSnapRequest:
      return "request";
    default:
      return "unknown";
  }
}

// Which memory a HUNT record is about (kTagHunt `memory`).
enum HuntMemory : uint8_t {
  kHuntHost = 0,    // heap + anonymous mmap bytes
  kHuntDevice = 1,  // device-resident bytes (all devices)
};

enum SnapshotCause : uint8_t {
  kSnapshotStagePeak = 0,  // the latest peak of a stage, emitted at stage end
  kSnapshotRunPeak = 1,    // the run's peak grew by >= 10 %
  kSnapshotStepEnd = 2,    // periodic, every K steps
};

// Allocation kinds (kTagAlloc `kind`).
enum AllocKind : uint8_t {
  kKindMalloc = 0,
  kKindCalloc = 1,
  kKindRealloc = 2,
  kKindAligned = 3,   // posix_memalign, aligned_alloc, memalign, valloc, pvalloc
  kKindPymalloc = 4,  // a block of CPython's pymalloc (object/mem domains, <= 512 B)
};

// The usable size an allocator gives a request of `size` bytes: what the
// exact counters count for a block, so what a sample stands for
// (docs/analysis.md "Bytes: usable, not requested"). One model for the
// library (region blocks, its site tally) and the analysis (UsableBytes).
// glibc: a heap chunk (size + 8 rounded up to 16, at least 32) less its
// 8-byte header; from kGlibcMmapFloor glibc may mmap the block instead
// (page-rounded) by its sliding threshold, so callers count the request there.
inline constexpr uint64_t kGlibcMmapFloor = 128 * 1024;         // M_MMAP_THRESHOLD's least value
inline constexpr uint64_t kUsableModelMax = uint64_t{1} << 40;  // above: the request
constexpr uint64_t GlibcUsable(uint64_t size) {
  if (size >= kUsableModelMax) return size;
  const uint64_t chunk = (size + 8 + 15) & ~uint64_t{15};
  return chunk < 32 ? 24 : chunk - 8;
}
// CPython's small-object allocator: 16-byte classes (its ALIGNMENT on 64-bit
// platforms); a request of 0 takes the smallest.
constexpr uint64_t PymallocUsable(uint64_t size) {
  return size == 0 ? 16 : (size + 15) & ~uint64_t{15};
}
// jemalloc's size classes: 8, multiples of 16 to 128, then four classes per
// doubling ((2^k, 2^(k+1)] in steps of 2^(k-2)).
constexpr uint64_t JemallocUsable(uint64_t size) {
  if (size >= kUsableModelMax) return size;
  if (size <= 8) return 8;
  if (size <= 128) return (size + 15) & ~uint64_t{15};
  const int k = 63 - __builtin_clzll(size - 1);
  const uint64_t step = uint64_t{1} << (k - 2);
  return (size + step - 1) & ~(step - 1);
}

// Device allocation kinds (kTagDevAlloc `kind`). JSON names in
// DeviceKindName().
enum DeviceKind : uint8_t {
  kDevDevice = 1,      // cudaMalloc/cuMemAlloc/Pitch/3D, arrays, IPC-opened memory
  kDevManaged = 2,     // cudaMallocManaged/cuMemAllocManaged
  kDevPinnedHost = 3,  // cudaMallocHost/cudaHostAlloc/cuMemAllocHost/cuMemHostAlloc, HostRegister
  kDevVmm = 4,         // cuMemCreate: physical memory of the VMM API
  kDevPool = 5,        // cudaMallocAsync/...FromPoolAsync/cuMemAllocAsync, graph memory
                       // nodes: logical
  // A block (tensor storage) that PyTorch's caching allocator handed out inside
  // one of its segments: an INNER layer, never a device total (the segments
  // are the device allocations above). Written by the Python helper
  // (docs/gpu.md "Tensor blocks inside the caching allocator").
  kDevTensorBlock = 6,
};
// The last kind that counts toward the device totals (kDevTensorBlock does not).
inline constexpr uint8_t kDevKindMax = 5;

inline const char* DeviceKindName(uint8_t kind) {
  switch (kind) {
    case kDevDevice:
      return "device";
    case kDevManaged:
      return "device_managed";
    case kDevPinnedHost:
      return "pinned_host";
    case kDevVmm:
      return "device_vmm";
    case kDevPool:
      return "device_pool";
    case kDevTensorBlock:
      return "tensor_block";
    default:
      return "device_unknown";
  }
}

// The API call behind a DEV_* record (the lowest layer that fired: a driver
// call made by the runtime is recorded once, as the driver call).
enum DeviceApi : uint8_t {
  kApiUnknown = 0,
  kApiCudaMalloc = 1,
  kApiCudaMallocManaged = 2,
  kApiCudaMallocHost = 3,
  kApiCudaHostAlloc = 4,
  kApiCudaMallocPitch = 5,
  kApiCudaMalloc3D = 6,
  kApiCudaMallocAsync = 7,
  kApiCudaMallocFromPoolAsync = 8,
  kApiCudaFree = 9,
  kApiCudaFreeHost = 10,
  kApiCudaFreeAsync = 11,
  kApiCuMemAlloc = 20,
  kApiCuMemAllocManaged = 21,
  kApiCuMemAllocHost = 22,
  kApiCuMemHostAlloc = 23,
  kApiCuMemAllocPitch = 24,
  kApiCuMemCreate = 25,
  kApiCuMemRelease = 26,
  kApiCuMemUnmap = 27,
  kApiCuMemAllocAsync = 28,
  kApiCuMemAllocFromPoolAsync = 29,
  kApiCuMemFree = 30,
  kApiCuMemFreeHost = 31,
  kApiCuMemFreeAsync = 32,
  // Coverage of issue 10 (docs/gpu.md "What is counted where").
  kApiCudaHostRegister = 40,  // pinned_host: registered host memory (not allocated)
  kApiCudaHostUnregister = 41,
  kApiCudaMallocArray = 42,  // device: the array handle, estimated size
  kApiCudaMalloc3DArray = 43,
  kApiCudaMallocMipmappedArray = 44,
  kApiCudaFreeArray = 45,
  kApiCudaFreeMipmappedArray = 46,
  kApiCudaIpcOpenMemHandle = 47,  // device: another process's memory, counted once
  kApiCudaIpcCloseMemHandle = 48,
  kApiCudaGraphAddMemAllocNode = 49,  // device_pool: a graph memory node (aux = the graph)
  kApiCudaGraphAddMemFreeNode = 50,
  kApiCuMemHostRegister = 60,
  kApiCuMemHostUnregister = 61,
  kApiCuArrayCreate = 62,
  kApiCuArray3DCreate = 63,
  kApiCuMipmappedArrayCreate = 64,
  kApiCuArrayDestroy = 65,
  kApiCuMipmappedArrayDestroy = 66,
  kApiCuIpcOpenMemHandle = 67,
  kApiCuIpcCloseMemHandle = 68,
  kApiCuGraphAddMemAllocNode = 69,
  kApiCuGraphAddMemFreeNode = 70,
  kApiCuMemImportFromShareableHandle = 71,  // device_vmm: another process's VMM memory
  // tensor_block: PyTorch's caching allocator (block events from its snapshots)
  kApiTorchCachingAllocator = 80,
};

// The function of a device allocation's api (the name memstep hooked, with
// its _v2 where the driver exports one), "unknown" for another value.
inline const char* DeviceApiName(uint8_t api) {
  struct Name {
    uint8_t api;
    const char* name;
  };
  static constexpr Name kNames[] = {
      {kApiCudaMalloc, "cudaMalloc"},
      {kApiCudaMallocManaged, "cudaMallocManaged"},
      {kApiCudaMallocHost, "cudaMallocHost"},
      {kApiCudaHostAlloc, "cudaHostAlloc"},
      {kApiCudaMallocPitch, "cudaMallocPitch"},
      {kApiCudaMalloc3D, "cudaMalloc3D"},
      {kApiCudaMallocAsync, "cudaMallocAsync"},
      {kApiCudaMallocFromPoolAsync, "cudaMallocFromPoolAsync"},
      {kApiCudaFree, "cudaFree"},
      {kApiCudaFreeHost, "cudaFreeHost"},
      {kApiCudaFreeAsync, "cudaFreeAsync"},
      {kApiCuMemAlloc, "cuMemAlloc_v2"},
      {kApiCuMemAllocManaged, "cuMemAllocManaged"},
      {kApiCuMemAllocHost, "cuMemAllocHost_v2"},
      {kApiCuMemHostAlloc, "cuMemHostAlloc"},
      {kApiCuMemAllocPitch, "cuMemAllocPitch_v2"},
      {kApiCuMemCreate, "cuMemCreate"},
      {kApiCuMemRelease, "cuMemRelease"},
      {kApiCuMemUnmap, "cuMemUnmap"},
      {kApiCuMemAllocAsync, "cuMemAllocAsync"},
      {kApiCuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync"},
      {kApiCuMemFree, "cuMemFree_v2"},
      {kApiCuMemFreeHost, "cuMemFreeHost"},
      {kApiCuMemFreeAsync, "cuMemFreeAsync"},
      {kApiCudaHostRegister, "cudaHostRegister"},
      {kApiCudaHostUnregister, "cudaHostUnregister"},
      {kApiCudaMallocArray, "cudaMallocArray"},
      {kApiCudaMalloc3DArray, "cudaMalloc3DArray"},
      {kApiCudaMallocMipmappedArray, "cudaMallocMipmappedArray"},
      {kApiCudaFreeArray, "cudaFreeArray"},
      {kApiCudaFreeMipmappedArray, "cudaFreeMipmappedArray"},
      {kApiCudaIpcOpenMemHandle, "cudaIpcOpenMemHandle"},
      {kApiCudaIpcCloseMemHandle, "cudaIpcCloseMemHandle"},
      {kApiCudaGraphAddMemAllocNode, "cudaGraphAddMemAllocNode"},
      {kApiCudaGraphAddMemFreeNode, "cudaGraphAddMemFreeNode"},
      {kApiCuMemHostRegister, "cuMemHostRegister_v2"},
      {kApiCuMemHostUnregister, "cuMemHostUnregister"},
      {kApiCuArrayCreate, "cuArrayCreate_v2"},
      {kApiCuArray3DCreate, "cuArray3DCreate_v2"},
      {kApiCuMipmappedArrayCreate, "cuMipmappedArrayCreate"},
      {kApiCuArrayDestroy, "cuArrayDestroy"},
      {kApiCuMipmappedArrayDestroy, "cuMipmappedArrayDestroy"},
      {kApiCuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2"},
      {kApiCuIpcCloseMemHandle, "cuIpcCloseMemHandle"},
      {kApiCuGraphAddMemAllocNode, "cuGraphAddMemAllocNode"},
      {kApiCuGraphAddMemFreeNode, "cuGraphAddMemFreeNode"},
      {kApiCuMemImportFromShareableHandle, "cuMemImportFromShareableHandle"},
      {kApiTorchCachingAllocator, "torch.cuda.caching_allocator"},
  };
  for (const Name& n : kNames) {
    if (n.api == api) return n.name;
  }
  return "unknown";
}

// A Python frame in a STACK record: kPyFrameTag | string id, where the
// STRING is "qualname\0filename\0line" (CPython frames the profiler read in
// place of the interpreter loop's native frames). Native return addresses
// are canonical user-space addresses and never have these bits set.
inline constexpr uint64_t kPyFrameTag = 0xFFFFFF0000000000ull;
inline bool IsPyFrame(uint64_t ip) { return (ip & kPyFrameTag) == kPyFrameTag; }
inline uint64_t PyFrameString(uint64_t ip) { return ip & ~kPyFrameTag; }

// Exact counters carried by STEP, STAGE and TRAILER records, in this order,
// each a u varint. Host heap (malloc family) only; bytes are usable sizes.
struct Counters {
  uint64_t alloc_bytes;  // cumulative since process start
  uint64_t alloc_count;
  uint64_t free_bytes;
  uint64_t free_count;
  uint64_t live_bytes;  // heap live bytes (alloc_bytes - free_bytes, may lag by threads x 1 MiB)
  uint64_t peak_bytes;  // max live bytes since the previous boundary of the same kind
  uint64_t mmap_live_bytes;  // anonymous mmap bytes live
  uint64_t rss_bytes;        // VmRSS from /proc/self/statm (0 if unknown); STAGE: latest read
};
inline constexpr int kNumCounters = 8;

// ---------------------------------------------------------------------------
// CRC-32C (Castagnoli), software, byte-wise table.

namespace internal {
struct Crc32cTable {
  uint32_t t[256];
  constexpr Crc32cTable() : t() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
  }
};
inline constexpr Crc32cTable kCrc32c{};
}  // namespace internal

inline uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = internal::kCrc32c.t[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

// ---------------------------------------------------------------------------
// Varints.

inline constexpr size_t kMaxVarint = 10;

inline uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t UnZigZag(uint64_t v) {
  return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

// Writes `v` at `p` (which must have kMaxVarint bytes); returns bytes written.
inline size_t EncodeVarint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  p[n++] = static_cast<uint8_t>(v);
  return n;
}

// Record encoder over a caller-owned buffer. Usage:
//   RecordEncoder e(buf, cap);
//   e.Begin(kTagFree); e.U(ts); e.U(seq); e.U(tid); e.U(addr);
//   if (e.End()) { commit e.size() bytes } else { buffer full }
// A record is all-or-nothing: after a failed End(), size() is unchanged.
class RecordEncoder {
 public:
  RecordEncoder(uint8_t* buf, size_t cap) : buf_(buf), cap_(cap) {}
  void Begin(uint8_t tag) {
    rec_start_ = len_;
    ok_ = true;
    Byte(tag);
  }
  void Byte(uint8_t b) {
    if (len_ + 1 > cap_) {
      ok_ = false;
      return;
    }
    buf_[len_++] = b;
  }
  void U(uint64_t v) {
    if (len_ + kMaxVarint > cap_) {
      uint8_t tmp[kMaxVarint];
      size_t n = EncodeVarint(tmp, v);
      if (len_ + n > cap_) {
        ok_ = false;
        return;
      }
      memcpy(buf_ + len_, tmp, n);
      len_ += n;
      return;
    }
    len_ += EncodeVarint(buf_ + len_, v);
  }
  void S(int64_t v) { U(ZigZag(v)); }
  void Bytes(const void* p, size_t n) {
    if (len_ + n > cap_) {
      ok_ = false;
      return;
    }
    memcpy(buf_ + len_, p, n);
    len_ += n;
  }
  void PutCounters(const Counters& c) {
    U(c.alloc_bytes);
    U(c.alloc_count);
    U(c.free_bytes);
    U(c.free_count);
    U(c.live_bytes);
    U(c.peak_bytes);
    U(c.mmap_live_bytes);
    U(c.rss_bytes);
  }
  // Finishes the record; on overflow rolls back to the record start.
  bool End() {
    if (!ok_) len_ = rec_start_;
    return ok_;
  }
  size_t size() const { return len_; }
  void Reset() { len_ = 0; }
  uint8_t* data() const { return buf_; }

 private:
  uint8_t* buf_;
  size_t cap_;
  size_t len_ = 0;
  size_t rec_start_ = 0;
  bool ok_ = true;
};

// Bounds-checked decoder over a byte range.
class RecordDecoder {
 public:
  RecordDecoder(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  bool AtEnd() const { return p_ >= end_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  const uint8_t* pos() const { return p_; }
  bool Byte(uint8_t* out) {
    if (p_ >= end_) return false;
    *out = *p_++;
    return true;
  }
  bool U(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) return false;
      uint8_t b = *p_++;
      if (shift == 63 && b > 1) return false;  // overflows 64 bits
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) {
        *out = v;
        return true;
      }
    }
    return false;
  }
  bool S(int64_t* out) {
    uint64_t v;
    if (!U(&v)) return false;
    *out = UnZigZag(v);
    return true;
  }
  // Points *out at n bytes inside the input.
  bool Bytes(size_t n, const uint8_t** out) {
    if (n > remaining()) return false;
    *out = p_;
    p_ += n;
    return true;
  }
  bool GetCounters(Counters* c) {
    return U(&c->alloc_bytes) && U(&c->alloc_count) && U(&c->free_bytes) && U(&c->free_count) &&
           U(&c->live_bytes) && U(&c->peak_bytes) && U(&c->mmap_live_bytes) && U(&c->rss_bytes);
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Fills `h` (all but header_crc32c) for a chunk.
inline void FillChunkHeader(ChunkHeader* h, uint32_t seq, uint8_t codec, uint8_t kind,
                            uint64_t base_ns, const void* payload, uint32_t payload_len,
                            uint32_t raw_len) {
  h->magic = kChunkMagic;
  h->payload_len = payload_len;
  h->raw_len = raw_len;
  h->seq = seq;
  h->codec = codec;
  h->kind = kind;
  h->reserved = 0;
  h->base_mono_ns = base_ns;
  h->payload_crc32c = Crc32c(payload, payload_len);
  h->header_crc32c = Crc32c(h, 32);
}

}  // namespace memstep::format

#endif  // MEMSTEP_SRC_FORMAT_FORMAT_H_
