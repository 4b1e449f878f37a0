#!/usr/bin/env bash
# Gate 00 measured on a machine with a GPU: XLA's matmul, skinny matmul and add against their
# roofline floors on that GPU (the one gate a GPU measures honestly: no Pallas TPU kernel in it).
#
# For a machine that has Python, JAX (with its GPU plugin), pytest, pytest-benchmark, hypothesis
# and pluggy, and no package index: the course is installed without resolving anything
# (pip install --no-deps --no-build-isolation -e .) or, where pip cannot, run from PYTHONPATH
# with the plugin named on the command line. Nothing here needs watchfiles or libtpu.
#
#   OUT=/some/folder bench/device_gate00.sh            measure; rows, log and check land in $OUT
#   REHEARSE=1 CHIP=h200 bench/device_gate00.sh       the same path on a CPU, on a stand-in clock
#                                                      (pytest --rehearse): no number about any chip
#   DRY_RUN=1 bench/device_gate00.sh                   print the commands, run nothing
#
# What comes back in $OUT: gate00.records.jsonl (the rows: chip, device kind, JAX version, date,
# samples; tree "solutions", so they may join bench/records.jsonl), gate00.log (pytest's output)
# and gate00.check.txt (`tpucourse records check` of the rows: every row re-judged).
#
# No GPU was available to this project when this script was written: it has been rehearsed on a
# CPU (REHEARSE=1) and dry-run by tests/test_device_script.py, never run on a GPU, so no row of
# bench/records.jsonl comes from it.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$REPO/.tpucourse/device-gate00}"
PYTHON="${PYTHON:-python3}"
CHIP_ARGS=()
if [[ -n "${CHIP:-}" ]]; then CHIP_ARGS=(--chip "$CHIP"); fi

run() {  # print a command; run it unless DRY_RUN is set
  printf '+ %s\n' "$*"
  if [[ -z "${DRY_RUN:-}" ]]; then "$@"; fi
}

cd "$REPO"
run mkdir -p "$OUT"

# Install without an index; fall back to the source tree on PYTHONPATH.
PLUGIN_ARGS=()
if [[ -n "${DRY_RUN:-}" ]] || ! "$PYTHON" -c "import pytest_tpucourse" 2>/dev/null; then
  if ! run "$PYTHON" -m pip install --no-deps --no-build-isolation --no-index --ignore-requires-python -q -e .; then
    echo "pip could not install the course here: running it from $REPO on PYTHONPATH"
    export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
    PLUGIN_ARGS=(-p pytest_tpucourse.plugin)
  fi
fi
run "$PYTHON" -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"

PYTEST=("$PYTHON" -m pytest "${PLUGIN_ARGS[@]}" exercises/ch10/test_gate00.py --gates --solutions
        "${CHIP_ARGS[@]}" -p no:cacheprovider -rs)
if [[ -n "${REHEARSE:-}" ]]; then
  # A rehearsal writes its rows to a throwaway file of its own (its path is in the log).
  run "${PYTEST[@]}" --rehearse 2>&1 | tee "$OUT/gate00.log"
  exit "${PIPESTATUS[0]}"
fi
RECORDS="$OUT/gate00.records.jsonl"
status=0
if [[ -n "${DRY_RUN:-}" ]]; then
  run "${PYTEST[@]}" --records "$RECORDS"
else
  run "${PYTEST[@]}" --records "$RECORDS" 2>&1 | tee "$OUT/gate00.log" || status=$?
  "$PYTHON" -c "import sys; from pytest_tpucourse.commands import main; sys.exit(main.main(['records', 'check', sys.argv[1]]))" \
    "$RECORDS" | tee "$OUT/gate00.check.txt" || status=$?
fi
exit "$status"
