#!/usr/bin/env bash
# tests/busy.sh [PYTEST ARGS...]: run pytest (the whole suite, or the tests given) with a
# CPU hog on every usable core, as a loaded laptop or a shared CI runner would be
# (the tests must not depend on an idle host). `make test-busy` runs it.
#
#   tests/busy.sh -q tests/benchmaker/test_golden.py    # one file under load
#   BUSY_HOGS=4 tests/busy.sh -q -m 'not prefect'       # 4 hogs instead of one per core
#
# The hogs (`while True: pass` in the venv's Python) are killed when pytest ends, on
# Ctrl-C and on SIGTERM. Prints the load average before and after; exits with pytest's code.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
HOGS=${BUSY_HOGS:-$(nproc)}
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    wait "${pids[@]}" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for _ in $(seq "$HOGS"); do
    "$PY" -c 'while True: pass' &
    pids+=($!)
done
echo "busy.sh: $HOGS CPU hogs (pids ${pids[*]}); load average $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s)
"$PY" -m pytest "$@"
status=$?
echo "busy.sh: pytest exit $status after $(( $(date +%s) - t0 )) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
