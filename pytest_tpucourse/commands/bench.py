"""`tpucourse bench`: bench/README.md regenerated from the course's own gate records (bench/records.jsonl)."""

from __future__ import annotations

from pathlib import Path

from .. import chips
from ..core.course import find_course_root
from ..core.paths import shown_in_text
from ..gates import records as rec
from ..gates import report


def add_parser(subcommands):
    b = subcommands.add_parser("bench", help="regenerate bench/README.md from the course's gate records")
    b.add_argument("--records", default=None, help=f"default: {rec.PUBLISHED_PATH} in the course checkout")
    b.add_argument("--output", default=None, help="default: README.md next to the records")
    return b


def run(args) -> int:
    root = find_course_root(Path.cwd())
    path = Path(args.records) if args.records else (root or Path.cwd()) / rec.PUBLISHED_PATH
    output = Path(args.output) if args.output else path.parent / "README.md"
    loaded = report.load([path], chips.ChipRegistry(), tree="solutions")
    page = report.bench_readme(loaded, course_root=root, source=path.name)
    output.write_text(shown_in_text(page, root) if root else page, encoding="utf-8")
    print(f"wrote {output} from {len(loaded.accepted)} rows of the reference solutions in {path}"
          + (f"; {len(loaded.problems())} rows rejected or unreadable (listed on the page)" if loaded.problems()
             else ""))
    return 0
