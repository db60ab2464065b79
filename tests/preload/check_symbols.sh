#!/bin/sh
# Fails if libmemstep.so exports a symbol outside the allow-list (the hooks and
# memstep_*) or needs a library outside libc/libm/libdl/libpthread/ld-linux.
# usage: check_symbols.sh LIB
set -u
LIB=$1
status=0
allowed='^(malloc|free|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|mmap|mmap64|munmap|mremap|dlopen|dlclose|_exit|_Exit|execve|execv|execvp|execvpe|execl|execlp|execle|memstep_[a-z_]+|InitializeInjectionNvtx2|_Zn[wa]m(RKSt9nothrow_t|St11align_val_t|St11align_val_tRKSt9nothrow_t)?|_Zd[la]Pv(m|RKSt9nothrow_t|St11align_val_t|mSt11align_val_t|St11align_val_tRKSt9nothrow_t)?)$'
exports=$(nm -D --defined-only "$LIB" | awk '{print $3}' | sed 's/@.*//')
[ -n "$exports" ] || { echo "no exported symbols?"; exit 1; }
for s in $exports; do
  if ! echo "$s" | grep -Eq "$allowed"; then
    echo "unexpected exported symbol: $s"; status=1
  fi
done
for s in malloc free calloc realloc posix_memalign memalign aligned_alloc malloc_usable_size \
         mmap munmap mremap dlopen dlclose memstep_step_begin memstep_step_end \
         memstep_stage_begin memstep_stage_end memstep_counter memstep_epoch_begin \
         InitializeInjectionNvtx2 _Znwm _Znam _ZdlPv _ZdaPv _ZdlPvm; do
  echo "$exports" | grep -qx "$s" || { echo "missing export: $s"; status=1; }
done
needed=$(readelf -d "$LIB" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for n in $needed; do
  case "$n" in
    libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|ld-linux-x86-64.so.2) ;;
    *) echo "unexpected DT_NEEDED: $n"; status=1 ;;
  esac
done
# Never a C++ runtime or an unwinder at link time.
if nm -D --undefined-only "$LIB" | grep -v ' __cxa_finalize' | grep -Eq '_Znw|_Zdl|__cxa_|_Unwind_|unw_|ZSTD_'; then
  echo "links C++ runtime / unwinder / zstd symbols:"; nm -D --undefined-only "$LIB" | grep -E '_Znw|_Zdl|__cxa_|_Unwind_|unw_|ZSTD_'
  status=1
fi
# No C++ dynamic initializer: one would run after memstep's constructor(101)
# and reset state the constructor (or an earlier hook) had set up.
if nm "$LIB" 2>/dev/null | grep -q '_GLOBAL__sub_I'; then
  echo "dynamic initializers found:"; nm "$LIB" | grep '_GLOBAL__sub_I'; status=1
fi
[ $status -eq 0 ] && echo "symbols ok: $(echo "$exports" | wc -l) exports; needed: $needed"
exit $status
