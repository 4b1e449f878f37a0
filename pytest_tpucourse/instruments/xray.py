"""One program at three layers, linked op to op: the x-ray the course's command draws.

The layers: the jaxpr (what JAX traced), the StableHLO module printed with its location
table (what JAX hands to a compiler), and the optimized HLO (what XLA made of it). Each
names the source location its ops came from; the link between layers is the location
plus the op's name:

  jaxpr        eqn.source_info                 -> innermost user frame (jax_internals)
  StableHLO    %3 = stablehlo.add ... loc(#l9)  -> #l9 = loc("jit(f)/add"(#l7)) -> ... "f.py":7:8 to :13
  opt. HLO     metadata={op_name="jit(f)/add" stack_frame_id=6} -> StackFrames -> FileLocations

A row per executed equation (calls into `jit`, custom_jvp/custom_vjp functions and
checkpoints are replaced by their bodies; a pallas_call's kernel and control flow bodies
are not entered) holds the StableHLO ops and the optimized-HLO ENTRY instructions made
from it: those carrying its location and its primitive's name (the last part of the op
name), or, when no op kept the name, those carrying its location. A jit inside the program
that a library traced (jax.nn.relu, jax.nn.one_hot) is a private function of the StableHLO
module whose ops' locations name no file: they are at the places of the `call`s that run it,
as the jaxpr's equations of that body take the call's location. Chapter 12's graded
tests judge the learner's x-ray against these rows; `tpucourse xray` draws them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..chips import Chip
from ..grading.context import resolve_chip
from ..readers import hlo_text
from ..core import jax_internals
from ..readers.hlo_text import SourceLocation

# Equations that only call another jaxpr: the x-ray shows their bodies instead.
CALL_PRIMITIVES = frozenset({"jit", "pjit", "closed_call", "core_call", "custom_jvp_call",
                             "custom_vjp_call", "custom_vjp_call_jaxpr", "checkpoint", "remat"})


@dataclass(frozen=True)
class Layers:
    jaxpr: object  # a ClosedJaxpr
    stablehlo: str  # printed with debug_info=True: every op carries a loc
    hlo: str  # optimized HLO text
    compiler: str  # who produced the optimized HLO, said wherever it is shown


def three_layers(fn, *args) -> Layers:
    """The three layers of jax.jit(fn) on args, compiled here with current locations.

    A fresh wrapper of fn is compiled: jit keeps what it compiled per function object in
    memory, so a function compiled earlier in the process (from a stale cache entry, say)
    would come back as it was compiled then.
    """
    import jax
    import jaxlib

    closed = jax.make_jaxpr(fn)(*args)
    with jax_internals.current_locations():
        lowered = jax.jit(functools.wraps(fn)(lambda *a: fn(*a))).lower(*args)
        stablehlo = lowered.as_text(debug_info=True)
        hlo = lowered.compile().as_text()
    platform = jax.default_backend()
    return Layers(closed, stablehlo, hlo, f"XLA for {platform} (jaxlib {jaxlib.__version__}), "
                                          f"compiled in this process")


def tpu_layers(fn, *args, chip: Chip | str | None = None) -> Layers:
    """The three layers with the TPU's optimized HLO: fn compiled ahead of time for `chip` (a Chip,
    a name the run knows, or None: the run's kernel chip, the course's default outside a run) by
    the real TPU compiler (the tpu-compile extra), on any host; nothing runs."""
    import jax

    from ..compiler import libtpu

    closed = jax.make_jaxpr(fn)(*args)
    compiled = libtpu.compile_for(fn, *args, chip=resolve_chip(chip))
    return Layers(closed, tpu_stablehlo(fn, *args), compiled.optimized_hlo, compiled.compiler)


def tpu_stablehlo(fn, *args) -> str:
    """StableHLO of fn lowered for a TPU on any host: a pallas_call becomes a tpu_custom_call."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), args)
    with pltpu.force_tpu_interpret_mode(None):
        return jax.jit(fn).trace(*shapes).lower(lowering_platforms=("tpu",)).as_text(debug_info=True)


