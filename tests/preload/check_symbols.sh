#!/bin/sh
# Fails if libmemstep.so exports a symbol outside the allow-list (the hooks,
# the CUDA wrappers and memstep_*), versions one wrongly, or needs a library
# outside libc/libm/libdl/libpthread/ld-linux.
# usage: check_symbols.sh LIB
set -u
LIB=$1
status=0
# The CUDA runtime wrappers, exported once per libcudart major (versioned).
cudart='cudaMalloc|cudaFree|cudaMallocManaged|cudaMallocHost|cudaHostAlloc|cudaFreeHost|cudaMallocPitch|cudaMalloc3D|cudaMallocAsync(_ptsz)?|cudaFreeAsync(_ptsz)?|cudaMallocFromPoolAsync(_ptsz)?|cudaGetDriverEntryPoint(ByVersion)?(_ptsz)?|cudaHostRegister|cudaHostUnregister|cudaMallocArray|cudaMalloc3DArray|cudaMallocMipmappedArray|cudaFreeArray|cudaFreeMipmappedArray|cudaIpcOpenMemHandle|cudaIpcCloseMemHandle|cudaMemPoolCreate|cudaMemPoolDestroy|cudaMemPoolTrimTo|cudaGraphAddMemAllocNode|cudaGraphAddMemFreeNode|cudaDeviceGraphMemTrim|cudaMemPoolSetAttribute'
# The CUDA driver wrappers (unversioned, like libcuda.so.1's own symbols).
cudadrv='cuMemAlloc_v2|cuMemFree_v2|cuMemAllocPitch_v2|cuMemAllocManaged|cuMemAllocHost_v2|cuMemHostAlloc|cuMemFreeHost|cuMemCreate|cuMemRelease|cuMemMap|cuMemUnmap|cuMemAllocAsync(_ptsz)?|cuMemFreeAsync(_ptsz)?|cuMemAllocFromPoolAsync(_ptsz)?|cuGetProcAddress(_v2)?|cuMemHostRegister_v2|cuMemHostUnregister|cuArrayCreate_v2|cuArray3DCreate_v2|cuMipmappedArrayCreate|cuArrayDestroy|cuMipmappedArrayDestroy|cuIpcOpenMemHandle(_v2)?|cuIpcCloseMemHandle|cuMemPoolCreate|cuMemPoolDestroy|cuMemPoolTrimTo|cuGraphAddMemAllocNode|cuGraphAddMemFreeNode|cuDeviceGraphMemTrim|cuMemImportFromShareableHandle|cuMulticastCreate|cuMulticastBindMem|cuMulticastBindAddr|cuMulticastUnbind|cuMemPoolSetAttribute|cuMemExportToShareableHandle'
allowed='^(malloc|free|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|mmap|mmap64|munmap|mremap|mprotect|dlopen|dlclose|dlsym|dlvsym|_exit|_Exit|execve|execv|execvp|execvpe|execl|execlp|execle|memstep_[a-z_]+|InitializeInjectionNvtx2|_Zn[wa]m(RKSt9nothrow_t|St11align_val_t|St11align_val_tRKSt9nothrow_t)?|_Zd[la]Pv(m|RKSt9nothrow_t|St11align_val_t|mSt11align_val_t|St11align_val_tRKSt9nothrow_t)?|'"$cudadrv"'|('"$cudart"')@@?libcudart\.so\.1[23]|libcudart\.so\.1[23])$'
versioned=$(nm -D --defined-only --with-symbol-versions "$LIB" | awk '{print $3}')
exports=$(echo "$versioned" | sed 's/@.*//')
[ -n "$versioned" ] || { echo "no exported symbols?"; exit 1; }
for s in $versioned; do
  if ! echo "$s" | grep -Eq "$allowed"; then
    echo "unexpected exported symbol (or version): $s"; status=1
  fi
done
# Each runtime wrapper once per major, .13 the default; the version nodes
# must not leak onto anything else (malloc@libcudart.so.12 would never bind).
for s in cudaMalloc cudaFree cudaMallocAsync_ptsz cudaGetDriverEntryPointByVersion; do
  for v in "$s@libcudart.so.12" "$s@@libcudart.so.13"; do
    echo "$versioned" | grep -qx "$v" || { echo "missing export: $v"; status=1; }
  done
done
for s in malloc free dlsym dlvsym cuMemAlloc_v2 cuGetProcAddress_v2 memstep_step_end; do
  echo "$versioned" | grep -qx "$s" || { echo "missing or versioned export: $s"; status=1; }
done
for s in malloc free calloc realloc posix_memalign memalign aligned_alloc malloc_usable_size \
         mmap munmap mremap mprotect dlopen dlclose memstep_step_begin memstep_step_end \
         memstep_stage_begin memstep_stage_end memstep_counter memstep_epoch_begin \
         InitializeInjectionNvtx2 _Znwm _Znam _ZdlPv _ZdaPv _ZdlPvm; do
  echo "$exports" | grep -qx "$s" || { echo "missing export: $s"; status=1; }
done
needed=$(readelf -d "$LIB" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for n in $needed; do
  case "$n" in
    libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|ld-linux-x86-64.so.2|ld-linux-aarch64.so.1) ;;
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
