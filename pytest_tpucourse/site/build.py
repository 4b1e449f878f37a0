"""`tpucourse site --out DIR`: write the whole static site, every page and its data, into one folder.

The folder is self-contained (plain HTML, CSS and JavaScript; data embedded in the pages, so it
opens from file:// and fetches nothing); `--serve` serves the same folder and answers the
instruments live (server.py).
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from .. import chips
from ..core.course import Course
from . import bench, instrument_pages, instruments, pages
from .learner_view import course_view

HOME_INSTRUMENT = "ex03"  # the course's home page opens with streaming attention at work
STATIC_FILES = ("site.css", "site.js", "chapter.js", "roofline.js", "streaming.js", "blockspec.js",
                "timeline.js", "mesh.js")


def home_floors(records) -> list[dict]:
    """The home page's three v5e floors, predicted; a measured v5e row of the same slot replaces one."""
    out = []
    for op in instruments.seed_ops():
        shape = tuple(int(d) for d in op["shape"].split("x"))
        slot_shapes = ((shape[0], shape[1]), (shape[1], shape[2])) if op["op"] == "matmul" else (shape, shape)
        measured = [r for r in records if r.chip == chips.DEFAULT_CHIP and r.method == "measured"
                    and r.op == op["op"] and r.shapes == slot_shapes and r.implementation == "floor"
                    and isinstance(r.value, float)]
        if measured:
            latest = max(measured, key=lambda r: r.date)
            out.append({"name": op["name"], "value": f"{latest.value * 1e6:.1f} µs",
                        "what": f"measured · {latest.chip} · {latest.dtype} · {latest.date[:10]}"})
            continue
        prediction = instruments.predict(chips.DEFAULT_CHIP, op["op"], op["shape"], op["dtype"])
        out.append({"name": op["name"], "value": f"{prediction['floor_seconds'] * 1e6:.1f} µs",
                    "what": f"roofline-predicted · {chips.DEFAULT_CHIP} · {op['dtype']} · {op['shape']}"})
    return out


def instrument_data(slug: str) -> dict | None:
    return {"ex01": instruments.roofline_data, "ex03": instruments.streaming_variants,
            "ex09": lambda: {"cases": instruments.blockspec_cases(), "shapes": instruments.BLOCKSPEC_SHAPES,
                             "blocks": instruments.BLOCKSPEC_BLOCKS, "dtypes": instruments.BLOCKSPEC_DTYPES},
            "ex10": instruments.timeline_data, "ex11": instruments.mesh_data}.get(slug, lambda: None)()


def build(course: Course, out: Path, *, log=print) -> list[Path]:
    """Write the site into `out`; return the pages written."""
    out = Path(out)
    (out / "static").mkdir(parents=True, exist_ok=True)
    static = resources.files(__package__) / "static"
    for name in STATIC_FILES:
        (out / "static" / name).write_text((static / name).read_text(encoding="utf-8"), encoding="utf-8")
    index = pages.jump_index(course)
    view = course_view(course)
    sections, records = bench.sections(course.root)
    streaming, script = instrument_pages.BODIES[HOME_INSTRUMENT]
    written = {"index.html": pages.home(view, home_floors(records), index,
                                        (HOME_INSTRUMENT, streaming, instrument_data(HOME_INSTRUMENT), script))}
    chapters = list(course.chapters)
    for number, chapter in enumerate(chapters):
        written[f"{chapter.id}.html"] = pages.chapter(
            view.chapter(chapter.id), pages.readme_html(course.root, chapter.id), index,
            chapters[number - 1] if number else None, chapters[number + 1] if number + 1 < len(chapters) else None)
    written["bench.html"] = pages.bench(sections, bench.plots(records), index)
    for slug, (body, script) in instrument_pages.BODIES.items():
        log(f"  computing {slug} with the package's own code")
        written[f"{slug}.html"] = pages.instrument(slug, body, index, instrument_data(slug), script)
    written["xray.html"] = instruments.xray_page()
    paths = []
    for name, text in written.items():
        (out / name).write_text(text, encoding="utf-8")
        paths.append(out / name)
    return paths


def clear(out: Path) -> None:
    """Empty a folder the site was written into before (only one holding a site: index.html and static/)."""
    out = Path(out)
    if out.is_dir() and any(out.iterdir()):
        if not ((out / "index.html").is_file() and (out / "static" / "site.css").is_file()):
            raise ValueError(f"{out} is not empty and holds no site: give an empty or new folder")
        shutil.rmtree(out)
