"""A class's trees graded `jobs` at a time, each tree in its sandbox, whose files live in a private
folder of one work folder that is removed after; Ctrl-C stops every running tree's sandbox
(runner.py, sandbox.py). A tree's trusted check, where the grading has one, follows its pytest
run in the same job and the same sandbox (runner.grade_tree)."""

from __future__ import annotations

import shutil
import tempfile
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from .progress_line import ProgressLine
from .runner import GradingRun, TreeRun, grade_tree, unforeseen


def grade_trees(grading: GradingRun, names: list[str], *, jobs: int, progress: ProgressLine) -> dict[str, TreeRun]:
    """Every tree's run, `jobs` at a time, each in a private folder of one work folder removed after."""
    work = Path(tempfile.mkdtemp(prefix="tpucourse-grade-"))
    stop = threading.Event()

    def one(index: int, name: str) -> TreeRun:
        progress.started(name)
        try:
            run = grade_tree(grading, name, Path(name), work / f"tree-{index:04d}", stop)
        except Exception as error:  # anything a tree sends or holds ends as its own row, never the class's
            run = unforeseen(name, error)
        progress.finished(name, run.outcome)
        return run

    runs: dict[str, TreeRun] = {}
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            pending = {pool.submit(one, index, name): name for index, name in enumerate(names)}
            try:
                while pending:
                    finished, _ = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                    for future in finished:
                        runs[pending.pop(future)] = future.result()
                    progress.refresh()
            except BaseException:
                stop.set()  # Ctrl-C: every running tree's process group is killed
                for future in pending:
                    future.cancel()
                raise
        return {name: runs[name] for name in names}
    finally:
        progress.close()
        shutil.rmtree(work, ignore_errors=True)
