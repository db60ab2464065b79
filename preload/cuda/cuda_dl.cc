// How the CUDA wrappers find real functions, and the dlsym/dlvsym override.
//
// dlsym and dlvsym are small assembly trampolines: they ask a C function
// whether the lookup is one memstep wraps; if not (every name but ~40, and
// every RTLD_DEFAULT/RTLD_NEXT lookup) they JUMP to the next definition, so
// the loader still sees the original caller's return address and RTLD_NEXT
// keeps its meaning for other interposers (a plain call would make RTLD_NEXT
// relative to libmemstep: a second interposer would get its own function
// back, research/cuda-interception.md section 2.4). gcc 12 has no musttail,
// hence the assembly.
//
// The real dlsym/dlvsym: libmemstep exports both, so a normal reference from
// this library would bind to itself (or to an interposer preloaded before
// memstep). glibc's are found by reading libc.so.6's (or, before glibc 2.34,
// libdl.so.2's) dynamic symbol table through dl_iterate_phdr, which neither
// allocates nor calls dlsym. The hooks resolve the real allocator functions
// with them (OwnDlsym): RTLD_NEXT then means "after libmemstep" whatever else
// interposes dlsym, before or after memstep.
//
// The trampolines forward to the NEXT definition after libmemstep, so that
// every interposer in the chain is honoured: another interposer's (a
// GPU-sharing layer such as HAMi's libvgpu.so, preloaded after memstep), or
// else glibc's. It is found with an UNVERSIONED dlsym(RTLD_NEXT, "dlsym")
// called from libmemstep: a versioned lookup (dlvsym(RTLD_NEXT, "dlsym",
// "GLIBC_2.34")) never returns an interposer's unversioned definition, since
// glibc's dlvsym marks the version it asks for hidden, and that interposer
// would be bypassed. The versioned lookups remain as the fallback.

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <unistd.h>

#include "preload/core/loaded_range.h"
#include "preload/cuda/cuda_internal.h"
#include "preload/host/runtime.h"

using DlsymFn = void* (*)(void*, const char*);
using DlvsymFn = void* (*)(void*, const char*, const char*);

// Read by the trampolines (hidden: PC-relative, no GOT).
extern "C" {
__attribute__((visibility("hidden"))) DlsymFn ms_next_dlsym = nullptr;
__attribute__((visibility("hidden"))) DlvsymFn ms_next_dlvsym = nullptr;
__attribute__((visibility("hidden"))) void* ms_dlsym_decide(void* h, const char* name);
__attribute__((visibility("hidden"))) void* ms_dlvsym_decide(void* h, const char* name,
                                                             const char* version);
}

#if defined(__x86_64__)
// Both save the arguments, call the decision function (stack aligned to 16),
// restore them, and either return its result or jump to the next definition.
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl dlsym\n"
    ".type dlsym, @function\n"
    "dlsym:\n"
    ".cfi_startproc\n"
    "  endbr64\n"
    "  pushq %rdi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  pushq %rsi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  subq $8, %rsp\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  call ms_dlsym_decide\n"
    "  addq $8, %rsp\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  popq %rsi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  popq %rdi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  testq %rax, %rax\n"
    "  jz 1f\n"
    "  ret\n"
    "1:\n"
    "  jmp *ms_next_dlsym(%rip)\n"
    ".cfi_endproc\n"
    ".size dlsym, .-dlsym\n"
    "\n"
    ".p2align 4\n"
    ".globl dlvsym\n"
    ".type dlvsym, @function\n"
    "dlvsym:\n"
    ".cfi_startproc\n"
    "  endbr64\n"
    "  pushq %rdi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  pushq %rsi\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  pushq %rdx\n"
    ".cfi_adjust_cfa_offset 8\n"
    "  call ms_dlvsym_decide\n"
    "  popq %rdx\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  popq %rsi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  popq %rdi\n"
    ".cfi_adjust_cfa_offset -8\n"
    "  testq %rax, %rax\n"
    "  jz 1f\n"
    "  ret\n"
    "1:\n"
    "  jmp *ms_next_dlvsym(%rip)\n"
    ".cfi_endproc\n"
    ".size dlvsym, .-dlvsym\n");
