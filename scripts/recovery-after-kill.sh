#!/usr/bin/env bash
# Recovery time after a crash, as the engine issues ask for it: load RECORDS records with
# `tierkv bench --crash-after-load`, which SIGKILLs itself the moment the load ends (the
# store is never closed), then reopen the store with `tierkv stats` and print the recovery
# time the engine reports and the wall time of the whole reopen.
#
#   scripts/recovery-after-kill.sh ENGINE RECORDS [extra bench flags...]
#   scripts/recovery-after-kill.sh prism 1000000 --value-size 1KiB --dram 128MiB
#
# TIERKV (default target/release/tierkv) names the binary; DIR (default a new directory under
# /tmp) is the bench's data directory; PMEM (default /dev/shm/tierkv-recovery-<pid>) the
# pmem directory. Both are removed at the end unless KEEP=1.
set -euo pipefail
engine=${1:?usage: recovery-after-kill.sh ENGINE RECORDS [bench flags...]}
records=${2:?usage: recovery-after-kill.sh ENGINE RECORDS [bench flags...]}
shift 2
tierkv=${TIERKV:-target/release/tierkv}
dir=${DIR:-$(mktemp -d /tmp/tierkv-recovery.XXXXXX)}
pmem=${PMEM:-/dev/shm/tierkv-recovery-$$}
if [ "${KEEP:-0}" != 1 ]; then
  trap 'rm -rf "$dir" "$pmem"' EXIT
fi

set +e
"$tierkv" bench --engines "$engine" --workloads load --records "$records" \
  --crash-after-load --dir "$dir" --pmem-path "$pmem" "$@" >"$dir.log" 2>&1
status=$?
set -e
cat "$dir.log"
data=$(sed -n 's/^running [^ ]* in //p' "$dir.log" | head -1)
rm -f "$dir.log"
if [ "$status" -ne 137 ]; then
  echo "expected the bench to die of SIGKILL (exit status 137), got $status" >&2
  exit 1
fi
echo "== the bench died of SIGKILL; reopening $data"
start=$(date +%s%N)
"$tierkv" stats --dir "$data" | grep -E -i "recover|replay" || true
end=$(date +%s%N)
echo "reopen (open + recovery + stats + close) wall time: $(( (end - start) / 1000000 )) ms"
