"""What every pytest process of the course pays to import its heavy dependencies, before any test.

    python bench/import_costs.py                          # this Python, median of 7 interpreters
    python bench/import_costs.py --python .venv-newest/bin/python --runs 11

Each run is a fresh interpreter importing, in this order, what a course run imports at its start
(pytest, numpy, ml_dtypes, jax, hypothesis, the plugin) under `python -X importtime`; the figure
for each is the cumulative import time Python reports for that module (what importing it added,
the modules imported before it excluded), in wall milliseconds. Prints a Markdown table with the
installed versions. Every pytest run of the course, every chapter run of the project's tests and
the TPU compiler's child process pays these once.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time

MODULES = ("pytest", "numpy", "ml_dtypes", "jax", "hypothesis", "pytest_tpucourse.plugin")
_LINE = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)$")


def one_run(python: str) -> dict[str, float]:
    """{module: cumulative ms} of one interpreter importing MODULES in order."""
    code = "; ".join(f"import {name}" for name in MODULES)
    done = subprocess.run([python, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
    found = {}
    for line in done.stderr.splitlines():
        match = _LINE.match(line)
        if match and not match.group(2).strip(" ") and match.group(3) in MODULES:
            found[match.group(3)] = int(match.group(1)) / 1000  # top level: no indent after the bar
    return found


def versions(python: str) -> str:
    code = ("import importlib.metadata as m, sys; print(sys.version.split()[0], "
            "*(f'{n} {m.version(n)}' for n in ('numpy', 'ml_dtypes', 'jax')), sep=', ')")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    runs = [one_run(args.python) for _ in range(args.runs)]
    print(f"`python bench/import_costs.py --python {args.python} --runs {args.runs}`: Python {versions(args.python)}, "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}; median (range) of {args.runs} interpreters, wall ms")
    print()
    print("| module | import, ms |")
    print("|---|---|")
    for name in MODULES:
        values = [run[name] for run in runs if name in run]
        if values:
            print(f"| {name} | {statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f}) |")


if __name__ == "__main__":
    main()
