#!/usr/bin/env bash
# A class of N trees (copies of solutions/CHAPTER) graded two ways, for docs/speed.md:
# `tpucourse grade --jobs JOBS` (each tree in its sandbox: its pytest run, then the trusted
# check's worker) and N separate `pytest exercises/CHAPTER --impl-root TREE` runs, one after the
# other. Both start from a compile cache already holding the chapter's programs (one run of its
# solutions first), as a teacher's second class would.
#
#   bash bench/grade_a_class.sh [N=30] [CHAPTER=ch11] [JOBS=2]
#
# BEFORE=DIR: also grade the same class with the course checkout at DIR (an earlier commit, e.g.
# `git archive COMMIT | tar -x -C DIR`, run with this environment's Python and DIR first on
# PYTHONPATH), the two gradings taking turns ROUNDS times (default 2; FIRST=after starts with
# this checkout's), so that both see the same load on a shared machine. Each grading prints its
# wall time and the CPU time (user + system) of it and every process it waited for.
# AFTER_ARGS: more options for this checkout's grading (AFTER_ARGS=--no-trusted-check: by each
# tree's pytest run alone). SEPARATE=0: leave out the separate pytest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-30}; chapter=${2:-ch11}; jobs=${3:-2}
rounds=${ROUNDS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq -w 1 "$n"); do
  mkdir -p "$work/class/t$i" && cp -r "solutions/$chapter" "$work/class/t$i/"
done
head -c 32 /dev/urandom > "$work/key"  # the instructor's key: this checkout's grading signs and draws with it
load() { cut -d' ' -f1-3 /proc/loadavg; }
grade() {  # grade COURSE_DIR LABEL [PYTHONPATH] [OPTION...]: the class graded in the checkout at COURSE_DIR
  local took TIMEFORMAT='%R %U %S' dir=$1 label=$2 path=${3:-${PYTHONPATH:-}}
  shift 3 || shift $#
  took=$( { time (cd "$dir" && PYTHONPATH="$path" tpucourse grade "$work"/class/t* \
     --chapters "$chapter" --jobs "$jobs" -q --out "$work/book-$label.json" "$@" >/dev/null 2>&1); } 2>&1 )
  read -r wall user system <<<"$took"
  echo "$label: tpucourse grade, $n trees, --jobs $jobs $*: $wall s wall, $(echo "$user + $system" | bc) s CPU" \
       "(load average $(load))"
}
after() {  # this checkout's grading, with the key
  # shellcheck disable=SC2086
  grade "$PWD" "$1" "${PYTHONPATH:-}" --key "$work/key" ${AFTER_ARGS:-}
  python - "$work/book-$1.json" <<'PY'
import json, sys
book = json.load(open(sys.argv[1]))
entries = [e for tree in book["trees"].values() for e in tree.values()]
print(f"  {sum(e['status'] == 'done' for e in entries)} of {len(entries)} exercises done; trusted verdicts:",
      sorted({e.get('trusted', {}).get('verdict', '-') for e in entries}))
PY
}
pytest "exercises/$chapter" --solutions -q -p no:cacheprovider >/dev/null || true  # the cache, warm
if [ -n "${BEFORE:-}" ]; then
  (cd "$BEFORE" && PYTHONPATH="$BEFORE" pytest "exercises/$chapter" --solutions -q -p no:cacheprovider >/dev/null) || true
fi
echo "load average at the start: $(load)"
for round in $(seq 1 "$rounds"); do
  if [ -z "${BEFORE:-}" ]; then after "after"; break; fi
  if [ "${FIRST:-before}" = after ]; then
    after "after-$round"; grade "$BEFORE" "before-$round" "$BEFORE"
  else
    grade "$BEFORE" "before-$round" "$BEFORE"; after "after-$round"
  fi
done
if [ "${SEPARATE:-1}" != 0 ]; then
  start=$(date +%s.%N)
  for tree in "$work"/class/t*; do
    pytest "exercises/$chapter" --impl-root "$tree" -q -p no:cacheprovider >/dev/null || true
  done
  echo "$n separate pytest --impl-root runs: $(echo "$(date +%s.%N) - $start" | bc) s"
fi
echo "load average at the end: $(load)"