# ---------------------------------------------------------------- the jaxpr


@dataclass(frozen=True)
class Equation:
    primitive: str
    location: SourceLocation | None
    text: str  # the equation as the jaxpr prints it, one line


def equations(closed_jaxpr) -> list[Equation]:
    """The executed equations of a traced program, calls flattened, in program order."""
    found = []
    _walk(closed_jaxpr.jaxpr, found, {}, None)
    return found


def _walk(jaxpr, found, names, caller: SourceLocation | None) -> None:
    """caller: the location of the call being flattened; an equation traced without a user
    frame of its own (the body of a library's jit, cached across calls) takes it."""
    from jax.extend import core as jex_core

    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        location = jax_internals.equation_location(eqn) or caller
        if name in CALL_PRIMITIVES:
            for param in jax_internals.equation_params(eqn).values():
                if isinstance(param, jex_core.ClosedJaxpr):
                    _walk(param.jaxpr, found, names, location)
                elif isinstance(param, jex_core.Jaxpr):
                    _walk(param, found, names, location)
            continue
        found.append(Equation(name, location, _one_line(eqn, names)))


def _one_line(eqn, names: dict) -> str:
    """'c:f32[8,32] = dot_general a b', naming variables a, b, c ... in order of appearance."""
    def show(var):
        if hasattr(var, "val"):  # a Literal
            return str(getattr(var, "val"))
        if id(var) not in names:
            names[id(var)] = _letters(len(names))
        return names[id(var)]

    ins = " ".join(show(v) for v in eqn.invars)
    outs = " ".join(f"{show(v)}:{v.aval.str_short()}" for v in eqn.outvars)
    return f"{outs} = {eqn.primitive.name} {ins}".strip()


def _letters(n: int) -> str:
    text = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        text = chr(ord("a") + r) + text
    return text


# ---------------------------------------------------------------- StableHLO


@dataclass
class StableOp:
    op: str  # "stablehlo.dot_general"
    name: str | None  # the op name of its location: "jit(f)/dot_general"
    location: SourceLocation | None
    text: str  # the op's line, without its loc
    function: str = "main"  # the func.func it sits in
    line_number: int = 0  # its line in the module's text
    # An op of a private function whose own location names no file (the body of a library's
    # jit: loc("eq")) is at the places of the calls that run that function.
    call_sites: list[SourceLocation] = field(default_factory=list)

    @property
    def places(self) -> list[SourceLocation]:
        return [self.location] if self.location is not None else self.call_sites


@dataclass(frozen=True)
class Function:
    """A func.func of the module: main, or a private function a jit inside the program became."""

    name: str
    text: str  # its header line
    line_number: int


@dataclass(frozen=True)
class Call:
    """A `call @callee(...)` op: where a private function runs."""

    callee: str
    function: str  # the function the call sits in
    name: str | None
    location: SourceLocation | None
    text: str
    line_number: int


@dataclass
class StableModule:
    ops: list[StableOp]
    functions: list[Function]
    calls: list[Call]


_LOC_DEF = re.compile(r"^#(loc\d*)\s*=\s*loc\((.*)\)\s*$")
_OP = re.compile(r'^\s*(?:(%[\w#:]+(?:\s*,\s*%[\w#:]+)*)\s*=\s*)?"?(stablehlo\.[\w.]+)"?')
_FUNC = re.compile(r"^\s*func\.func\s+(?:(?:public|private)\s+)?@([\w.$\-]+)")
_CALL = re.compile(r"^\s*(?:%[\w#:]+(?:\s*,\s*%[\w#:]+)*\s*=\s*)?(?:func\.)?call\s+@([\w.$\-]+)")
_LOC_USE = re.compile(r"\bloc\((#loc\d*|\"[^\"]*\"(?:\(#loc\d*\))?|unknown)\)\s*$")


