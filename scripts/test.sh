#!/usr/bin/env bash
# The whole test suite, as CI runs it. Installs what a fresh Debian machine with only the base
# Rust toolchain lacks, then runs: every crate's unit, model-based, crash and fault tests and
# doctests; the Python bindings' pytest suite; the fuzz targets for a few seconds each.
#   bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
# tierkv-server's differential test runs a real redis-server (skipped loudly without it).
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
# Its twemproxy test runs Debian's nutcracker in front of three shards (skipped loudly without it).
command -v nutcracker >/dev/null 2>&1 || [ -x /usr/sbin/nutcracker ] || need_apt+=(nutcracker)
# A SIGKILL test whose child or own recovery hangs prints the threads' stacks by gdb
# (tierkv-testkit `rig::thread_stacks`) before it fails.
command -v gdb >/dev/null 2>&1 || need_apt+=(gdb)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing ${need_apt[*]}"
  apt-get update -qq && apt-get install -y -qq "${need_apt[@]}"
fi

# tierkv-server's redis-py tests use this venv (skipped loudly without it).
venv=target/redis-py-venv
if ! "$venv/bin/python" -c 'import redis' >/dev/null 2>&1; then
  echo "== creating $venv with redis-py"
  { python3 -m venv "$venv" && "$venv/bin/pip" install -q redis; } ||
    echo "== redis-py venv not created: the redis-py tests will be skipped"
fi

echo "== cargo test (workspace)"
cargo test --workspace --locked

bash scripts/test-python.sh

echo "== fuzz smoke run"
bash scripts/fuzz.sh "${FUZZ_SECONDS:-5}"
