#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (into ${FUZZ_BUILD_DIR:-build-fuzz})
# and runs each for a bounded time over a seed corpus (the reader alongside the
# parsers, then CPython's line-table decoders): for the reader, real
# traces that the main build's memstep writes here and now (several programs
# and processes, every record kind the programs produce, zstd-compressed and
# raw chunks) plus the trace builder's all-kinds trace; for the parsers, the
# documented examples. A crash, a leak, a timeout (10 s per input) or an
# out-of-memory (2 GiB) fails the script, with the reproducer in
# build-fuzz/crashes/ and the command to minimise it.
#
#   scripts/fuzz.sh [SECONDS]   seconds per target (default 60; $FUZZ_SECONDS)
#
# Needs the main build (build/ or $BUILD_DIR) for the seed traces and clang 14
# with its runtime (scripts/install-deps.sh installs clang-14 and
# libclang-rt-14-dev). The two targets run side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
seconds=${1:-${FUZZ_SECONDS:-60}}
main=${BUILD_DIR:-build}
fb=${FUZZ_BUILD_DIR:-build-fuzz}
[ -x "$main/bin/memstep" ] || { echo "fuzz.sh: $main/bin/memstep missing: run scripts/build.sh first" >&2; exit 2; }
command -v clang++-14 >/dev/null || { echo "fuzz.sh: clang++-14 missing: run scripts/install-deps.sh" >&2; exit 2; }

CC=clang-14 CXX=clang++-14 cmake -S . -B "$fb" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMEMSTEP_FUZZ=ON >/dev/null
cmake --build "$fb" -j "$(nproc)" --target reader_fuzz parsers_fuzz pylinetable_fuzz -- --quiet

# ---- seeds ---------------------------------------------------------------------
seeds=$fb/seeds
rm -rf "$seeds" "$fb/runs"
mkdir -p "$seeds/reader" "$seeds/parsers" "$seeds/pylinetable" "$fb/runs" "$fb/corpus/reader" \
  "$fb/corpus/parsers" "$fb/corpus/pylinetable" \
  "$fb/crashes"
bin=$root/$main/bin
run() {  # run NAME [ENV=V ...] -- COMMAND...: one memstep run into runs/NAME
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env MEMSTEP_SEED=1 MEMSTEP_QUIET=1 "${envs[@]}" "$bin/memstep" run --out "$fb/runs/$name" \
    --sample-interval 64K -- "$@" >/dev/null 2>&1 || true
}
run example -- "$bin/memstep_example_train" --steps 12
run example_raw MEMSTEP_NO_ZSTD=1 -- "$bin/memstep_example_train" --steps 6
run planted -- "$bin/e2e_planted"
run features MEMSTEP_NO_ZSTD=1 -- "$bin/memstep_step_features"
run capi -- "$bin/memstep_capi_cxx"
run fork -- sh -c "'$bin/memstep_example_train' --steps 3 & '$bin/memstep_example_train' --steps 3; wait"
if [ -e "$main/tests/cuda/fakedrv/libcuda.so.1" ]; then
  run cuda LD_LIBRARY_PATH="$root/$main/tests/cuda/fakedrv:$root/$main/tests/cuda/fakert12" \
    -- "$bin/cuda_app_dyn"
  run cuda_vmm LD_LIBRARY_PATH="$root/$main/tests/cuda/fakedrv" -- "$bin/cuda_app_vmm"
fi
run python -- /usr/bin/python3 -c 'x=[]
for i in range(3000): x.append({"k": str(i)})'
n=0
for f in "$fb"/runs/*/*.trace "$fb"/runs/*/*/*.trace; do
  [ -f "$f" ] || continue
  size=$(stat -c %s "$f")
  [ "$size" -le 262144 ] || continue   # keep the corpus fast: small traces only
  n=$((n + 1))
  # The first byte picks CRC checking: 1 = off (mutations reach the
  # decompressor and the record decoder), 0 = on.
  { printf '\001'; cat "$f"; } >"$seeds/reader/run$n"
  [ $((n % 3)) -ne 0 ] || { printf '\000'; cat "$f"; } >"$seeds/reader/run${n}crc"
done
[ "$n" -ge 4 ] || { echo "fuzz.sh: only $n seed traces were written (see $fb/runs)" >&2; exit 1; }
cp tests/fuzz/regress/reader/* "$seeds/reader/" 2>/dev/null || true
i=0
while IFS= read -r line; do  # mask byte + text; mask 31 accepts every form
  i=$((i + 1)); { printf '\037'; printf '%s' "$line"; } >"$seeds/parsers/s$i"
done <<'SEEDS'
growth > 1MiB/step
peak(forward) >= 2GiB
leaks > 0
device_peak(backward) < 70GiB
live_end <= 512KiB
rss_peak > 1.5G
device_growth > 1.5MB/step
live_growth > 0.25 M/step
512K
1.5MiB
2GB
10%
2.5 %
100 kB /s
SEEDS
cp tests/fuzz/regress/parsers/* "$seeds/parsers/" 2>/dev/null || true
cp tests/fuzz/regress/pylinetable/* "$seeds/pylinetable/"
rm -f "$seeds"/*/README.md
echo "fuzz.sh: $(ls "$seeds/reader" | wc -l) reader seeds ($n real traces), $i parser seeds;" \
  "${seconds}s per target"

# ---- fuzz ------------------------------------------------------------------------
fuzz() {  # fuzz TARGET MAX_LEN
  local t=$1
  "$fb/bin/${t}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$2" -print_final_stats=1 -artifact_prefix="$fb/crashes/$t-" \
    "$fb/corpus/$t" "$seeds/$t" >"$fb/$t.log" 2>&1
}
status=0
fuzz reader 262144 & rp=$!
{ fuzz parsers 256 && fuzz pylinetable 512; } & pp=$!
wait $rp || status=1
wait $pp || status=1
for t in reader parsers pylinetable; do
  grep -E '^stat::number_of_executed_units|^stat::new_units_added|^#[0-9]+ *DONE' "$fb/$t.log" |
    sed "s/^/fuzz.sh: $t: /" || true
done
if [ "$status" -ne 0 ] || ls "$fb"/crashes/* >/dev/null 2>&1; then
  for t in reader parsers pylinetable; do tail -40 "$fb/$t.log" | sed "s/^/$t: /"; done
  echo "fuzz.sh: FAIL: reproducers in $fb/crashes/; minimise one with" \
    "'$fb/bin/TARGET_fuzz -minimize_crash=1 -runs=20000 FILE', fix the bug and keep the" \
    "minimised input in tests/fuzz/regress/TARGET/" >&2
  exit 1
fi
echo "fuzz.sh: PASS (no crash, leak, timeout or out-of-memory)"
