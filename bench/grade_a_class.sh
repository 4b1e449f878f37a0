#!/usr/bin/env bash
# A class of N trees (copies of solutions/CHAPTER) graded two ways, for docs/speed.md:
# `tpucourse grade --jobs JOBS` and N separate `pytest exercises/CHAPTER --impl-root TREE` runs,
# one after the other. Both start from a compile cache already holding the chapter's programs
# (one run of its solutions first), as a teacher's second class would.
#
#   bash bench/grade_a_class.sh [N=30] [CHAPTER=ch11] [JOBS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-30}; chapter=${2:-ch11}; jobs=${3:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq -w 1 "$n"); do
  mkdir -p "$work/class/t$i" && cp -r "solutions/$chapter" "$work/class/t$i/"
done
pytest "exercises/$chapter" --solutions -q -p no:cacheprovider >/dev/null || true  # the cache, warm
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s.%N)
tpucourse grade "$work"/class/t* --chapters "$chapter" --jobs "$jobs" -q --out "$work/book.json"
echo "tpucourse grade, $n trees, --jobs $jobs: $(echo "$(date +%s.%N) - $start" | bc) s"
start=$(date +%s.%N)
for tree in "$work"/class/t*; do
  pytest "exercises/$chapter" --impl-root "$tree" -q -p no:cacheprovider >/dev/null || true
done
echo "$n separate pytest --impl-root runs: $(echo "$(date +%s.%N) - $start" | bc) s"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
