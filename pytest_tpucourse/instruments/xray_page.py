"""Drawing the x-ray: three columns aligned by source line in a terminal, or one web page.

`tpucourse xray module.py:function --shapes 8x16 16x32:bfloat16` (commands/xray.py) traces,
lowers and compiles the function on this machine (xray.three_layers), links the layers
(xray.link) and draws them side by side, one block per source line (terminal_text). `--chip v5e`
takes the third layer from the real TPU compiler instead (xray.tpu_layers, the
tpu-compile extra): the TPU-optimized HLO, a Pallas kernel as its tpu_custom_call.
`--html FILE` writes the same as a self-contained page: hovering any op highlights, in
all three columns, every op linked to it. Both say which compiler made the HLO.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from ..readers import hlo_text
from . import xray

COLOURS = {"source": "2", "jaxpr": "36", "stablehlo": "33", "hlo": "35", "head": "1"}


@dataclass
class Picture:
    """Everything drawn: the rows, every StableHLO op and every ENTRY instruction, and links."""

    title: str
    compiler: str
    rows: list[xray.Row]
    ops: list[xray.StableOp]
    entry: list[hlo_text.Instruction]
    module: hlo_text.HloModule
    stable: xray.StableModule | None = None  # functions and calls, for the page's StableHLO column


def load_function(target: str):
    """'path/to/module.py:function' -> the function."""
    path_text, _, name = target.rpartition(":")
    if not path_text or not name:
        raise ValueError(f"give the function as module.py:function, got {target!r}")
    path = Path(path_text)
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    spec = importlib.util.spec_from_file_location(f"_tpucourse_xray_{path.stem}", path.resolve())
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.resolve().parent))
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"{path} has no function {name}()")
    return function


def parse_shapes(specs: list[str]):
    """['8x16', '16x32:bfloat16', 'scalar'] -> ShapeDtypeStructs (float32 unless a dtype is given)."""
    import jax
    import jax.numpy as jnp

    structs = []
    for spec in specs:
        dims, _, dtype = spec.partition(":")
        try:
            shape = () if dims in ("", "scalar") else tuple(int(d) for d in dims.split("x"))
            structs.append(jax.ShapeDtypeStruct(shape, jnp.dtype(dtype or "float32")))
        except (ValueError, TypeError) as error:
            raise ValueError(f"--shapes: cannot read {spec!r} (want e.g. 8x16 or 8x16:bfloat16): {error}") from None
    return structs


def picture(function, args, title: str, chip: str | None = None) -> Picture:
    """The x-ray of function(*args): compiled here, or for `chip` by the real TPU compiler."""
    layers = xray.tpu_layers(function, *args, chip=chip) if chip else xray.three_layers(function, *args)
    module = hlo_text.parse(layers.hlo)
    stable = xray.stablehlo_module(layers.stablehlo)
    return Picture(title, layers.compiler, xray.link(layers, stable.ops, module), stable.ops,
                   module.entry.instructions, module, stable)


def _describe(module: hlo_text.HloModule, instruction: hlo_text.Instruction) -> str:
    text = f"{instruction.name} = {hlo_text.array_text(*instruction.arrays[0]) if instruction.arrays else ''} " \
           f"{instruction.opcode}"
    if instruction.opcode == "fusion":
        body = module.computation(instruction.called[0]) if instruction.called else None
        root = body.root.opcode if body and body.root else "?"
        text += f" ({instruction.attribute('kind')}: {root})"
    target = instruction.attribute("custom_call_target")
    return text + (f" {target}" if target else "")


def _source_line(path: str, line: int) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return ""


def _groups(pic: Picture):
    """Rows grouped by source line, in order of first appearance."""
    groups: dict = {}
    for row in pic.rows:
        location = row.equation.location
        key = (location.file, location.line) if location else ("?", 0)
        groups.setdefault(key, []).append(row)
    return groups


# ---------------------------------------------------------------- terminal


def terminal_text(pic: Picture, colour: bool, width: int | None = None) -> str:
    width = width or shutil.get_terminal_size((160, 40)).columns
    column = max(24, (width - 6) // 3)

    def paint(text, kind):
        return f"\033[{COLOURS[kind]}m{text}\033[0m" if colour else text

    def cell(text):
        return text if len(text) <= column else text[:column - 1] + "…"

    lines = [paint(f"x-ray of {pic.title}", "head"),
             f"optimized HLO: {pic.compiler}",
             "  ".join(paint(cell(h).ljust(column), k) for h, k in
                       (("jaxpr", "jaxpr"), ("StableHLO", "stablehlo"), ("optimized HLO (ENTRY)", "hlo")))]
    for (path, line), rows in _groups(pic).items():
        lines.append("")
        lines.append(paint(f"{Path(path).name}:{line}  {_source_line(path, line)}", "source"))
        jaxpr = [row.equation.text for row in rows]
        stable = list(dict.fromkeys(op.text for row in rows for op in row.stablehlo))
        entry = list(dict.fromkeys(_describe(pic.module, i) for row in rows for i in row.hlo))
        for a, b, c in zip_longest(jaxpr, stable, entry, fillvalue=""):
            lines.append("  ".join(paint(cell(text).ljust(column), kind) for text, kind in
                                   ((a, "jaxpr"), (b, "stablehlo"), (c, "hlo"))).rstrip())
    return "\n".join(lines) + "\n"


def wants_colour(choice: str, stream) -> bool:
    if choice == "always":
        return True
    if choice == "never":
        return False
    return hasattr(stream, "isatty") and stream.isatty() and not os.environ.get("NO_COLOR") \
        and os.environ.get("TERM") != "dumb"


# ---------------------------------------------------------------- web page

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>x-ray of {title}</title>
<style>
body {{ font: 13px/1.4 ui-monospace, Menlo, Consolas, monospace; margin: 1.5em; color: #222; }}
h1 {{ font-size: 16px; margin: 0 0 .2em; }} p.compiler {{ margin: 0 0 1em; color: #555; }}
.layers {{ display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 1em; }}
.layer h2 {{ font-size: 13px; margin: 0 0 .4em; }}
.op {{ padding: 1px 4px; border-radius: 3px; white-space: pre; overflow: hidden; text-overflow: ellipsis; cursor: default; }}
.op.named {{ display: flex; }} .op.named > span {{ overflow: hidden; text-overflow: ellipsis; }}
.op .lhs {{ flex: 0 1 auto; min-width: 2ch; }} .op .name {{ flex: none; font-weight: 600; }}
.op .rest {{ flex: 0 10000000 auto; min-width: 0; }} /* cut first: the rest, then what the line defines */
.src {{ margin: .5em 0 .1em; color: #888; white-space: pre; overflow: hidden; text-overflow: ellipsis; }}
.src:first-of-type {{ margin-top: 0; }}
.func {{ margin: .6em 0 .1em; padding: 1px 4px; color: #555; font-weight: bold; }}
.func .why {{ font-weight: normal; color: #888; }} .infunc {{ margin-left: 1.2em; }}
.op .where {{ color: #888; }} .op.unlinked {{ color: #aaa; }}
.op.hl {{ background: #ffe58a; }} .op.self {{ background: #ffc400; }}
</style></head><body>
<h1>x-ray of {title}</h1>
<p class="compiler">optimized HLO: {compiler}. Hover an op: its counterparts in the other layers light up;
every op's name shows, and a cut line shows in full as its tooltip. The jaxpr is grouped by the source line
that traced it.</p>
<div class="layers">
<section class="layer" id="jaxpr"><h2>jaxpr</h2>
{jaxpr}</section>
<section class="layer" id="stablehlo"><h2>StableHLO</h2>
{stablehlo}</section>
<section class="layer" id="hlo"><h2>optimized HLO (ENTRY)</h2>
{hlo}</section>
</div>
<script>
const ops = Array.from(document.querySelectorAll('.op'));
const links = new Map(ops.map(el => [el, new Set(JSON.parse(el.dataset.links))]));
for (const el of ops) {{
  el.addEventListener('mouseenter', () => {{
    const mine = links.get(el);
    for (const other of ops) {{
      if ([...links.get(other)].some(id => mine.has(id))) other.classList.add('hl');
    }}
    el.classList.add('self');
  }});
  el.addEventListener('mouseleave', () => {{
    for (const other of ops) other.classList.remove('hl', 'self');
  }});
}}
</script>
</body></html>
"""


