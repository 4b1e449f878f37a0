"""`--junitxml DIR`: one JUnit XML file per tree, for the tools that read them, written by the grader.

Each file is the gradebook's word on one tree, not anything the tree's run wrote: a test case
per exercise (`classname` its chapter), passed when the exercise is done, a failure when it
is failed or todo, an error when the run crashed, timed out or was refused, with the
gradebook's message. Text from the tree (its name, its messages) is escaped as on a
terminal first (escaping.py): XML 1.0 cannot hold control characters.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from .escaping import for_terminal

ERRORS = ("crashed", "timeout")
NAME_CHARS = 200  # of a file name, before .xml (file systems allow 255 bytes)


def file_name(tree: str) -> str:
    """The tree's file name in DIR, one of its own whatever the other trees are called (so shards
    writing into one folder never collide): its path with each `/` made `_`, letters, digits, `.`
    and `-` kept, and every other byte (of its UTF-8) written `%XX`, a leading `.` too; a name
    longer than NAME_CHARS keeps its start and ends in `~` and a digest of the whole path."""
    encoded = "".join(_encoded(c) for c in tree)
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    if len(encoded) > NAME_CHARS:
        encoded = f"{encoded[:NAME_CHARS - 17]}~{hashlib.sha256(tree.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"
    return f"{encoded}.xml"


def _encoded(character: str) -> str:
    if character == "/":
        return "_"
    if character.isascii() and (character.isalnum() or character in ".-"):
        return character
    return "".join(f"%{byte:02X}" for byte in character.encode("utf-8", "surrogatepass"))


def file_names(names: list[str]) -> dict[str, str]:
    """Each tree's file name in DIR (file_name): no two trees share one."""
    return {name: file_name(name) for name in names}


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
