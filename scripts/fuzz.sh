#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 5: the CI smoke run; use 60+ for real runs).
#   scripts/fuzz.sh            # 5 s per target
#   scripts/fuzz.sh 600        # 10 minutes per target
#   scripts/fuzz.sh 60 manifest_decode
# Needs cargo-fuzz (installed here if missing). cargo-fuzz needs nightly features; on a stable
# toolchain RUSTC_BOOTSTRAP=1 unlocks them. Findings are kept in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
shift || true
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd fuzz && cargo fuzz list)
fi
for t in "${targets[@]}"; do
  echo "== fuzz $t for ${secs}s"
  mkdir -p "fuzz/corpus/$t"
  (cd fuzz && cargo fuzz run "$t" --sanitizer none -- -max_total_time="$secs" -rss_limit_mb=4096 2>&1 | tail -n 3)
done
echo "fuzz: ${#targets[@]} targets ran ${secs}s each without a finding"