def stablehlo_ops(text: str) -> list[StableOp]:
    """Every stablehlo.* op of a module printed with debug_info=True, with its location."""
    return stablehlo_module(text).ops


def stablehlo_module(text: str) -> StableModule:
    """The module's ops, functions and calls, every op located (through its calls if need be)."""
    table = {m.group(1): m.group(2) for m in map(_LOC_DEF.match, text.splitlines()) if m}
    ops, functions, calls = [], [], []
    blocks, owner, function = [], None, "main"  # blocks: for each open "{", the op whose region it is
    for number, line in enumerate(text.splitlines()):
        loc = _LOC_USE.search(line)
        stripped = line.strip()
        if stripped.startswith("}") and blocks:
            closing = blocks.pop()
            if closing is not None and loc is not None:
                closing.name, closing.location = _resolve(loc.group(1), table)
                loc = None
            if stripped.endswith("{"):  # "}, {": the same op's next region
                blocks.append(closing)
            continue
        if func_match := _FUNC.match(line):
            function = func_match.group(1)
            functions.append(Function(function, _LOC_USE.sub("", _strip_arg_locs(line)).strip(), number))
        elif call_match := _CALL.match(line):
            name, location = _resolve(loc.group(1), table) if loc else (None, None)
            calls.append(Call(call_match.group(1), function, name, location, _LOC_USE.sub("", line).strip(), number))
        elif op_match := _OP.match(line):
            op = StableOp(op_match.group(2), None, None, _LOC_USE.sub("", line).strip(), function, number)
            ops.append(op)
            if loc is not None:
                op.name, op.location = _resolve(loc.group(1), table)
            else:
                owner = op  # its regions follow; it carries its loc on the last closing "} loc(...)"
        if stripped.endswith("{"):
            blocks.append(owner)
            owner = None
    sites = _call_sites(calls)
    for op in ops:
        if op.location is None:
            op.call_sites = sites.get(op.function, [])
    return StableModule(ops, functions, calls)


def _call_sites(calls: list[Call]) -> dict[str, list[SourceLocation]]:
    """function -> the places its calls are at; a call with no place of its own (inside another
    private function) is at that function's call sites."""
    by_callee: dict[str, list[Call]] = {}
    for call in calls:
        by_callee.setdefault(call.callee, []).append(call)

    def sites(function: str, seen: frozenset) -> list[SourceLocation]:
        found = []
        for call in by_callee.get(function, []):
            if call.location is not None:
                found.append(call.location)
            elif call.function not in seen:
                found += sites(call.function, seen | {call.function})
        return list(dict.fromkeys(found))

    return {function: sites(function, frozenset({function})) for function in by_callee}


def _strip_arg_locs(line: str) -> str:
    """A func.func header without the loc(...) of each argument."""
    return re.sub(r'\s*loc\((?:"[^"]*"|#loc\d*|unknown)\)', "", line)


def _resolve(expression: str, table: dict[str, str], depth: int = 0):
    """(op name, file location) of an MLIR location: aliases, names, call sites, files."""
    expression = expression.strip()
    if depth > 50 or expression == "unknown":
        return None, None
    if expression.startswith("#"):
        return _resolve(table.get(expression[1:], "unknown"), table, depth + 1)
    file_match = re.match(r'^"([^"]*)":(\d+):(\d+)(?:\s+to\s+(\d*):(\d+))?$', expression)
    if file_match:
        path, line, column, end_line, end_column = file_match.groups()
        return None, SourceLocation(path, int(line), int(column), int(end_line or line),
                                    int(end_column or column))
    call_match = re.match(r"^callsite\((\S+)\s+at\s+(\S+)\)$", expression)
    if call_match:
        return None, _resolve(call_match.group(1), table, depth + 1)[1]
    name_match = re.match(r'^"([^"]*)"(?:\((.*)\))?$', expression)
    if name_match:
        inner = _resolve(name_match.group(2), table, depth + 1)[1] if name_match.group(2) else None
        return name_match.group(1), inner
    fused = re.match(r"^fused(?:<[^>]*>)?\[(.*)\]$", expression)
    if fused:
        for part in fused.group(1).split(","):
            name, location = _resolve(part, table, depth + 1)
            if location is not None:
                return name, location
    return None, None


