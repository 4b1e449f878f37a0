"""A chapter's self-test ("Can you ..."), as the learner ticks it (`tpucourse tick`).

No test can tell whether a learner can defend a schedule decision or point to the
review comments that changed a kernel; the course asks, and the learner answers. A
tick is therefore self-reported, stored in the state file next to what pytest runs
observed but never mixed with it: it completes no exercise and passes no gate, and
`tpucourse progress` labels it as the learner's word.
"""

from __future__ import annotations


def ticked(data: dict, chapter_id: str) -> set[int]:
    """The 1-based item numbers the learner ticked for a chapter."""
    return {int(n) for n in data.get("ticks", {}).get(chapter_id, [])}


def summary(chapter, data: dict) -> str:
    """The progress line: k/n ticked, labelled self-reported."""
    done = ticked(data, chapter.id) & set(range(1, len(chapter.can_you) + 1))
    return (f"can you: {len(done)}/{len(chapter.can_you)} ticked (self-reported, "
            f"tpucourse tick {chapter.id})")
