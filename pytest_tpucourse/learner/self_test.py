"""A chapter's self-test ("Can you ..."), as the learner ticks it (`tpucourse tick`, the site's tick boxes).

No test can tell whether a learner can defend a schedule decision or point to the
review comments that changed a kernel; the course asks, and the learner answers. A
tick is therefore self-reported, stored in the state file next to what pytest runs
observed but never mixed with it: it completes no exercise and passes no gate, and
`tpucourse progress` labels it as the learner's word.
"""

from __future__ import annotations

from ..core.course import Course
from . import state
from .requests import RequestError, read_state


def ticked(data: dict, chapter_id: str) -> set[int]:
    """The 1-based item numbers the learner ticked for a chapter."""
    return {int(n) for n in data.get("ticks", {}).get(chapter_id, [])}


def summary(chapter, data: dict) -> str:
    """The progress line: k/n ticked, labelled self-reported."""
    done = ticked(data, chapter.id) & set(range(1, len(chapter.can_you) + 1))
    return (f"can you: {len(done)}/{len(chapter.can_you)} ticked (self-reported, "
            f"tpucourse tick {chapter.id})")


def tick(course: Course, chapter_id: str, item: int | None = None, *, undo: bool = False) -> list[str]:
    """Tick (or with undo, untick) item `item` of a chapter's self-test, none when `item` is None;
    then the chapter's items with the learner's ticks, as lines. RequestError names what is wrong."""
    chapter = course.chapter(chapter_id)
    if chapter is None:
        raise RequestError(f"no chapter {chapter_id!r}: chapters are "
                           f"{course.chapters[0].id}-{course.chapters[-1].id}")
    if not chapter.can_you:
        raise RequestError(f"{chapter.label} has no self-test items")
    if item is not None:
        if not 1 <= item <= len(chapter.can_you):
            raise RequestError(f"{chapter.id} has items 1-{len(chapter.can_you)}, not {item}")

        def change(data):
            items = ticked(data, chapter.id)
            (items.discard if undo else items.add)(item)
            data["ticks"][chapter.id] = sorted(items)

        state.update(course.root, change)
    data = read_state(course)
    lines = [f"{chapter.label}, can you ... (your word: ticks are self-reported, never checked)"]
    for number, text in enumerate(chapter.can_you, 1):
        mark = "x" if number in ticked(data, chapter.id) else " "
        lines.append(f"  [{mark}] {number}. {text}")
    lines.append(summary(chapter, data))
    return lines
