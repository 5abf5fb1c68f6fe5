#!/usr/bin/env bash
# The Python bindings' tests (crates/tierkv-python): builds the extension module into a
# virtualenv with maturin (debug build, sharing target/ with cargo) and runs pytest on it.
# Installs what a fresh machine lacks: the venv gets maturin and pytest from PyPI; where
# that fails, the module is built by cargo and copied into the package directory, and the
# machine's own pytest runs it.
#   bash scripts/test-python.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

crate=crates/tierkv-python
venv=target/py-venv
if ! "$venv/bin/python" -c 'import maturin, pytest' >/dev/null 2>&1 ||
   ! [ -x "$venv/bin/maturin" ]; then
  echo "== creating $venv with maturin and pytest"
  { python3 -m venv "$venv" && "$venv/bin/pip" install -q maturin pytest; } ||
    echo "== maturin not installed: building the module with cargo instead"
fi

start=$(date +%s)
if [ -x "$venv/bin/maturin" ]; then
  echo "== maturin develop ($crate)"
  (. "$venv/bin/activate" && maturin develop --locked -q -m "$crate/Cargo.toml")
  python="$venv/bin/python"
else
  echo "== cargo build -p tierkv-python (copied as $crate/python/tierkv/_tierkv.abi3.so)"
  PYO3_BUILD_EXTENSION_MODULE=1 cargo build --locked -p tierkv-python
  cp target/debug/lib_tierkv.so "$crate/python/tierkv/_tierkv.abi3.so"
  export PYTHONPATH="$PWD/$crate/python${PYTHONPATH:+:$PYTHONPATH}"
  python=python3
fi
echo "== pytest ($crate/tests)"
"$python" -m pytest -q -p no:cacheprovider "$crate/tests" "$@"
echo "== python bindings built and tested in $(( $(date +%s) - start )) s"
