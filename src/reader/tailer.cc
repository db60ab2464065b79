#include "src/reader/tailer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace memstep::reader {
namespace {

// Bytes read by one Poll() at most (a whole chunk is far smaller): a tailer
// attached to a long run catches up over several polls, in bounded memory.
constexpr uint64_t kMaxReadPerPoll = uint64_t{64} << 20;
constexpr size_t kMaxHeaderRead = size_t{1} << 20;

// pread of exactly `n` bytes at `at` (fewer only at end of file).
ssize_t ReadAt(int fd, uint8_t* out, size_t n, uint64_t at) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = pread(fd, out + done, n - done, static_cast<off_t>(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

}  // namespace

TraceTailer::~TraceTailer() {
  if (fd_ >= 0) close(fd_);
}

void TraceTailer::ClearBatch() {
  trace_.events.clear();
  trace_.counters.clear();
  trace_.lost.clear();
  trace_.notices.clear();
  trace_.rates.clear();
  trace_.alerts.clear();
  trace_.snapshots.clear();
  trace_.device_info.clear();
  trace_.hunts.clear();
  trace_.arena_stats.clear();
  trace_.warnings.clear();
}

absl::Status TraceTailer::Poll() {
  ClearBatch();
  last_read_ = 0;
  reached_end_ = false;
  if (!corrupt_.empty()) return absl::OkStatus();
  if (fd_ < 0) {
    fd_ = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return absl::NotFoundError(absl::StrCat(path_, ": ", strerror(errno)));
  }
  struct stat st;
  if (fstat(fd_, &st) != 0) return absl::InternalError(absl::StrCat(path_, ": ", strerror(errno)));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path_, ": not a file"));
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  if (!header_ready_) {
    buf_.resize(static_cast<size_t>(std::min<uint64_t>(size, kMaxHeaderRead)));
    ssize_t got = ReadAt(fd_, buf_.data(), buf_.size(), 0);
    if (got < 0) return absl::InternalError(absl::StrCat(path_, ": ", strerror(errno)));
    const size_t n = static_cast<size_t>(got);
    last_read_ += n;
    total_read_ += n;
    // A header still being written: a prefix of the magic, or a fixed part
    // whose header_len the file does not reach yet.
    const size_t magic_n = std::min(n, sizeof(format::kFileMagic));
    if (magic_n == 0 || memcmp(buf_.data(), format::kFileMagic, magic_n) == 0) {
      if (n < sizeof(format::FileHeader)) return absl::OkStatus();
      format::FileHeader h;
      memcpy(&h, buf_.data(), sizeof(h));
      if (h.version_major == format::kVersionMajor && h.header_len > n && n < kMaxHeaderRead) {
        return absl::OkStatus();
      }
    }
    absl::StatusOr<size_t> header_len = ParseHeader(buf_.data(), n, &trace_);
    if (!header_len.ok()) {
      return absl::Status(header_len.status().code(),
                          absl::StrCat(path_, ": ", header_len.status().message()));
    }
    header_ready_ = true;
    offset_ = *header_len;
  }
  reached_end_ = size - std::min(size, offset_) <= kMaxReadPerPoll;
  if (size <= offset_) return absl::OkStatus();

  const uint64_t want = std::min(size - offset_, kMaxReadPerPoll);
  buf_.resize(static_cast<size_t>(want));
  ssize_t got = ReadAt(fd_, buf_.data(), buf_.size(), offset_);
  if (got < 0) return absl::InternalError(absl::StrCat(path_, ": ", strerror(errno)));
  last_read_ += static_cast<uint64_t>(got);
  total_read_ += static_cast<uint64_t>(got);
  const ChunkScan scan = ParseChunks(buf_.data(), static_cast<size_t>(got), 0, &trace_);
  offset_ += scan.next_offset;
  if (scan.next_offset < static_cast<size_t>(got) && !scan.incomplete) {
    // An invalid chunk: perhaps being rewritten under us; report it once the
    // file stopped changing.
    if (invalid_size_ == size) {
      corrupt_ = absl::StrCat(path_, ": ", scan.problem, " at offset ", offset_);
    }
    invalid_size_ = size;
  } else {
    invalid_size_ = UINT64_MAX;
  }
  auto by_seq = [](const auto& a, const auto& b) { return a.seq < b.seq; };
  std::stable_sort(trace_.events.begin(), trace_.events.end(), by_seq);
  std::stable_sort(trace_.alerts.begin(), trace_.alerts.end(), by_seq);
  std::stable_sort(trace_.snapshots.begin(), trace_.snapshots.end(), by_seq);
  std::stable_sort(trace_.device_info.begin(), trace_.device_info.end(), by_seq);
  return absl::OkStatus();
}

}  // namespace memstep::reader