def page(pic: Picture) -> str:
    """One self-contained HTML page (no external files): the three columns, hover-linked.

    StableHLO keeps its functions: main, then one private function per jit a library traced
    (jax.nn.one_hot's @_one_hot), each under its header; a `call @f` links to the rows whose
    ops run inside f. Every line carries its full text as a tooltip.
    """
    op_rows: dict[int, list[int]] = {}
    entry_rows: dict[int, list[int]] = {}
    for index, row in enumerate(pic.rows):
        for op in row.stablehlo:
            op_rows.setdefault(id(op), []).append(index)
        for instruction in row.hlo:
            entry_rows.setdefault(id(instruction), []).append(index)

    def element(text: str, rows: list[int], where: str = "", ident: str = "", full: str = "",
                extra: str = "", op_name: str = "") -> str:
        parts = _named_parts(text, op_name)
        classes = "op" + ("" if rows else " unlinked") + (" named" if parts else "") + extra
        name = f' data-name="{html.escape(ident)}"' if ident else ""
        tip = html.escape(" ".join(filter(None, (where, full or text))))
        body = ("".join(f'<span class="{kind}">{html.escape(part)}</span>' for kind, part in parts) if parts
                else html.escape(text))
        return (f'<div class="{classes}" data-links="{html.escape(json.dumps(sorted(set(rows))))}"{name} '
                f'title="{tip}">{body}</div>\n')

    jaxpr = []
    last = None
    for index, row in enumerate(pic.rows):
        location = row.equation.location
        where = f"{Path(location.file).name}:{location.line}" if location else ""
        here = (location.file, location.line) if location else None
        if not jaxpr or here != last:
            last = here
            line = _source_line(location.file, location.line) if location else ""
            jaxpr.append(f'<div class="src" title="{html.escape(f"{where}  {line}".strip())}">'
                         f'{html.escape(where or "(no source line)")}  {html.escape(line)}</div>\n')
        jaxpr.append(element(row.equation.text, [index], where, row.equation.primitive, extra=" infunc",
                             op_name=row.equation.primitive))
    jaxpr = "".join(jaxpr)
    hlo = "".join(element(_describe(pic.module, i), entry_rows.get(id(i), []), ident=i.name,
                          full=f"{i.name} = {i.shape} {i.opcode}({', '.join(i.operands)}) {i.attributes}".strip())
                  for i in pic.entry)
    return _PAGE.format(title=html.escape(pic.title), compiler=html.escape(pic.compiler),
                        jaxpr=jaxpr, stablehlo=_stablehlo_column(pic, op_rows, element), hlo=hlo)


