#!/usr/bin/env bash
# Build the store's C parts and run the store's unit tests on the oldest and the newest
# CPython that requires-python (>=3.11) allows, each with the C parts and without them
# (MIQM_NATIVE_LOG=0). A version this machine does not have is skipped with a message.
#
#   tests/multipython.sh [python ...]   default: 3.11 and 3.13 from pyenv or PATH
#
# Each interpreter gets a fresh venv and a copy of the source tree under one temp dir
# (removed at the end), so builds for other versions never land in the checkout.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# A subset of the store's unit tests, to stay quick. With the C parts: the buffer and
# force queue against their Python twins, the log and gathering (these run over both
# either way), restart C vs Python, the store's rules. Without: the store's rules and the
# fake-log store tests, which take whatever the switch says. (The full unit suite runs
# both ways on the CI's own interpreter: make test.)
TESTS_C=(tests/unit/test_logbuffer.py tests/unit/test_forcequeue.py tests/unit/test_log.py
         tests/unit/test_gather.py tests/unit/test_restart_native.py
         tests/unit/test_store_units.py)
TESTS_PY=(tests/unit/test_store_units.py tests/unit/test_store_fakelog.py
          tests/unit/test_layering.py)

find_python() {  # a minor version (3.11) -> an interpreter path, or nothing
    local v=$1 p
    for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python"$v"; do
        [ -x "$p" ] && { echo "$p"; return; }
    done
    command -v "python$v" || true
}

if [ $# -gt 0 ]; then
    pythons=("$@")
else
    # The oldest and the newest; the one CI's own python3 is runs the whole suite both ways
    # in `make test` already, so it is not built a second time here.
    own="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
    pythons=()
    for v in 3.11 3.13; do [ "$v" = "$own" ] && echo "multipython: CPython $v is CI's own interpreter (make test runs it both ways)" || pythons+=("$v"); done
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/miqm-multipython.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ran=0
for v in "${pythons[@]}"; do
    py="$(find_python "$v")"
    if [ -z "$py" ]; then
        echo "multipython: SKIP CPython $v: not installed here (pyenv install $v to test it)"
        continue
    fi
    echo "multipython: CPython $v ($py)"
    src="$work/src-$v"
    mkdir -p "$src"
    (cd "$root" && git ls-files -z --cached --others --exclude-standard |
         xargs -0 tar -cf - 2>/dev/null) | tar -xf - -C "$src"
    "$py" -m venv "$work/venv-$v"
    vpy="$work/venv-$v/bin/python"
    (cd "$src" && "$vpy" -m pip install -q -e . pytest pytest-timeout >"$work/pip-$v.log" 2>&1) || {
        cat "$work/pip-$v.log" >&2; echo "multipython: install failed on CPython $v" >&2; exit 1; }
    (cd "$src" && "$vpy" -c 'import miqm.store._logbuffer, miqm.store._forcequeue') || {
        echo "multipython: the C parts did not build on CPython $v" >&2; exit 1; }
    echo "multipython: CPython $v, with the C parts"
    (cd "$src" && MIQM_NATIVE_LOG=1 "$vpy" -m pytest -q -p no:cacheprovider "${TESTS_C[@]}")
    echo "multipython: CPython $v, without them (MIQM_NATIVE_LOG=0)"
    (cd "$src" && MIQM_NATIVE_LOG=0 "$vpy" -m pytest -q -p no:cacheprovider "${TESTS_PY[@]}")
    ran=$((ran + 1))
done
[ "$ran" -gt 0 ] || echo "multipython: SKIP: none of ${pythons[*]:-} is installed"
