"""`--junitxml DIR`: one JUnit XML file per tree, for the tools that read them.

A tree whose run finished gets its own pytest's file (pytest's --junitxml in the child,
read back by the parent); one that crashed or timed out (a thread left running included,
as in the gradebook) gets a file with one error saying so. The gradebook, not these
files, is the verdict: a skipped test is a skip here, and not passed there.
"""

from __future__ import annotations

import re
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from .runner import TreeRun


def file_names(names: list[str]) -> dict[str, str]:
    """Each tree's file name in DIR: its path, each run of characters outside [A-Za-z0-9._-] made one `_`."""
    files = {name: re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") + ".xml" for name in names}
    clash = sorted(n for n in names if list(files.values()).count(files[n]) > 1)
    if clash:
        raise ValueError(f"--junitxml: these trees would share a file name: {', '.join(clash)}")
    return files


def write(run: TreeRun, path: Path) -> None:
    """The tree's JUnit file at `path`."""
    threads = (run.record or {}).get("threads_left") if run.finished else None
    if run.finished and run.junit_text and not threads:
        path.write_text(run.junit_text, encoding="utf-8")
        return
    outcome, message = (("timeout", f"a thread never ends: {'; '.join(threads)}") if threads
                        else (run.outcome, run.message))
    details = escape("\n".join(run.last_lines))
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuites><testsuite name={quoteattr(run.tree)} errors="1" failures="0" skipped="0" tests="1" '
        f'time="{run.seconds}"><testcase classname="tpucourse.grade" name={quoteattr(run.tree)} '
        f'time="{run.seconds}"><error message={quoteattr(f"{outcome}: {message}")}>{details}'
        '</error></testcase></testsuite></testsuites>\n', encoding="utf-8")
