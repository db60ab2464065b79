# Shared by the suite scripts (sourced). finish LABEL RC: prints the
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