#elif defined(__aarch64__)
// The same on aarch64, where the return address is in x30 rather than on the
// stack: each saves x29/x30 and the arguments in a 32- or 48-byte frame
// (sp stays 16-aligned), calls the decision function, restores them, and
// either returns its result or branches to the next definition with x30 the
// caller's again (x16: the register a BTI "c" landing pad accepts for br).
// "hint #34" is bti c, a no-op on cores without BTI.
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl dlsym\n"
    ".type dlsym, %function\n"
    "dlsym:\n"
    ".cfi_startproc\n"
    "  hint #34\n"
    "  stp x29, x30, [sp, #-32]!\n"
    ".cfi_def_cfa_offset 32\n"
    ".cfi_offset 29, -32\n"
    ".cfi_offset 30, -24\n"
    "  mov x29, sp\n"
    "  stp x0, x1, [sp, #16]\n"
    "  bl ms_dlsym_decide\n"
    "  cbz x0, 1f\n"
    "  ldp x29, x30, [sp], #32\n"
    ".cfi_remember_state\n"
    ".cfi_def_cfa_offset 0\n"
    ".cfi_restore 29\n"
    ".cfi_restore 30\n"
    "  ret\n"
    "1:\n"
    ".cfi_restore_state\n"
    "  ldp x0, x1, [sp, #16]\n"
    "  ldp x29, x30, [sp], #32\n"
    ".cfi_def_cfa_offset 0\n"
    ".cfi_restore 29\n"
    ".cfi_restore 30\n"
    "  adrp x16, ms_next_dlsym\n"
    "  ldr x16, [x16, #:lo12:ms_next_dlsym]\n"
    "  br x16\n"
    ".cfi_endproc\n"
    ".size dlsym, .-dlsym\n"
    "\n"
    ".p2align 4\n"
    ".globl dlvsym\n"
    ".type dlvsym, %function\n"
    "dlvsym:\n"
    ".cfi_startproc\n"
    "  hint #34\n"
    "  stp x29, x30, [sp, #-48]!\n"
    ".cfi_def_cfa_offset 48\n"
    ".cfi_offset 29, -48\n"
    ".cfi_offset 30, -40\n"
    "  mov x29, sp\n"
    "  stp x0, x1, [sp, #16]\n"
    "  str x2, [sp, #32]\n"
    "  bl ms_dlvsym_decide\n"
    "  cbz x0, 1f\n"
    "  ldp x29, x30, [sp], #48\n"
    ".cfi_remember_state\n"
    ".cfi_def_cfa_offset 0\n"
    ".cfi_restore 29\n"
    ".cfi_restore 30\n"
    "  ret\n"
    "1:\n"
    ".cfi_restore_state\n"
    "  ldp x0, x1, [sp, #16]\n"
    "  ldr x2, [sp, #32]\n"
    "  ldp x29, x30, [sp], #48\n"
    ".cfi_def_cfa_offset 0\n"
    ".cfi_restore 29\n"
    ".cfi_restore 30\n"
    "  adrp x16, ms_next_dlvsym\n"
    "  ldr x16, [x16, #:lo12:ms_next_dlvsym]\n"
    "  br x16\n"
    ".cfi_endproc\n"
    ".size dlvsym, .-dlvsym\n");
#else
#error "the dlsym/dlvsym trampolines are written for x86-64 and aarch64 only"
#endif

