"""The site's pages as HTML strings: the home page (the stack), a page per chapter, the bench page
and the instruments' pages. Data comes in ready (learner_view.py, instruments.py, bench.py); this
module only lays it out. Every number on a page says what it is.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from ..chips import DEFAULT_CHIP
from ..core.course import Course
from ..learner import next_up
from ..learner.status import Confirmation, Status
from . import markdown
from .learner_view import ChapterView, CourseView, ExerciseView, status_counts

e = html.escape

# Where the home page pins each stage chapter along the stack: after which layer (the course's
# home page draws it so: the IR stack beside StableHLO and XLA, the priesthood kernels at the gap).
PINNED_AFTER = {"ch03": ("ch12",), "ch05": ("ch13",), "ch06": ("ch11", "ch15"), "ch08": ("ch10",),
                "ch09": ("ch14",)}
PROMISES = (("01", "Read any IR on sight", "narrate unfamiliar dumps, decode any dot_general"),
            ("02", "Write kernels that beat XLA", "derived, differential-tested, benchmarked"),
            ("03", "Treat the cluster as one kernel", "communication hidden behind compute"))
INSTRUMENTS = (
    ("ex01", "EX·01", "the roofline playground", "drag shapes across the ridge", "ch10"),
    ("ex09", "EX·09", "the BlockSpec sandbox", "legal and illegal schedules, live", "ch06"),
    ("ex05", "EX·05", "the IR x-ray", "one program, three layers, hover-synced", "ch12"),
    ("ex03", "EX·03", "streaming attention", "the score matrix that never exists", "ch13"),
    ("ex10", "EX·10", "the semaphore timeline", "step into a deadlock on purpose", "ch14"),
    ("ex11", "EX·11", "the mesh, hop by hop", "collectives over real link budgets", "ch09"),
)
LIVE_WORDS = "scrub it: the carried (m, l, acc) state rescales exactly; the score matrix never exists"
HONESTY = ("Gates pass only on real hardware, and failures stay published. Every value on this site "
           "states what it is: a roofline prediction, an off-chip verification, or a measured run with "
           "chip, dtype, shapes, and date attached.")
# An exercise's status in a badge: every status the state can give (learner/status.py says it).
STATUS_WORDS = {**{status.value: status.words for status in Status}, Status.TODO.value: "to do",
                Status.NOT_RUN.value: "not run"}


def jump_index(course: Course) -> list[dict]:
    """What ⌘K / Ctrl-K jumps to: every chapter, exercise and instrument, and the bench."""
    entries = [{"title": "home: the stack", "kind": "page", "href": "index.html"},
               {"title": "the bench: records and rooflines", "kind": "page", "href": "bench.html"}]
    entries += [{"title": f"ch {c.number:02d} {c.title}", "kind": "chapter", "href": f"{c.id}.html"}
                for c in course.chapters]
    entries += [{"title": f"{tag} {name} · {line}", "kind": "instrument", "href": f"{slug}.html"}
                for slug, tag, name, line, _ in INSTRUMENTS]
    entries += [{"title": f"{x.key} · {x.summary}", "kind": "exercise",
                 "href": f"{c.id}.html#{x.key.replace('.', '-')}"} for c in course.chapters for x in c.exercises
                if next_up.shipped(course, x)]
    return entries


def shell(title: str, body: str, index: list[dict], *, data: dict | None = None, scripts=(),
          page_class: str = "") -> str:
    """A whole page: the header with its jump box, the body, the embedded data and scripts."""
    blobs = f'<script type="application/json" id="jump-index">{_json(index)}</script>'
    if data is not None:
        blobs += f'\n<script type="application/json" id="page-data">{_json(data)}</script>'
    tags = "".join(f'<script src="static/{name}"></script>' for name in ("site.js", *scripts))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)} · Learn to make TPUs fast</title>
<link rel="icon" href="data:,"><link rel="stylesheet" href="static/site.css"></head>
<body class="{page_class}">
<header class="top"><a class="brand" href="index.html">Learn to make TPUs fast</a>
<nav><a href="index.html#stack">the stack</a><a href="index.html#workshop">the workshop</a><a href="bench.html">the bench</a>
<button id="jump-open" type="button" title="jump anywhere">jump <kbd>⌘K</kbd></button></nav></header>
<main>
{body}
</main>
<footer><p class="honesty"><b>the honesty rule</b> · {e(HONESTY)}</p></footer>
<div id="jump" class="jump" hidden><div class="jump-box"><input id="jump-input" type="search" autocomplete="off"
placeholder="jump to a chapter, exercise or instrument"><ul id="jump-list"></ul></div></div>
{blobs}
{tags}
</body></html>
"""


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False).replace("</", "<\\/")


