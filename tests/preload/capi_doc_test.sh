#!/bin/sh
# docs/preload.md's "Public C API" section names every memstep_* function:
# each one include/memstep/memstep.h declares has a row in its table
# (`memstep_NAME(...)` in the first column), and each one libmemstep.so
# exports is written there as `memstep_NAME(...)` (perhaps after its
# type). Fails naming what is missing.
# usage: capi_doc_test.sh LIB HEADER DOC
set -u
lib=$1 header=$2 doc=$3
status=0
section=$(awk '/^## Public C API/ { on = 1; next } /^## / { on = 0 } on' "$doc")
[ -n "$section" ] || { echo "no '## Public C API' section in $doc"; exit 1; }
declared=$(sed -n 's/^MEMSTEP_API_ATTR [a-z0-9_ ]*[ *]\(memstep_[a-z0-9_]*\)(.*/\1/p' "$header" | sort -u)
[ -n "$declared" ] || { echo "no MEMSTEP_API_ATTR declarations found in $header"; exit 1; }
exported=$(nm -D --defined-only "$lib" | awk '{ print $3 }' | sed 's/@.*//' | grep '^memstep_' | sort -u)
[ -n "$exported" ] || { echo "no memstep_* exports found in $lib"; exit 1; }
for f in $declared; do
  echo "$section" | grep -q '^| `'"$f(" || { echo "$f (declared in the header) has no row in the table"; status=1; }
done
for f in $exported; do
  echo "$section" | grep -q '[` ]'"$f(" || { echo "$f (exported by the library) is not documented"; status=1; }
  echo "$declared" | grep -qx "$f" || case "$f" in
    memstep_pymem_install|memstep_pymem_state|memstep_own_threads) ;;  # Python's, not in the header (documented)
    memstep_torch_block|memstep_torch_block_sample) ;;  # the Python helper's (documented)
    *) echo "$f is exported but not declared in the header"; status=1 ;;
  esac
done
[ $status -eq 0 ] && echo "capi doc ok: $(echo "$declared" | wc -l) declared, $(echo "$exported" | wc -l) exported"
exit $status