namespace memstep::preload::cuda {

#define MEMSTEP_CUDA_NAME(name, abi) #name,
#define MEMSTEP_CUDA_ABI(name, abi) abi,
const char* const kRtSymName[kRtSymCount] = {MEMSTEP_CUDART_SYMBOLS(MEMSTEP_CUDA_NAME)
                                                 MEMSTEP_CUDART_HELPERS(MEMSTEP_CUDA_NAME)};
const char* const kDrSymName[kDrSymCount] = {MEMSTEP_CUDA_DRIVER_SYMBOLS(MEMSTEP_CUDA_NAME)
                                                 MEMSTEP_CUDA_DRIVER_HELPERS(MEMSTEP_CUDA_NAME)};
namespace {
const uint8_t kRtSymAbi[kRtSymCount] = {MEMSTEP_CUDART_SYMBOLS(MEMSTEP_CUDA_ABI)
                                            MEMSTEP_CUDART_HELPERS(MEMSTEP_CUDA_ABI)};
const uint8_t kDrSymAbi[kDrSymCount] = {MEMSTEP_CUDA_DRIVER_SYMBOLS(MEMSTEP_CUDA_ABI)
                                            MEMSTEP_CUDA_DRIVER_HELPERS(MEMSTEP_CUDA_ABI)};
#undef MEMSTEP_CUDA_NAME
#undef MEMSTEP_CUDA_ABI

bool StrEq(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}
bool StartsWith(const char* s, const char* prefix) {
  while (*prefix != '\0' && *s == *prefix) ++s, ++prefix;
  return *prefix == '\0';
}
const char* Basename(const char* path) {
  const char* b = path;
  for (const char* p = path; *p != '\0'; ++p) {
    if (*p == '/') b = p + 1;
  }
  return b;
}

// ---- glibc's dlsym/dlvsym from its dynamic symbol table ----

struct DynInfo {
  const char* strtab = nullptr;
  const ElfW(Sym) * symtab = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const uint32_t* sysv_hash = nullptr;
  const ElfW(Half) * versym = nullptr;
  const char* soname = nullptr;
};

bool ReadDyn(const dl_phdr_info* info, DynInfo* d) {
  const uintptr_t base = info->dlpi_addr;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dyn = reinterpret_cast<const ElfW(Dyn)*>(base + info->dlpi_phdr[i].p_vaddr);
    }
  }
  if (dyn == nullptr) return false;
  // ld.so relocates these entries in place (x86-64, aarch64); the vDSO's are not.
  auto fix = [base](uintptr_t p) { return p < base ? p + base : p; };
  uintptr_t soname = 0;
  bool has_soname = false;
  for (; dyn->d_tag != DT_NULL; ++dyn) {
    switch (dyn->d_tag) {
      case DT_STRTAB:
        d->strtab = reinterpret_cast<const char*>(fix(dyn->d_un.d_ptr));
        break;
      case DT_SYMTAB:
        d->symtab = reinterpret_cast<const ElfW(Sym)*>(fix(dyn->d_un.d_ptr));
        break;
      case DT_GNU_HASH:
        d->gnu_hash = reinterpret_cast<const uint32_t*>(fix(dyn->d_un.d_ptr));
        break;
      case DT_HASH:
        d->sysv_hash = reinterpret_cast<const uint32_t*>(fix(dyn->d_un.d_ptr));
        break;
      case DT_VERSYM:
        d->versym = reinterpret_cast<const ElfW(Half)*>(fix(dyn->d_un.d_ptr));
        break;
      case DT_SONAME:
        soname = dyn->d_un.d_val;
        has_soname = true;
        break;
      default:
        break;
    }
  }
  if (d->strtab == nullptr || d->symtab == nullptr) return false;
  if (d->gnu_hash == nullptr && d->sysv_hash == nullptr) return false;
  d->soname = has_soname ? d->strtab + soname : nullptr;
  return true;
}

// A defined, non-hidden-version function named `name` at symbol index idx.
void* MatchSym(const dl_phdr_info* info, const DynInfo& d, uint32_t idx, const char* name) {
  const ElfW(Sym)& s = d.symtab[idx];
  if (s.st_shndx == SHN_UNDEF || ELF64_ST_TYPE(s.st_info) != STT_FUNC) return nullptr;
  if (!StrEq(d.strtab + s.st_name, name)) return nullptr;
  if (d.versym != nullptr && (d.versym[idx] & 0x8000) != 0) return nullptr;
  return reinterpret_cast<void*>(info->dlpi_addr + s.st_value);
}