# ---------------------------------------------------------------- home


def _dots(chapter: ChapterView) -> str:
    return "".join(f'<i class="dot s-{e(x.status.replace(" ", "-"))}" title="{e(x.key)}: {e(x.words)}"></i>'
                   for x in chapter.exercises)


def _stage_card(view: ChapterView) -> str:
    c = view.chapter
    gate = (f'<span class="gate-label">gate {c.gate:02d}: {e(view.gate_label)}</span>'
            if c.gate is not None else "")
    return (f'<a class="stage{" complete" if view.complete else ""}" href="{c.id}.html">'
            f'<span class="tag">stage {c.stage} · ch {c.number:02d}</span> <b>{e(c.title)}</b>'
            f'<span class="progress">{status_counts(view)} {_dots(view)}</span>{gate}</a>')


def _live_instrument(slug: str, body: str, words: str) -> str:
    """An instrument at work on the home page, as the course's home page opens with one."""
    tag, name, _, chapter_id = next((t, n, ln, ch) for s, t, n, ln, ch in INSTRUMENTS if s == slug)
    return (f'<section class="live" id="live-{slug}"><p class="kicker">{tag} {e(name)} · a chapter '
            f'{int(chapter_id[2:])} instrument, live · <a href="{slug}.html">open it on its own page</a></p>'
            f'{body}<p class="note">{e(words)}</p></section>')


def home(view: CourseView, floors: list[dict], index: list[dict], live: tuple | None = None) -> str:
    """The stack; `live` (slug, body, data, script): the instrument at work at the top of the page."""
    course = view.course
    first = course.chapters[0]
    nxt = view.next_exercise
    next_html = ("<p>every shipped exercise is done</p>" if nxt is None else
                 f'<p><a href="{nxt.key.split(".")[0]}.html#{nxt.key.replace(".", "-")}"><b>{e(nxt.key)}</b></a> · '
                 f'{e(nxt.summary)}</p><p class="cmd">edit <code>{e(nxt.module_path)}</code> · run '
                 f'<code>pytest {e(nxt.test_path)}</code> · stuck? <code>tpucourse hint {e(nxt.key)}</code></p>')
    promises = "".join(f'<li><span class="num">{n}</span> <b>{e(t)}</b>{e(s)}</li>' for n, t, s in PROMISES)
    layers = []
    for number, chapter in enumerate(c for c in view.chapters if c.chapter.kind == "layer"):
        c = chapter.chapter
        pinned = "".join(_stage_card(view.chapter(s)) for s in PINNED_AFTER.get(c.id, ()))
        layers.append(
            f'<li class="layer depth-{number}" id="layer-{c.id}"><a class="layer-head" href="{c.id}.html">'
            f'<span class="tag">ch {c.number:02d}</span><h3>{e(c.title)}</h3><p>{e(c.summary)}</p>'
            f'<span class="progress">{status_counts(chapter)} {_dots(chapter)}</span></a>'
            + (f'<div class="pinned">{pinned}</div>' if pinned else "") + "</li>")
    cards = "".join(f'<a class="instrument" href="{slug}.html"><span class="tag">{tag}</span> <b>{e(name)}</b>'
                    f'<span>{e(line)}</span><span class="chapter">chapter {int(ch[2:])}</span></a>'
                    for slug, tag, name, line, ch in INSTRUMENTS)
    floor_rows = "".join(
        f'<li><span>{e(f["name"])}</span><b>{f["value"]}</b><em>{e(f["what"])}</em></li>' for f in floors)
    notes = "".join(f"<li>{e(n)}</li>" for n in view.notes)
    body = f"""
<section class="hero">
<p class="kicker">a mastery course · one path · down the stack</p>
<h1>Learn to make TPUs fast.</h1>
<p class="lede">This page is the stack. Scroll and you descend it: four layers of compiler land on paper, the
gap, then the shaded depths where kernels live. Each layer is a chapter with assigned mastery work; the stages
are pinned where they belong; your progress rides on every entry.</p>
<p><a class="start" href="{first.id}.html">start the path → chapter {first.number} {e(first.title)}</a></p>
<p class="tally" id="tally"><b>{view.gates_passed}/{view.gates_total}</b> gates passed · your progress
<b>{view.chapters_complete}/{course.chapters_total}</b> chapters</p>
<div class="next" id="next"><span class="tag">next</span>{next_html}</div>
<ol class="promises">{promises}</ol>
</section>
{_live_instrument(live[0], live[1], LIVE_WORDS) if live else ""}
<section id="stack"><p class="descent">↓ the descent · {len(layers)} layers · {course.gates_total} stages pinned along the way</p>
<ol class="stack">{''.join(layers)}</ol>
<p class="floor-line">you have reached the floor</p></section>
<section id="workshop" class="workshop"><h2>The workshop</h2>
<p>Below the stack sits the equipment. Every instrument computes with the course's own code and is assigned
to a chapter above; press <kbd>⌘K</kbd> (<kbd>Ctrl-K</kbd>) to jump anywhere.</p>
<div class="instruments">{cards}</div></section>
<section class="floors"><h2>roofline-predicted floors · {DEFAULT_CHIP} · hardware rows replace these</h2>
<ul class="floor-list" id="floors">{floor_rows}</ul>
<p><a href="bench.html">the full bench →</a></p></section>
<section class="notes"><h2>where these figures come from</h2><ul>
<li>exercise statuses: your pytest runs of <code>exercises/</code> (<code>.tpucourse/state.json</code>), as
<code>tpucourse progress</code> shows them; "confirmed": the trusted check judged a done exercise's values outside
your run's process (<code>tpucourse confirm chNN</code>)</li><li>gates: your gate records, re-judged (<code>.tpucourse/records.jsonl</code>)</li>{notes}</ul></section>
"""
    return shell("the stack", body, index, page_class="home", data=live[2] if live else None,
                 scripts=(live[3],) if live else ())


