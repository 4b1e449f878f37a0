"""The READMEs' sample outputs of a run on untouched stubs, held to a real one.

A sample is a fenced block a README shows a run printing: a chapter README's ```text block of its
stubs' summary, or README.md's first-exercise session (a ```console block of commands, `$ ` each).
tests/test_grading_chapters.py runs every chapter's stubs; for each sample of that chapter it asks
`unprinted(...)` which lines the run did not print, so a count or a message a README quotes cannot
go stale. `...` and `[...]` mark lines a sample leaves out; a line ending in ` ...` is cut short.
"""

from __future__ import annotations

import re

from .support import REPO

ELIDED = {"...", "[...]"}
PROGRESS = re.compile(r"^(exercises/\S+\.py) ([T.]+)\s+\[100%\]$")  # a file's progress line, one mark per test
TALLY = re.compile(r"^=+ (\d+) (todo|passed) in [\d.]+s(?: \([\d:]+\))? =+$")


def _blocks(text: str, fence: str) -> list[list[str]]:
    return [block.splitlines() for block in re.findall(rf"^```{fence}\n(.*?)^```", text, re.S | re.M)]


def stub_samples(chapter: str) -> list[tuple[str, list[str]]]:
    """(where, lines) of each sample of a run of `chapter`'s stubs the READMEs show."""
    found = []
    readme = REPO / "exercises" / chapter / "README.md"
    for lines in _blocks(readme.read_text(encoding="utf-8"), "text"):
        if "graded: exercises/ (your work)" in lines and "0/" in "\n".join(lines):
            found.append((f"exercises/{chapter}/README.md", lines))
    for lines in _blocks((REPO / "README.md").read_text(encoding="utf-8"), "console"):
        commands = [i for i, line in enumerate(lines) if line.startswith("$ ")]
        for start, end in zip(commands, commands[1:] + [len(lines)]):
            if lines[start].startswith(f"$ pytest exercises/{chapter}/") and "TODO" in "\n".join(lines[start:end]):
                found.append(("README.md", lines[start + 1:end]))
    return found


def tests_per_file(output: str) -> dict[str, int]:
    """How many tests of each graded file a verbose (-v) run reported (its paths relative to wherever it
    ran: exercises/chNN/test_x.py, or ../../course/exercises/chNN/test_x.py)."""
    counts: dict[str, int] = {}
    for line in output.splitlines():
        match = re.match(r"^(?:\S*/)?(exercises/ch\d\d/test_\w+\.py)::\S+ ", line)
        if match:
            counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    return counts


def unprinted(sample: list[str], output: str) -> list[str]:
    """The sample's lines a verbose run of the chapter's stubs did not print (its counts included)."""
    printed = [line.strip() for line in output.splitlines()]
    counts = tests_per_file(output)
    missing, file = [], None
    for line in sample:
        text = line.strip()
        if not text or text in ELIDED or text.startswith("=====") and "tpucourse" in text or "test session starts" in text:
            continue
        progress, tally = PROGRESS.match(text), TALLY.match(text)
        if progress:
            file = progress.group(1)
            if len(progress.group(2)) != counts.get(file):
                missing.append(f"{line} ({counts.get(file)} tests in {file})")
        elif tally:
            if file is not None and int(tally.group(1)) != counts.get(file):
                missing.append(f"{line} ({counts.get(file)} tests in {file})")
        elif text.endswith(" ..."):
            if not any(p.startswith(text[:-4]) for p in printed):
                missing.append(line)
        elif text not in printed:
            missing.append(line)
    return missing
