"""`tpucourse tick`: a chapter's self-test ("Can you ..."), ticked by the learner.

No test can tell whether a learner can defend a schedule decision or point to the
review comments that changed a kernel; the course asks, and the learner answers. A
tick is therefore self-reported, stored in the state file next to what pytest runs
observed but never mixed with it: it completes no exercise and passes no gate, and
`tpucourse progress` labels it as the learner's word.
"""

from __future__ import annotations

from . import state


def ticked(data: dict, chapter_id: str) -> set[int]:
    """The 1-based item numbers the learner ticked for a chapter."""
    return {int(n) for n in data.get("ticks", {}).get(chapter_id, [])}


def summary(chapter, data: dict) -> str:
    """The progress line: k/n ticked, labelled self-reported."""
    done = ticked(data, chapter.id) & set(range(1, len(chapter.can_you) + 1))
    return (f"can you: {len(done)}/{len(chapter.can_you)} ticked (self-reported, "
            f"tpucourse tick {chapter.id})")


def tick(args) -> int:
    from .commands import CommandError, _read_state, course_here  # commands shows summary()

    course = course_here()
    chapter = course.chapter(args.chapter)
    if chapter is None:
        raise CommandError(f"no chapter {args.chapter!r}: chapters are "
                           f"{course.chapters[0].id}-{course.chapters[-1].id}")
    if not chapter.can_you:
        raise CommandError(f"{chapter.label} has no self-test items")
    if args.item is not None:
        if not 1 <= args.item <= len(chapter.can_you):
            raise CommandError(f"{chapter.id} has items 1-{len(chapter.can_you)}, not {args.item}")

        def change(data):
            items = ticked(data, chapter.id)
            (items.discard if args.undo else items.add)(args.item)
            data["ticks"][chapter.id] = sorted(items)

        state.update(course.root, change)
    data = _read_state(course)
    print(f"{chapter.label}, can you ... (your word: ticks are self-reported, never checked)")
    for number, text in enumerate(chapter.can_you, 1):
        mark = "x" if number in ticked(data, chapter.id) else " "
        print(f"  [{mark}] {number}. {text}")
    print(summary(chapter, data))
    return 0
