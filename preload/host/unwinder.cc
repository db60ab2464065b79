// Loading libunwind, and keeping it away from the program's descriptors.
//
// libunwind (1.6, Debian 12's) validates addresses it is unsure of by
// writing one byte from them into a pipe it opens at its first use, at the
// lowest free descriptors (3 and 4 in most programs), and reopens that pipe
// whenever a read from it fails. Under a profiler that is harmful: the
// program sees descriptors it did not open, and a program that closes all
// its descriptors and then opens files on those numbers would have
// libunwind read from and write to its files. So:
//  - its first use (which opens the pipe) runs while every descriptor below
//    FdFloor() is held, so the pipe lands high, where we find it;
//  - its memory accessor (the public unw_accessors_t at the start of the
//    local address space) is replaced by one that validates with
//    process_vm_readv on our own pid (no descriptor; EFAULT for an
//    unreadable address), falling back to a zero-timeout futex wait (which
//    reads the word and fails with EFAULT the same way) where a seccomp
//    policy refuses process_vm_readv. libunwind's pipe is then never used,
//    and is closed: memstep keeps no descriptor (core/fds.h). Its stale
//    numbers are high, and nothing in libunwind reaches them any more.
// The replacement validates every read that is not in a page this thread
// validated since the last dlclose (libunwind's own accessor skips checks on
// most frames): it costs a system call per new page, on sampled unwinds only.

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "preload/core/fds.h"
#include "preload/host/recorder.h"
#include "preload/host/runtime.h"
#include "src/format/format.h"

namespace memstep::preload {

namespace fmt = ::memstep::format;

namespace {

// unw_accessors_t from libunwind-common.h (public ABI): access_mem is the
// fourth member.
using AccessMemFn = int (*)(void* as, uintptr_t addr, uintptr_t* val, int write, void* arg);
struct UnwAccessors {
  void* find_proc_info;
  void* put_unwind_info;
  void* get_dyn_info_list_addr;
  AccessMemFn access_mem;
  void* access_reg;
  void* access_fpreg;
  void* resume;
  void* get_proc_name;
};

constexpr uintptr_t kPage = 4096;
constexpr int kGoodPages = 8;

std::atomic<uint32_t> g_pages_generation{1};  // bumped at dlclose
std::atomic<bool> g_vm_readv_refused{false};

struct GoodPages {
  uint32_t generation;
  int next;
  uintptr_t page[kGoodPages];
};
__thread GoodPages t_good __attribute__((tls_model("initial-exec")));

bool Known(uintptr_t page) {
  if (t_good.generation != g_pages_generation.load(std::memory_order_relaxed)) {
    t_good = GoodPages{};
    t_good.generation = g_pages_generation.load(std::memory_order_relaxed);
    return false;
  }
  for (uintptr_t p : t_good.page) {
    if (p == page) return true;
  }
  return false;
}

void Remember(uintptr_t page) {
  t_good.page[t_good.next] = page;
  t_good.next = (t_good.next + 1) % kGoodPages;
}

bool FutexReadable(uintptr_t addr) {
  struct timespec zero = {0, 0};
  long r = syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr & ~uintptr_t{3}), FUTEX_WAIT_PRIVATE,
                   0u, &zero, nullptr, 0);
  return r == 0 || errno != EFAULT;  // EAGAIN (other value) or ETIMEDOUT: readable
}

// Reads one word at addr if every byte of it is readable.
bool SafeRead(uintptr_t addr, uintptr_t* val) {
  ErrnoSaver errno_saver;
  uintptr_t first = addr & ~(kPage - 1);
  uintptr_t last = (addr + sizeof(uintptr_t) - 1) & ~(kPage - 1);
  if (Known(first) && Known(last)) {
    *val = *reinterpret_cast<const uintptr_t*>(addr);
    return true;
  }
  if (!g_vm_readv_refused.load(std::memory_order_relaxed)) {
    struct iovec local = {val, sizeof(*val)};
    struct iovec remote = {reinterpret_cast<void*>(addr), sizeof(*val)};
    long n = syscall(SYS_process_vm_readv, syscall(SYS_getpid), &local, 1, &remote, 1, 0);
    if (n == static_cast<long>(sizeof(*val))) {
      Remember(first);
      if (last != first) Remember(last);
      return true;
    }
    if (n >= 0 || errno == EFAULT || errno == ESRCH) return false;
    g_vm_readv_refused.store(true, std::memory_order_relaxed);  // ENOSYS, EPERM: seccomp
  }
  if (!FutexReadable(addr) || (last != first && !FutexReadable(last))) return false;
  Remember(first);
  if (last != first) Remember(last);
  *val = *reinterpret_cast<const uintptr_t*>(addr);
  return true;
}

