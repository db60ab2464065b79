# Shared by the suite scripts (sourced, after they define WORK, MEMSTEP, now
# and secs).
#
# report_traces LABEL: runs `memstep report --format json` over WORK/traces
# into WORK/report.json, says how long it took and how many traces there
# were, sets rc_r to its exit status, and says which result XML is missing.
report_traces() {
  local label=$1 t0 t1 f
  t0=$(now)
  "$MEMSTEP" report "$WORK/traces" --format json >"$WORK/report.json" 2>"$WORK/report.err"
  rc_r=$?
  t1=$(now)
  echo "$label: memstep report --format json: exit $rc_r in $(secs "$t0" "$t1") s" \
    "($(find "$WORK/traces" -name '*.trace' | wc -l) trace files, $(du -sh "$WORK/traces" | cut -f1))"
  [ $rc_r -eq 0 ] || sed 's/^/  report: /' "$WORK/report.err" | head -20
  for f in a.xml b.xml; do
    [ -s "$WORK/$f" ] || echo "$label: $WORK/$f is missing (see $WORK/${f%.xml}.log)"
  done
}

# finish LABEL RC: prints the
# comparison (WORK/compare.out, from suite_compare.py, which exited RC),
# removes WORK when it passed (unless KEEP_WORK=1), and exits: RC, or 1 with
# "0 passed, 1 failed" when no comparison was made.
finish() {
  local label=$1 rc=$2 out
  out=$(cat "$WORK/compare.out" 2>/dev/null)
  if [ "$rc" -eq 0 ] && [ "${KEEP_WORK:-0}" != 1 ]; then
    rm -rf "$WORK"
  else
    echo "$label: logs kept in $WORK (a.log: without memstep, b.log: with; traces/, report.json)"
  fi
  [ -n "$out" ] && printf '%s\n' "$out"
  if [ "$rc" -gt 1 ] || ! printf '%s\n' "$out" | tail -1 | grep -qE '^[0-9]+ passed, [0-9]+ failed$'; then
    echo "$label: FAIL: could not compare the runs"
    echo "0 passed, 1 failed"
    exit 1
  fi
  exit "$rc"
}