void* FindSym(const dl_phdr_info* info, const DynInfo& d, const char* name) {
  if (d.gnu_hash != nullptr) {
    const uint32_t* gh = d.gnu_hash;
    const uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_size = gh[2];
    if (nbuckets == 0) return nullptr;
    const auto* bloom = reinterpret_cast<const ElfW(Addr)*>(gh + 4);
    const auto* buckets = reinterpret_cast<const uint32_t*>(bloom + bloom_size);
    const uint32_t* chain = buckets + nbuckets;
    uint32_t h = 5381;
    for (const char* p = name; *p != '\0'; ++p) h = h * 33 + static_cast<unsigned char>(*p);
    uint32_t idx = buckets[h % nbuckets];
    if (idx < symoffset) return nullptr;
    for (;; ++idx) {
      uint32_t ch = chain[idx - symoffset];
      if ((ch | 1) == (h | 1)) {
        if (void* p = MatchSym(info, d, idx, name)) return p;
      }
      if ((ch & 1) != 0) return nullptr;
    }
  }
  const uint32_t nchain = d.sysv_hash[1];
  for (uint32_t i = 0; i < nchain; ++i) {
    if (void* p = MatchSym(info, d, i, name)) return p;
  }
  return nullptr;
}

struct ElfFind {
  const char* soname;
  const char* names[2];
  void* found[2];
};

int ElfFindCb(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<ElfFind*>(data);
  DynInfo d;
  if (!ReadDyn(info, &d) || d.soname == nullptr || !StrEq(d.soname, f->soname)) return 0;
  for (int i = 0; i < 2; ++i) f->found[i] = FindSym(info, d, f->names[i]);
  return 1;
}

// libmemstep.so's own mapped range.
std::atomic<uintptr_t> g_self_lo{0}, g_self_hi{0};

int SelfCb(dl_phdr_info* info, size_t, void* data) {
  uintptr_t me = reinterpret_cast<uintptr_t>(data);
  uintptr_t lo, hi;
  if (!LoadedRange(info, &lo, &hi) || me < lo || me >= hi) return 0;
  g_self_lo.store(lo, std::memory_order_relaxed);
  g_self_hi.store(hi, std::memory_order_release);
  return 1;
}

DlsymFn g_libc_dlsym = nullptr;  // glibc's own, for memstep's lookups
DlvsymFn g_libc_dlvsym = nullptr;
std::atomic<int> g_dl_state{0};  // 0 nothing, 1 glibc's known, 2 next-in-chain known
__thread bool t_dl_bootstrapping __attribute__((tls_model("initial-exec")));

void Fatal(const char* msg) {
  (void)!write(2, msg, StrLen(msg));
  _exit(127);
}

// The next definition of dlsym or dlvsym after libmemstep (g_libc_dlsym is
// called from here), never memstep's own: an interposer's, else glibc's
// default version (@@GLIBC_2.34, or libdl.so.2's base version before 2.34:
// GLIBC_2.2.5 on x86-64, GLIBC_2.17 on aarch64, the first glibc of each port).
// Unversioned first, see the top of this file.
#if defined(__aarch64__)
constexpr char kGlibcBaseVersion[] = "GLIBC_2.17";
#else
constexpr char kGlibcBaseVersion[] = "GLIBC_2.2.5";
#endif
void* NextDefinition(const char* name) {
  void* p = g_libc_dlsym(RTLD_NEXT, name);
  if (p == nullptr || IsOurs(p)) p = g_libc_dlvsym(RTLD_NEXT, name, "GLIBC_2.34");
  if (p == nullptr || IsOurs(p)) p = g_libc_dlvsym(RTLD_NEXT, name, kGlibcBaseVersion);
  return p != nullptr && !IsOurs(p) ? p : nullptr;
}