int AccessMem(void*, uintptr_t addr, uintptr_t* val, int write, void*) {
  if (write) {  // local resume only; memstep never resumes a cursor
    *reinterpret_cast<uintptr_t*>(addr) = *val;
    return 0;
  }
  return SafeRead(addr, val) ? 0 : -1;
}

// True when fn lies in the same object as `anchor`.
bool SameObject(const void* fn, const void* anchor) {
  Dl_info a, b;
  return fn != nullptr && dladdr(fn, &a) != 0 && dladdr(anchor, &b) != 0 &&
         a.dli_fbase == b.dli_fbase;
}

}  // namespace

void UnwinderForgetPages() { g_pages_generation.fetch_add(1, std::memory_order_relaxed); }

namespace {

// The pipes that appeared in [FdFloor(), FdFloor() + 16) since `before`.
struct NewPipes {
  int fd[16];
  int n;
};

uint32_t OpenHighFds() {
  uint32_t mask = 0;
  for (int i = 0; i < 16; ++i) {
    if (fcntl(FdFloor() + i, F_GETFD) >= 0) mask |= 1u << i;
  }
  return mask;
}

NewPipes PipesSince(uint32_t before) {
  NewPipes p = {{}, 0};
  uint32_t now = OpenHighFds() & ~before;
  for (int i = 0; i < 16; ++i) {
    struct stat st;
    if ((now & (1u << i)) != 0 && fstat(FdFloor() + i, &st) == 0 && S_ISFIFO(st.st_mode)) {
      p.fd[p.n++] = FdFloor() + i;
    }
  }
  return p;
}

}  // namespace

const char* LoadUnwinder() {
  if (getenv("MEMSTEP_NO_UNWIND") != nullptr) return nullptr;
  const char* which = getenv("MEMSTEP_UNWINDER");
  const bool want_glibc = which != nullptr && strcmp(which, "backtrace") == 0;
  void* h = want_glibc ? nullptr : g_real.dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  UnwBacktraceFn bt = nullptr;
  if (h != nullptr) {
    // libunwind prefixes its per-architecture symbols with the target's name.
#if defined(__aarch64__)
    g_unw_flush_cache = reinterpret_cast<UnwFlushCacheFn>(dlsym(h, "_Uaarch64_flush_cache"));
    g_unw_local_as = static_cast<void**>(dlsym(h, "_ULaarch64_local_addr_space"));
#else
    g_unw_flush_cache = reinterpret_cast<UnwFlushCacheFn>(dlsym(h, "_Ux86_64_flush_cache"));
    g_unw_local_as = static_cast<void**>(dlsym(h, "_ULx86_64_local_addr_space"));
#endif
    bt = reinterpret_cast<UnwBacktraceFn>(dlsym(h, "unw_backtrace"));
  }
  if (bt == nullptr) {
    // No libunwind (a container image without libunwind8, say): glibc's
    // backtrace(), which walks the same .eh_frame tables through libgcc_s's
    // unwinder (the one C++ exceptions use), without libunwind's caches.
    // Its first call loads libgcc_s: paid here, before the program runs.
    g_unw_flush_cache = nullptr;
    g_unw_local_as = nullptr;
    void* warm[fmt::kMaxFrames];
    if (backtrace(warm, static_cast<int>(fmt::kMaxFrames)) <= 0) {
      return "stacks not recorded: no usable libunwind.so.8 (not found, or without "
             "unw_backtrace) and glibc's backtrace() returned nothing (install libunwind8)";
    }
    g_unw_backtrace = backtrace;
    return want_glibc ? nullptr
                      : "no usable libunwind.so.8 (not found, or without unw_backtrace): "
                        "stacks are unwound with glibc's backtrace(), which costs more per "
                        "sample (install libunwind8)";
  }
  // The first call initialises libunwind (its pipe) and is slow: pay it now,
  // with the low descriptors held.
  int filler = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  uint32_t before = OpenHighFds();
  if (filler >= 0) HoldLowFds(filler);
  void* warm[fmt::kMaxFrames];
  bt(warm, static_cast<int>(fmt::kMaxFrames));
  ReleaseLowFds();
  if (filler >= 0) close(filler);
  NewPipes pipes = PipesSince(before);
  if (g_unw_local_as != nullptr && *g_unw_local_as != nullptr) {
    auto* acc = static_cast<UnwAccessors*>(*g_unw_local_as);
    if (SameObject(reinterpret_cast<void*>(acc->access_mem), reinterpret_cast<void*>(bt)) &&
        SameObject(acc->find_proc_info, reinterpret_cast<void*>(bt))) {
      acc->access_mem = AccessMem;
      for (int i = 0; i < pipes.n; ++i) close(pipes.fd[i]);  // never used again
    }
  }
  g_unw_backtrace = bt;
  return nullptr;
}

}  // namespace memstep::preload
