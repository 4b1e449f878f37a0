"""`--junitxml DIR`: one JUnit XML file per tree, for the tools that read them, written by the grader.

Each file is the gradebook's word on one tree, not anything the tree's run wrote: a test case
per exercise (`classname` its chapter), passed when the exercise is done, a failure when it
is failed or todo, an error when the run crashed, timed out or was refused, with the
gradebook's message. Text from the tree (its name, its messages) is escaped as on a
terminal first (escaping.py): XML 1.0 cannot hold control characters.
"""

from __future__ import annotations

import re
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from .escaping import for_terminal

ERRORS = ("crashed", "timeout")


def file_names(names: list[str]) -> dict[str, str]:
    """Each tree's file name in DIR: its path, each run of characters outside [A-Za-z0-9._-] made one `_`."""
    files = {name: re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") + ".xml" for name in names}
    clash = sorted(n for n in names if list(files.values()).count(files[n]) > 1)
    if clash:
        raise ValueError(f"--junitxml: these trees would share a file name: {', '.join(map(for_terminal, clash))}")
    return files


def text(tree: str, entries: dict[str, dict], run: dict) -> str:
    """The JUnit XML of one tree: entries are its gradebook exercises, run its gradebook run."""
    failures = sum(1 for e in entries.values() if e["status"] not in ("done", *ERRORS))
    errors = sum(1 for e in entries.values() if e["status"] in ERRORS)
    seconds = run.get("seconds", 0.0)
    name = quoteattr(for_terminal(tree))
    cases = []
    for key, entry in entries.items():
        chapter = key.split(".", 1)[0]
        case = f'<testcase classname={quoteattr(chapter)} name={quoteattr(key)} time="{entry["seconds"]}"'
        status, message = entry["status"], for_terminal(entry["message"])
        if status == "done":
            cases.append(case + "/>")
            continue
        tag = "error" if status in ERRORS else "failure"
        details = "\n".join(for_terminal(line) for line in run.get("log", [])) if status in ERRORS else ""
        cases.append(f"{case}><{tag} type={quoteattr(status)} message={quoteattr(f'{status}: {message}')}>"
                     f"{escape(details)}</{tag}></testcase>")
    return ('<?xml version="1.0" encoding="utf-8"?>\n'
            f'<testsuites><testsuite name={name} tests="{len(entries)}" failures="{failures}" '
            f'errors="{errors}" skipped="0" time="{seconds}">' + "".join(cases) + "</testsuite></testsuites>\n")


def write_all(book: dict, folder: Path) -> None:
    """A file per tree of the gradebook in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    names = file_names(list(book["trees"]))
    for tree, entries in book["trees"].items():
        (folder / names[tree]).write_text(text(tree, entries, book["runs"][tree]), encoding="utf-8")
