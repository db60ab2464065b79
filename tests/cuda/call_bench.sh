#!/bin/sh
# The cost memstep adds per CUDA allocation call: cuda_call_bench bare, under
# libmemstep.so with every device allocation unwound
# (MEMSTEP_DEVICE_SAMPLE_INTERVAL=1, what memstep did before device sampling)
# and with the default device sampling, interleaved 5 times (1 with --quick),
# on the fake runtime and driver; prints the median ns per alloc+free pair and
# the ns each adds.
#   call_bench.sh BENCH LIBMEMSTEP FAKEDRV_DIR [--quick]
set -eu
BENCH=$1; LIB=$2; DRV=$3
N=200000; REPEAT=5
[ "${4:-}" = "--quick" ] && { N=2000; REPEAT=1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/memstep_cuda_bench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
unset FAKECUDA_LOG FAKECUDA_MEM_LIMIT FAKECUDA_FAIL_CALL FAKECUDA_RT_VIA_DRIVER
export LD_LIBRARY_PATH="$DRV"
i=0
while [ $i -lt $REPEAT ]; do
  "$BENCH" $N >>"$TMP/bare"
  env LD_PRELOAD="$LIB" MEMSTEP_DIR="$TMP/run" MEMSTEP_QUIET=1 MEMSTEP_DEVICE_SAMPLE_INTERVAL=1 \
    "$BENCH" $N >>"$TMP/all"
  env LD_PRELOAD="$LIB" MEMSTEP_DIR="$TMP/run" MEMSTEP_QUIET=1 "$BENCH" $N >>"$TMP/memstep"
  i=$((i + 1))
done
ls "$TMP"/run/*.trace >/dev/null 2>&1 || { echo "FAIL: no trace written"; exit 1; }
median() {  # median of column 4 of the RESULT lines for API $2 in file $1
  grep "RESULT $2 " "$1" | awk '{print $4}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
printf "%-32s %9s %9s %9s %9s %9s\n" api bare_ns all_ns added sampled_ns added
for api in cudaMallocAsync+cudaFreeAsync cudaMalloc+cudaFree; do
  b=$(median "$TMP/bare" $api); a=$(median "$TMP/all" $api); m=$(median "$TMP/memstep" $api)
  [ -n "$b" ] && [ -n "$a" ] && [ -n "$m" ] || { echo "FAIL: no result for $api"; exit 1; }
  awk -v n=$api -v b=$b -v a=$a -v m=$m \
    'BEGIN {printf "%-32s %9.1f %9.1f %9.1f %9.1f %9.1f\n", n, b, a, a - b, m, m - b}'
done