# ---------------------------------------------------------------- a chapter


def _exercise(x: ExerciseView) -> str:
    anchor = x.key.replace(".", "-")
    hints = "".join(f'<li{"" if n < x.hints_shown else " hidden"}>{markdown.inline(h)}</li>'
                    for n, h in enumerate(x.hints))
    message = f'<p class="message">{e(x.message)}</p>' if x.message else ""
    return (f'<li class="exercise" id="{anchor}"><div class="ex-head"><span class="badge s-{e(x.status.replace(" ", "-"))}">'
            f'{e(STATUS_WORDS[x.status])}</span><b>{e(x.key)}</b>{_confirmation(x)}</div>'
            f'<p>{markdown.inline(x.summary)}</p>{message}'
            f'<p class="cmd">edit <code>{e(x.module_path)}</code> · run <code>pytest {e(x.test_path)}</code></p>'
            f'<div class="hints"><ol class="hint-list">{hints}</ol><button type="button" class="hint-next" '
            f'data-total="{len(x.hints)}">show a hint</button> <span class="hint-count"></span></div></li>')


def _confirmation(x: ExerciseView) -> str:
    """A done exercise's word on whether the trusted check confirmed it (empty for the others)."""
    if not x.confirmation:
        return ""
    chapter = x.key.split(".")[0]
    words = {Confirmation.CONFIRMED.value: "confirmed by the trusted check",
             Confirmation.DISAGREES.value: f"your run only · the trusted check disagrees: {x.confirmation_reason}",
             Confirmation.OWN_RUN.value: f"your run only · tpucourse confirm {chapter} checks it outside your run"}
    return f' <span class="confirmation c-{e(x.confirmation.replace(" ", "-"))}">{e(words[x.confirmation])}</span>'


