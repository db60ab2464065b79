#!/bin/sh
# Every record row that format_records_doc prints (from src/format/records.h)
# must begin a line of docs/format.md: the document's field lists are the
# definition's. usage: format_records_doc.sh PROGRAM DOC
set -u
rows=$("$1") || { echo "FAIL: $1 did not run"; exit 1; }
[ -n "$rows" ] || { echo "FAIL: no rows"; exit 1; }
status=0
n=0
echo "$rows" | {
  while IFS= read -r row; do
    n=$((n + 1))
    if ! grep -qF -- "$row" "$2"; then
      echo "FAIL: docs/format.md lacks the row: $row"
      status=1
    fi
  done
  echo "$n rows checked"
  exit $status
}