// Never allocates before glibc's functions are known; safe before
// constructors, inside the loader, and concurrently (idempotent).
void EnsureDl() {
  if (g_dl_state.load(std::memory_order_acquire) == 2 || t_dl_bootstrapping) return;
  if (g_dl_state.load(std::memory_order_acquire) == 0) {
    ElfFind f = {"libc.so.6", {"dlsym", "dlvsym"}, {nullptr, nullptr}};
    dl_iterate_phdr(ElfFindCb, &f);
    if (f.found[0] == nullptr || f.found[1] == nullptr) {  // glibc < 2.34
      f.soname = "libdl.so.2";
      dl_iterate_phdr(ElfFindCb, &f);
    }
    if (f.found[0] == nullptr || f.found[1] == nullptr) {
      Fatal("memstep: cannot find glibc's dlsym/dlvsym; the program cannot run under memstep\n");
    }
    dl_iterate_phdr(SelfCb, reinterpret_cast<void*>(&EnsureDl));
    g_libc_dlsym = reinterpret_cast<DlsymFn>(f.found[0]);
    g_libc_dlvsym = reinterpret_cast<DlvsymFn>(f.found[1]);
    __atomic_store_n(&ms_next_dlsym, g_libc_dlsym, __ATOMIC_RELEASE);
    __atomic_store_n(&ms_next_dlvsym, g_libc_dlvsym, __ATOMIC_RELEASE);
    g_dl_state.store(1, std::memory_order_release);
  }
  // The next definitions after libmemstep (a lookup failure may allocate
  // and come back here: the flag makes that use glibc's meanwhile).
  t_dl_bootstrapping = true;
  if (void* s = NextDefinition("dlsym")) {
    __atomic_store_n(&ms_next_dlsym, reinterpret_cast<DlsymFn>(s), __ATOMIC_RELEASE);
  }
  if (void* v = NextDefinition("dlvsym")) {
    __atomic_store_n(&ms_next_dlvsym, reinterpret_cast<DlvsymFn>(v), __ATOMIC_RELEASE);
  }
  t_dl_bootstrapping = false;
  g_dl_state.store(2, std::memory_order_release);
}

// ---- loaded CUDA libraries ----

struct PathFind {
  const char* prefix;  // basename prefix, e.g. "libcudart.so.13"
  char path[1024];
};

int PathCb(dl_phdr_info* info, size_t, void* data) {
  auto* f = static_cast<PathFind*>(data);
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  if (!StartsWith(Basename(info->dlpi_name), f->prefix)) return 0;
  size_t n = StrLen(info->dlpi_name);
  if (n >= sizeof(f->path)) return 0;
  for (size_t i = 0; i <= n; ++i) f->path[i] = info->dlpi_name[i];
  return 1;
}

// A handle of the loaded library with this SONAME (or whose file name starts
// with `prefix`), never loading anything. Handles are kept: the library then
// stays mapped, so cached function pointers stay valid.
void* LoadedHandle(const char* soname, const char* prefix) {
  void* h = g_real.dlopen(soname, RTLD_NOLOAD | RTLD_LAZY);
  if (h != nullptr) return h;
  PathFind f;
  f.prefix = prefix;
  if (dl_iterate_phdr(PathCb, &f) == 0) return nullptr;
  return g_real.dlopen(f.path, RTLD_NOLOAD | RTLD_LAZY);
}

std::atomic<void*> g_rt_handle[kNumMajors];
std::atomic<void*> g_rt_real[kNumMajors][kRtSymCount];
std::atomic<void*> g_dr_handle{nullptr};
std::atomic<void*> g_dr_real[kDrSymCount];
std::atomic<void*> g_dr_helper[kDrSymCount];

void* CudartHandle(int major) {
  int mi = MajorIndex(major);
  void* h = g_rt_handle[mi].load(std::memory_order_acquire);
  if (h != nullptr) return h;
  h = LoadedHandle(major == 12 ? "libcudart.so.12" : "libcudart.so.13",
                   major == 12 ? "libcudart.so.12" : "libcudart.so.13");
  if (h != nullptr) g_rt_handle[mi].store(h, std::memory_order_release);
  return h;
}

void* CudaHandle() {
  void* h = g_dr_handle.load(std::memory_order_acquire);
  if (h != nullptr) return h;
  h = LoadedHandle("libcuda.so.1", "libcuda.so");
  if (h != nullptr) g_dr_handle.store(h, std::memory_order_release);
  return h;
}

void* NotOurs(void* p) { return p != nullptr && !IsOurs(p) ? p : nullptr; }

