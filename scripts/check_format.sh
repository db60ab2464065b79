#!/usr/bin/env bash
# Checks that every C and C++ file git tracks is formatted by .clang-format
# (clang-format 14, which scripts/install-deps.sh installs). Prints the files
# that differ and exits 1 if any does; `scripts/check_format.sh --fix`
# rewrites them in place.
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || true)
[ -n "$cf" ] || { echo "check_format.sh: clang-format-14 missing: run scripts/install-deps.sh" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.c' '*.cc' '*.h')
if [ "${1:-}" = --fix ]; then
  "$cf" -i --style=file "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$cf" --style=file "$f" | cmp -s - "$f" || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  printf 'check_format.sh: not formatted (run scripts/check_format.sh --fix):\n' >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format.sh: ${#files[@]} files formatted"
