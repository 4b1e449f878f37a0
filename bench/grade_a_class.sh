#!/usr/bin/env bash
# A class of N trees (copies of solutions/CHAPTER) graded by `tpucourse grade --jobs JOBS`, for
# docs/speed.md: by each tree's pytest run alone (--no-trusted-check) and with the trusted check
# (the default: each tree's values judged again in a worker process of its own), one after the
# other, the load average printed around each. Both start from a compile cache already holding the
# chapter's programs (one run of its solutions first), as a teacher's second class would.
# SEPARATE=1 also times N separate `pytest exercises/CHAPTER --impl-root TREE` runs.
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
echo "the instructor's key" > "$work/key"
pytest "exercises/$chapter" --solutions -q -p no:cacheprovider >/dev/null || true  # the cache, warm
load() { cut -d' ' -f1-3 /proc/loadavg; }
for how in --no-trusted-check ""; do
  echo "load average before: $(load)"
  start=$(date +%s.%N)
  tpucourse grade "$work"/class/t* --chapters "$chapter" --jobs "$jobs" -q --key "$work/key" $how \
    --out "$work/book$how.json"
  echo "tpucourse grade, $n trees, --jobs $jobs ${how:-(with the trusted check)}: $(echo "$(date +%s.%N) - $start" | bc) s"
  echo "load average after: $(load)"
done
python - "$work/book.json" <<'PY'
import json, sys
book = json.load(open(sys.argv[1]))
entries = [e for tree in book["trees"].values() for e in tree.values()]
print(f"{sum(e['status'] == 'done' for e in entries)} of {len(entries)} exercises done; trusted verdicts:",
      sorted({e.get('trusted', {}).get('verdict') for e in entries}))
PY
if [ "${SEPARATE:-0}" = 1 ]; then
  start=$(date +%s.%N)
  for tree in "$work"/class/t*; do
    pytest "exercises/$chapter" --impl-root "$tree" -q -p no:cacheprovider >/dev/null || true
  done
  echo "$n separate pytest --impl-root runs: $(echo "$(date +%s.%N) - $start" | bc) s"
fi
