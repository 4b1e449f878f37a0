"""The trusted check on the shipped mutants and equivalents: which wrong kernels it catches on its
own, and that every correct variant agrees (docs/grading.md, "The trusted check").

    python bench/trusted_check_mutants.py ch11            # one chapter's mutants and equivalents
    python bench/trusted_check_mutants.py ch01 ch11 --equivalents-only
    python bench/trusted_check_mutants.py ch11 --seed 7   # another draw of the cases
    python bench/trusted_check_mutants.py ch11 --honest   # tests/honest/'s kernels instead

Each tree (solutions/ with one mutant applied, run/mutants.py) is checked as `tpucourse grade`
checks it: the cases drawn and answered here once, a worker process per tree. A mutant the trusted
check lets through may still be caught by the graded tests (structure, a corner case it does not
draw): the trusted check adds to them, it does not replace them. An equivalent it disagrees with
is a bug in a case list, and so is a kernel of tests/honest/ (a learner's correct kernel, written
from the README) that it disagrees with.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_tpucourse.classroom.tree_runner import Unisolated  # noqa: E402
from pytest_tpucourse.classroom.trusted_check import AGREES, TrustedCheck  # noqa: E402
from pytest_tpucourse.core.course import load_course  # noqa: E402
from pytest_tpucourse.run.mutants import build_tree, load_mutants  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="+")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--equivalents-only", action="store_true")
    parser.add_argument("--honest", action="store_true", help="check tests/honest/'s variant sets instead")
    args = parser.parse_args()
    course = load_course(ROOT)
    wrong_equivalents = 0
    for chapter in args.chapters:
        start = time.monotonic()
        check = TrustedCheck.prepare(course, [chapter], args.seed, jax_cache=".tpucourse/jax-cache")
        print(f"{chapter}: cases drawn and answered in {time.monotonic() - start:.1f} s (seed {args.seed})")
        if args.honest:
            wrong_equivalents += _honest(check, chapter)
            continue
        toml = ROOT / "tests" / "mutants" / f"{chapter}.toml"
        tables = ["equivalents"] + ([] if args.equivalents_only else ["mutants"])
        for table in tables:
            caught = total = 0
            for mutant in load_mutants(toml, table):
                with tempfile.TemporaryDirectory() as folder:
                    tree = build_tree(mutant, ROOT / "solutions", Path(folder) / mutant.name)
                    started = time.monotonic()
                    verdicts = check.check_tree(Unisolated(tree), timeout=900)
                key = f"{chapter}.{mutant.module}"
                verdict = verdicts.get(key)
                total += 1
                agrees = verdict is not None and verdict.verdict == AGREES
                if table == "equivalents":
                    wrong_equivalents += not agrees
                    mark = "ok" if agrees else "WRONG"
                else:
                    caught += not agrees
                    mark = "caught" if not agrees else "passed"
                print(f"{table[:-1]:10} {mark:7} {mutant.name:40} {time.monotonic() - started:5.1f} s  "
                      f"{(verdict.reason if verdict else 'no verdict')[:150]}", flush=True)
            if table == "mutants" and total:
                print(f"{chapter}: the trusted check alone catches {caught} of {total} mutants")
    print(f"{'honest kernels' if args.honest else 'equivalents'} the trusted check disagrees with: {wrong_equivalents}")
    return 1 if wrong_equivalents else 0


def _honest(check, chapter: str) -> int:
    """tests/honest/chNN/<variant>/ over solutions/chNN: every exercise it writes must agree."""
    wrong = 0
    for variant in sorted(p for p in (ROOT / "tests" / "honest" / chapter).glob("*") if p.is_dir()):
        with tempfile.TemporaryDirectory() as folder:
            tree = Path(folder) / variant.name
            shutil.copytree(ROOT / "solutions" / chapter, tree / chapter)
            for path in variant.iterdir():
                shutil.copy(path, tree / chapter / path.name)
            started = time.monotonic()
            verdicts = check.check_tree(Unisolated(tree), timeout=900)
        written = {f"{chapter}.{p.stem}" for p in variant.glob("*.py")}
        for key, verdict in sorted(verdicts.items()):
            if key in written:
                wrong += verdict.verdict != AGREES
                mark = "ok" if verdict.verdict == AGREES else "WRONG"
                print(f"honest     {mark:7} {variant.name + ' ' + key:40} {time.monotonic() - started:5.1f} s  "
                      f"{verdict.reason[:150]}", flush=True)
    return wrong


if __name__ == "__main__":
    sys.exit(main())