def _stablehlo_column(pic: Picture, op_rows: dict[int, list[int]], element) -> str:
    """The StableHLO module in its own order: function headers, calls and ops."""
    stable = pic.stable or xray.StableModule(pic.ops, [], [])
    by_function: dict[str, set[int]] = {}  # function -> rows with an op in it
    for op in stable.ops:
        by_function.setdefault(op.function, set()).update(op_rows.get(id(op), []))
    callees: dict[str, set[str]] = {}
    for call in stable.calls:
        callees.setdefault(call.function, set()).add(call.callee)

    def rows_in(function: str, seen: frozenset = frozenset()) -> set[int]:
        found = set(by_function.get(function, set()))
        for callee in callees.get(function, set()) - seen:
            found |= rows_in(callee, seen | {function})
        return found

    callers = {call.callee: call for call in stable.calls}
    private = {f.name for f in stable.functions if "private" in f.text.split("@")[0]}
    lines = []
    for function in stable.functions:
        call = callers.get(function.name)
        why = ""
        if function.name in private:
            where = (f"{Path(call.location.file).name}:{call.location.line}"
                     if call is not None and call.location is not None else "")
            why = f"a jit inside the program, run by call @{function.name}" + (f" at {where}" if where else "") + \
                  "; its ops name no file and are at the call's line"
        head = function.text.split("(", 1)[0]  # "func.func private @_one_hot"; in full as the tooltip
        lines.append((function.line_number,
                      f'<div class="func" data-name="{html.escape(function.name)}" '
                      f'title="{html.escape(function.text + (f"  ({why})" if why else ""))}">'
                      f'{html.escape(head)}' + (f' <span class="why">{html.escape(why)}</span>' if why else "")
                      + "</div>\n"))
    for call in stable.calls:
        lines.append((call.line_number, element(call.text, sorted(rows_in(call.callee)), ident=f"call @{call.callee}",
                                                extra=" infunc" if stable.functions else "")))
    for op in stable.ops:
        lines.append((op.line_number, element(op.text, op_rows.get(id(op), []), ident=op.op,
                                              extra=" infunc" if stable.functions else "", op_name=op.op)))
    return "".join(text for _, text in sorted(lines, key=lambda item: item[0]))


def _named_parts(text: str, name: str) -> list[tuple[str, str]]:
    """A line cut in three around its op's name (what it defines, the name, the rest), so the page can
    cut the other two and keep the name in view; [] where the name is not in the line."""
    if not name:
        return []
    start = text.find(" = ")
    at = text.find(name, start + 3 if start >= 0 else 0)
    if at < 0:
        return []
    return [(kind, part) for kind, part in (("lhs", text[:at]), ("name", name), ("rest", text[at + len(name):]))
            if part]