void* FindRuntime(int major, const char* name) {
  EnsureDl();
  const char* ver = major == 12 ? "libcudart.so.12" : "libcudart.so.13";
  const char* other = major == 12 ? "libcudart.so.13" : "libcudart.so.12";
  // The next definition, as the program's own reference would bind it: an
  // unversioned one (another interposer preloaded after memstep) binds a
  // versioned reference, but dlvsym never returns it. Skip it only when it
  // is the other major's runtime.
  void* next = NotOurs(g_libc_dlsym(RTLD_NEXT, name));
  if (next != nullptr && next != g_libc_dlvsym(RTLD_NEXT, name, other)) return next;
  if (void* p = NotOurs(g_libc_dlvsym(RTLD_NEXT, name, ver))) return p;
  if (void* h = CudartHandle(major)) {
    if (void* p = NotOurs(g_libc_dlvsym(h, name, ver))) return p;
    if (void* p = NotOurs(g_libc_dlsym(h, name))) return p;
  }
  // An unversioned reference (dlsym(RTLD_DEFAULT), old binaries) binds the
  // default (.13) wrapper even in a process with only another runtime.
  if (next != nullptr) return next;
  PathFind f;
  f.prefix = "libcudart.so.";
  if (dl_iterate_phdr(PathCb, &f) != 0) {
    if (void* h = g_real.dlopen(f.path, RTLD_NOLOAD | RTLD_LAZY)) {
      return NotOurs(g_libc_dlsym(h, name));
    }
  }
  return nullptr;
}

int FindName(const char* const* names, int count, const char* name) {
  for (int i = 0; i < count; ++i) {
    if (StrEq(names[i], name)) return i;
  }
  return -1;
}

// cu[A-Z]... or cuda[A-Z]...: the only names worth a table search.
bool Interesting(const char* n) {
  if (n[0] != 'c' || n[1] != 'u') return false;
  if (n[2] >= 'A' && n[2] <= 'Z') return true;
  return n[2] == 'd' && n[3] == 'a' && n[4] >= 'A' && n[4] <= 'Z';
}

bool Special(void* h) { return h == RTLD_DEFAULT || h == RTLD_NEXT; }

// The libcudart major `real` (found as `name` in h) belongs to: 12, 13 or 0.
int MajorOf(void* h, const char* name, void* real) {
  if (g_libc_dlvsym(h, name, "libcudart.so.13") == real) return 13;
  if (g_libc_dlvsym(h, name, "libcudart.so.12") == real) return 12;
  return 0;
}

void* WrapFound(void* h, int abi, void* real, int major) {
  if (real == nullptr || g_state.load(std::memory_order_relaxed) == kDisabled) return real;
  if (!IsRuntimeAbi(abi)) return WrapPointer(abi, real, nullptr, 0);
  if (major == 0) return real;  // another runtime's ABI: the driver layer sees its calls
  const char* ver = major == 12 ? "libcudart.so.12" : "libcudart.so.13";
  void* get_device = g_libc_dlvsym(h, "cudaGetDevice", ver);
  if (get_device == nullptr) get_device = g_libc_dlsym(h, "cudaGetDevice");
  return WrapPointer(abi, real, NotOurs(get_device), major);
}

}  // namespace

bool DriverLoaded() { return CudaHandle() != nullptr; }

bool IsOurs(const void* p) {
  uintptr_t hi = g_self_hi.load(std::memory_order_acquire);
  uintptr_t lo = g_self_lo.load(std::memory_order_relaxed);
  return reinterpret_cast<uintptr_t>(p) - lo < hi - lo;
}

void* RtReal(int major, int sym) {
  int mi = MajorIndex(major);
  if (mi < 0 || sym < 0 || sym >= kRtSymCount) return nullptr;
  void* p = g_rt_real[mi][sym].load(std::memory_order_acquire);
  if (p != nullptr) return p;
  p = FindRuntime(major, kRtSymName[sym]);
  if (p != nullptr) g_rt_real[mi][sym].store(p, std::memory_order_release);
  return p;
}

void* DrReal(int sym) {
  void* p = g_dr_real[sym].load(std::memory_order_acquire);
  if (p != nullptr) return p;
  EnsureDl();
  p = NotOurs(g_libc_dlsym(RTLD_NEXT, kDrSymName[sym]));
  if (p == nullptr) {
    if (void* h = CudaHandle()) p = NotOurs(g_libc_dlsym(h, kDrSymName[sym]));
  }
  if (p != nullptr) g_dr_real[sym].store(p, std::memory_order_release);
  return p;
}

