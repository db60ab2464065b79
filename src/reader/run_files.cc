#include "src/reader/run_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace memstep::reader {
namespace {

absl::StatusOr<std::vector<std::string>> ListTraces(const std::string& path, bool* is_dir) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(path, ": ", strerror(errno)));
  }
  *is_dir = S_ISDIR(st.st_mode);
  if (!*is_dir) return std::vector<std::string>{path};
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return absl::PermissionDeniedError(absl::StrCat(path, ": ", strerror(errno)));
  std::vector<std::string> files;
  while (dirent* ent = readdir(dir)) {
    std::string name = ent->d_name;
    if (absl::EndsWith(name, ".trace")) files.push_back(absl::StrCat(path, "/", name));
  }
  closedir(dir);
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat(path, ": no memstep traces (*.trace) in directory"));
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

absl::Status MapTraceFile(const std::string& path, TraceFile* out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", strerror(errno)));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file, not a memstep trace"));
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    return absl::InternalError(absl::StrCat(path, ": mmap: ", strerror(errno)));
  }
  madvise(map, size, MADV_SEQUENTIAL);
  out->path = path;
  out->data = static_cast<const uint8_t*>(map);
  out->size = size;
  out->mapped = true;
  return absl::OkStatus();
}

absl::StatusOr<RunFiles> RunFiles::Open(const std::string& path) {
  bool is_dir = false;
  absl::StatusOr<std::vector<std::string>> files = ListTraces(path, &is_dir);
  if (!files.ok()) return files.status();
  RunFiles run;
  run.path_ = path;
  for (const std::string& file : *files) {
    struct stat st;
    if (is_dir && stat(file.c_str(), &st) == 0 && st.st_size == 0) {
      run.warnings_.push_back(absl::StrCat(file,
                                           ": empty trace (process ended before "
                                           "writing its header); skipped"));
      continue;
    }
    TraceFile tf;
    if (absl::Status s = MapTraceFile(file, &tf); !s.ok()) return s;
    run.traces_.push_back(tf);
  }
  return run;
}

RunFiles::RunFiles(RunFiles&& other) noexcept
    : path_(std::move(other.path_)),
      traces_(std::move(other.traces_)),
      warnings_(std::move(other.warnings_)) {
  other.traces_.clear();
}

RunFiles& RunFiles::operator=(RunFiles&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    traces_ = std::move(other.traces_);
    warnings_ = std::move(other.warnings_);
    other.traces_.clear();
  }
  return *this;
}

RunFiles::~RunFiles() { Unmap(); }

void RunFiles::Unmap() {
  for (TraceFile& t : traces_) {
    if (t.data != nullptr) munmap(const_cast<uint8_t*>(t.data), t.size);
  }
  traces_.clear();
}

uint64_t RunFiles::total_bytes() const {
  uint64_t n = 0;
  for (const TraceFile& t : traces_) n += t.size;
  return n;
}

uint64_t MachineMemTotal() {
  FILE* f = fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  while (fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long v;
    if (sscanf(line, "MemTotal: %llu kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  fclose(f);
  return kib * 1024;
}

}  // namespace memstep::reader