# ---------------------------------------------------------------- linking


@dataclass
class Row:
    equation: Equation
    stablehlo: list[StableOp] = field(default_factory=list)
    hlo: list[hlo_text.Instruction] = field(default_factory=list)  # ENTRY instructions
    # Everything at the equation's location, whatever its name: a row may name no more.
    stablehlo_here: list[StableOp] = field(default_factory=list)
    hlo_here: list[hlo_text.Instruction] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The row in the learner's contract (chapter 12, xray.py)."""
        location = self.equation.location
        return dict(primitive=self.equation.primitive,
                    file=location.file if location else None,
                    line=location.line if location else None,
                    stablehlo=_distinct(op.op for op in self.stablehlo),
                    hlo=_distinct(i.name for i in self.hlo))

    def bounds(self, entry: list[str] = ()) -> dict:
        """as_dict() with what a row may also name: the ops and ENTRY instructions at its location
        (`stablehlo_here`, `hlo_here`), the location itself (`place`, 'file:line:column') and
        the names of every ENTRY instruction (`entry`)."""
        location = self.equation.location
        return dict(self.as_dict(), stablehlo_here=_distinct(op.op for op in self.stablehlo_here),
                    hlo_here=_distinct(i.name for i in self.hlo_here), entry=list(entry),
                    place=f"{Path(location.file).name}:{location.line}:{location.column}" if location else None)


def link(layers: Layers, ops: list[StableOp] | None = None, module: hlo_text.HloModule | None = None) -> list[Row]:
    """One row per executed equation, with the StableHLO ops and ENTRY instructions made from it.

    ops and module: the layers already parsed (rows then hold those very objects).
    """
    ops = stablehlo_ops(layers.stablehlo) if ops is None else ops
    module = hlo_text.parse(layers.hlo) if module is None else module
    everything = list(module.instructions())
    holders = {}  # id of any instruction -> the ENTRY instructions that run it
    for entry_instruction in module.entry.instructions:
        inside = [entry_instruction]
        for called in entry_instruction.called:
            inside += module.contained(called)
        for instruction in inside:
            holders.setdefault(id(instruction), []).append(entry_instruction)

    def entry_of(made):
        entry_names = {e.name for i in made for e in holders.get(id(i), [])}
        return [e for e in module.entry.instructions if e.name in entry_names]

    rows = []
    for equation in equations(layers.jaxpr):
        row = Row(equation)
        if equation.location is not None:
            row.stablehlo, row.stablehlo_here = _made_from(ops, equation, lambda op: op.places, lambda op: op.name)
            made, here = _made_from(everything, equation, lambda i: [module.location(i)], lambda i: i.op_name)
            row.hlo, row.hlo_here = entry_of(made), entry_of(here)
        rows.append(row)
    return rows


def xray(layers: Layers) -> list[dict]:
    """The rows of link() in the learner's contract."""
    return [row.as_dict() for row in link(layers)]


def xray_bounds(layers: Layers) -> list[dict]:
    """The rows of link() with what each may also name (Row.bounds): what chapter 12 grades."""
    entry = [i.name for i in hlo_text.parse(layers.hlo).entry.instructions]
    return [row.bounds(entry) for row in link(layers)]


def _made_from(items, equation: Equation, places_of, name_of) -> tuple[list, list]:
    """(made from the equation, everything at its location): those at its location named for its
    primitive, or all at its location when none kept the name."""
    here = [item for item in items
            if any(place is not None and place.start == equation.location.start for place in places_of(item))]
    named = [item for item in here if (name_of(item) or "").rsplit("/", 1)[-1] == equation.primitive]
    return named or here, here


def _distinct(names) -> list[str]:
    seen = []
    for name in names:
        if name not in seen:
            seen.append(name)
    return seen