void* DrHelper(int sym) {
  void* p = g_dr_helper[sym].load(std::memory_order_acquire);
  if (p != nullptr) return p;
  void* h = CudaHandle();
  if (h == nullptr) return nullptr;
  EnsureDl();
  p = NotOurs(g_libc_dlsym(h, kDrSymName[sym]));
  if (p != nullptr) g_dr_helper[sym].store(p, std::memory_order_release);
  return p;
}

// ---- wrapper slots ----

namespace {
struct SlotState {
  std::atomic<int> state;  // 0 free, 1 being filled, 2 ready
  std::atomic<void*> real;
  std::atomic<void*> get_device;
  std::atomic<int> major;
};
SlotState g_slots[kAbiCount][kSlots];
std::atomic<bool> g_slots_full_noted{false};
}  // namespace

Target SlotTarget(int abi, int s) {
  SlotState& st = g_slots[abi][s];
  return {st.real.load(std::memory_order_acquire), st.get_device.load(std::memory_order_relaxed),
          st.major.load(std::memory_order_relaxed)};
}

void* WrapPointer(int abi, void* real, void* get_device, int major) {
  if (real == nullptr || abi < 0 || abi >= kAbiCount || IsOurs(real)) return real;
  for (int s = 0; s < kSlots; ++s) {
    SlotState& st = g_slots[abi][s];
    if (st.state.load(std::memory_order_acquire) == 2 &&
        st.real.load(std::memory_order_relaxed) == real) {
      return SlotWrapper(abi, s);
    }
  }
  for (int s = 0; s < kSlots; ++s) {
    SlotState& st = g_slots[abi][s];
    int expected = 0;
    if (st.state.load(std::memory_order_relaxed) != 0 ||
        !st.state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      continue;
    }
    st.get_device.store(get_device, std::memory_order_relaxed);
    st.major.store(major, std::memory_order_relaxed);
    st.real.store(real, std::memory_order_release);
    st.state.store(2, std::memory_order_release);
    return SlotWrapper(abi, s);
  }
  if (!g_slots_full_noted.exchange(true)) {
    Notice("no wrapper slot left: later CUDA lookups of one function are not intercepted");
  }
  return real;
}

}  // namespace memstep::preload::cuda

namespace memstep::preload {

void* OwnDlsym(void* handle, const char* name) {
  cuda::EnsureDl();
  return cuda::g_libc_dlsym(handle, name);
}

}  // namespace memstep::preload

using namespace memstep::preload::cuda;  // NOLINT: the C entry points of the trampolines

// nullptr: the trampoline jumps to the next dlsym (the caller's own lookup).
extern "C" void* ms_dlsym_decide(void* h, const char* name) {
  EnsureDl();
  if (Special(h) || name == nullptr || !Interesting(name)) return nullptr;
  int sym = FindName(kRtSymName, kRtHooked, name);
  if (sym >= 0) {
    void* real = ms_next_dlsym(h, name);
    return WrapFound(h, kRtSymAbi[sym], real, real != nullptr ? MajorOf(h, name, real) : 0);
  }
  sym = FindName(kDrSymName, kDrHooked, name);
  if (sym < 0) return nullptr;
  return WrapFound(h, kDrSymAbi[sym], ms_next_dlsym(h, name), 0);
}

extern "C" void* ms_dlvsym_decide(void* h, const char* name, const char* version) {
  EnsureDl();
  if (Special(h) || name == nullptr || version == nullptr || !Interesting(name)) return nullptr;
  int sym = FindName(kRtSymName, kRtHooked, name);
  if (sym >= 0) {
    int major = StrEq(version, "libcudart.so.13") ? 13 : StrEq(version, "libcudart.so.12") ? 12 : 0;
    return WrapFound(h, kRtSymAbi[sym], ms_next_dlvsym(h, name, version), major);
  }
  sym = FindName(kDrSymName, kDrHooked, name);
  if (sym < 0) return nullptr;
  return WrapFound(h, kDrSymAbi[sym], ms_next_dlvsym(h, name, version), 0);
}