def chapter(view: ChapterView, readme: str, index: list[dict], previous=None, following=None) -> str:
    c = view.chapter
    kind = f"Stage {c.stage}" if c.kind == "stage" else f"Layer · ch {c.number:02d}"
    exercises = "".join(_exercise(x) for x in view.exercises) or "<li>no exercises yet</li>"
    ticks = ""
    if c.can_you:
        items = "".join(
            f'<li><label><input type="checkbox" class="tick" data-chapter="{c.id}" data-item="{n}"'
            f'{" checked" if n in view.ticked else ""}> {markdown.inline(text)}</label></li>'
            for n, text in enumerate(c.can_you, 1))
        ticks = (f'<section class="can-you" id="can-you"><p class="kicker">the self-test, before the gate</p>'
                 f'<h2>Can you <span class="count" id="tick-count">{len(view.ticked)}/{len(c.can_you)}</span></h2>'
                 f'<ol>{items}</ol><p class="note" id="tick-note">your word, never checked: ticks are '
                 f'self-reported, as <code>tpucourse tick {c.id} N</code> records them; they pass no gate. '
                 f'This page shows the ticks of <code>.tpucourse/state.json</code>; with '
                 f'<code>tpucourse site --serve</code> a click records one.</p></section>')
    gate = ""
    if c.gate is not None:
        rows = "".join(f'<tr><td>{e(r.text)}</td><td><span class="st">{e(r.status)}</span></td><td>{e(r.what)}</td></tr>'
                       for r in view.gate)
        gate = (f'<section class="gate" id="gate"><p class="kicker">pass or fail, in public</p>'
                f'<h2>The gate <span class="gate-id">GATE {c.gate:02d}</span> <span class="st">{e(view.gate_label)}</span></h2>'
                f'<div class="table"><table><thead><tr><th>criterion</th><th>status</th><th>what the row is</th></tr></thead>'
                f'<tbody>{rows}</tbody></table></div><p class="note">gates pass only on real hardware, published pass '
                f'or fail · statuses from your own gate records, re-judged · the course\'s records of its reference '
                f'solutions are on <a href="bench.html">the bench</a>.</p></section>')
    pager = "".join(f'<a href="{x.id}.html">{label} ch {x.number:02d} {e(x.title)}</a>'
                    for x, label in ((previous, "←"), (following, "→")) if x is not None)
    body = f"""
<section class="chapter-head"><p class="kicker">{e(kind)}</p><h1>{e(c.title)}</h1><p class="lede">{e(c.summary)}</p>
<p class="tally">mastery work · this chapter <b>{view.done}/{view.shipped}</b> exercises done
{f'· gate {c.gate:02d}: {e(view.gate_label)}' if c.gate is not None else ''}</p></section>
<section class="work"><p class="kicker">mastery work</p><h2>Exercises</h2><ol class="exercises">{exercises}</ol>
<p class="note">statuses from your pytest runs of <code>exercises/</code>; a done exercise is confirmed once the
trusted check (<code>tpucourse confirm {c.id}</code>) judged its values outside your run's process; hints open one at a time
(<code>tpucourse hint {c.id}</code> does the same in a terminal).</p></section>
<article class="readme">{readme}</article>
{ticks}
{gate}
<nav class="pager">{pager}</nav>
"""
    return shell(f"ch {c.number:02d} {c.title}", body, index, scripts=("chapter.js",), page_class="chapter")


def readme_html(course_root: Path, chapter_id: str) -> str:
    path = Path(course_root) / "exercises" / chapter_id / "README.md"
    if not path.is_file():
        return "<p>This chapter has no README yet.</p>"
    return markdown.render(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the bench


def bench(sections: list[dict], plots: list[str], index: list[dict]) -> str:
    parts = []
    for section in sections:
        head = "".join(f"<th>{e(h)}</th>" for h in section["columns"])
        rows = "".join("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in row) + "</tr>" for row in section["rows"])
        empty = f'<p class="note">{e(section["empty"])}</p>' if not section["rows"] else ""
        problems = "".join(f"<li>{e(p)}</li>" for p in section["problems"])
        failures = "".join(f"<li>{e(f)}</li>" for f in section.get("failures", ()))
        parts.append(f'<section class="records"><h2>{e(section["title"])}</h2><p class="note">{e(section["note"])}</p>'
                     f'{empty}<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
                     + (f'<h3>Failures (kept forever)</h3><ul class="failures">{failures}</ul>' if failures else "")
                     + (f'<ul class="problems">{problems}</ul>' if problems else "") + "</section>")
    body = f"""
<section class="chapter-head"><p class="kicker">the bench</p><h1>Records and rooflines</h1>
<p class="lede">Every row says what it is: <b>roofline-predicted</b> (a floor from the chip's figures),
<b>off-chip verified</b> (correct under interpret mode, no time) or <b>measured</b> (run on the chip, with
chip, dtype, shapes and date). A measurement stands in place of the prediction it supersedes, whose value
stays in its "predicted floor" column; "timed by" says how the time was taken (the device's own trace, or
wall time over calls per sync). Rows are re-judged when the page is built.</p></section>
<section class="plots"><h2>A roofline per chip</h2><div class="plot-grid">{''.join(plots)}</div></section>
{''.join(parts)}
"""
    return shell("the bench", body, index, page_class="bench")


# ---------------------------------------------------------------- instruments


def instrument(slug: str, body: str, index: list[dict], data: dict | None, script: str | None) -> str:
    tag, name, line, chapter_id = next((t, n, ln, ch) for s, t, n, ln, ch in INSTRUMENTS if s == slug)
    head = (f'<section class="chapter-head"><p class="kicker">{tag} · the workshop · assigned to '
            f'<a href="{chapter_id}.html">chapter {int(chapter_id[2:])}</a></p><h1>{e(name)}</h1>'
            f'<p class="lede">{e(line)}</p></section>')
    return shell(f"{tag} {name}", head + body, index, data=data, scripts=(script,) if script else (),
                 page_class="instrument-page")
