"""Chapter 11's chip-wrong matmuls graded here: what this machine says of each, beside the others.

    python bench/chip_verdicts.py                     # every row, natively where a TPU is
    python bench/chip_verdicts.py --rehearse          # also `pytest --gates --rehearse` per tree
    python bench/chip_verdicts.py --only matmul_precision_default

Each row is a shipped mutant or equivalent of tests/mutants/ch11.toml (the one-line changes of a
correct `matmul` a learner makes: explicit DEFAULT precision, HIGHEST on every dot, HIGH, no
`vmem_limit_bytes` at the 1024 default blocks, HIGHEST on f32 dots only), written as a tree
(run/mutants.py) and graded by `pytest exercises/ch11/test_matmul.py --impl-root TREE` in a
process of its own (TPUCOURSE_WARM=0: every compile waited for). Prints, per row, the machine's
verdict (passed/failed counts and the first failure's first line), and writes them as JSON lines
to --out. Run it on a TPU and on a CPU: the course's claim is that both say the same of each row.
A verdict here is a grading verdict, not a measurement of any kernel's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROWS = ("matmul_precision_default", "matmul_precision_highest_on_every_dot", "matmul_precision_high",
        "matmul_vmem_limit_dropped", "matmul_reduction_axis_parallel", "matmul_accumulator_not_initialised",
        "matmul_bf16_accumulator", "matmul_highest_on_f32_dots")


def trees(names, root: Path) -> dict[str, Path]:
    sys.path.insert(0, str(REPO))
    from pytest_tpucourse.run.mutants import build_tree, load_mutants

    path = REPO / "tests" / "mutants" / "ch11.toml"
    found = {m.name: m for table in ("mutants", "equivalents") for m in load_mutants(path, table)}
    return {name: build_tree(found[name], REPO / "solutions", root / name) for name in names}


def grade(tree: Path, test_file: str, *extra: str) -> dict:
    env = {**os.environ, "TPUCOURSE_WARM": "0"}
    done = subprocess.run([sys.executable, "-m", "pytest", test_file, "--impl-root", str(tree),
                           "-p", "no:randomly", "-q", *extra], cwd=REPO, env=env, capture_output=True, text=True)
    out = done.stdout + done.stderr
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|todo)", out.splitlines()[-1] if out else "")}
    first = re.search(r"^_{3,} (\S+) _{3,}\n(.*)$", out, re.M)
    return {"exit": done.returncode, **counts, "first": f"{first.group(1)}: {first.group(2)[:240]}" if first else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(ROWS))
    parser.add_argument("--rehearse", action="store_true", help="also pytest --gates --rehearse on each tree")
    parser.add_argument("--out", default=str(REPO / ".tpucourse" / "chip-verdicts.jsonl"))
    args = parser.parse_args()
    import jax

    where = f"{jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}, {platform.node()}"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chip-verdicts-") as folder, out.open("a") as lines:
        for name, tree in trees(args.only, Path(folder)).items():
            row = {"row": name, "where": where, "test_matmul": grade(tree, "exercises/ch11/test_matmul.py")}
            if args.rehearse:
                row["rehearsal"] = grade(tree, "exercises/ch11/test_gate01.py", "--gates", "--rehearse", "--chip=v5e")
            print(json.dumps(row))
            lines.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
