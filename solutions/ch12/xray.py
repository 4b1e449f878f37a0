"""The IR x-ray: one program at three layers, every executed primitive linked to what it became.

Three layers name the same source locations, each in its own way:

  jaxpr       eqn.source_info.traceback; its innermost user frame is the line of your code
  StableHLO   `... loc(#loc48)`, resolved through the table at the end of the module:
              #loc48 = loc("jit(f)/dot_general"(#loc34))     a name: the op's name stack
              #loc34 = loc(callsite(#loc20 at #loc21))         callee (innermost) at caller
              #loc20 = loc("f"(#loc6))                          a function's name
              #loc6  = loc("/path/f.py":6:8 to :13)             file, line, column
  optimized   metadata={op_name="jit(f)/dot_general" stack_frame_id=5}, resolved through
  HLO         the tables at the top: StackFrames -> FileLocations -> FileNames

A library's jit (jax.nn.relu) is a private function of the StableHLO module, run by a
`call @relu` at your line; its ops' locations name no file, so they are at the call's place.

A row links an equation to the StableHLO ops and the HLO instructions that carry its
(file, line, column) and whose op name ends with its primitive; when none kept that
name (XLA renames what it rewrites), to those at its location. HLO instructions are
reported as the ENTRY instruction that runs them: a fusion, a custom call, a dot.

The trap: the persistent compilation cache keys a program without its locations, so a
compile of moved or copied code can return an old executable with the old lines. A
compile whose locations matter puts them into the key.
"""

import functools
import re

import jax
from jax._src import source_info_util  # private: the innermost user frame of an equation
from jax.extend import core as jex_core

CALLS = {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
         "custom_vjp_call_jaxpr", "checkpoint", "remat"}


def three_layers(fn, *args):
    """(closed jaxpr, StableHLO text with locations, optimized HLO text) of jax.jit(fn) on args."""
    closed = jax.make_jaxpr(fn)(*args)
    before = jax.config.jax_compilation_cache_include_metadata_in_key
    jax.config.update("jax_compilation_cache_include_metadata_in_key", True)
    try:
        # A new function object: jit keeps each function's compiled program in memory, and
        # a program compiled before (from a stale cache entry) would come back unchanged.
        lowered = jax.jit(functools.wraps(fn)(lambda *a: fn(*a))).lower(*args)
        return closed, lowered.as_text(debug_info=True), lowered.compile().as_text()
    finally:
        jax.config.update("jax_compilation_cache_include_metadata_in_key", before)


def xray(jaxpr, stablehlo: str, hlo: str) -> list[dict]:
    """One row per executed equation: primitive, file, line, stablehlo ops, ENTRY instructions."""
    ops = _stablehlo_ops(stablehlo)
    instructions, entry, contains = _hlo(hlo)
    rows = []
    for primitive, place in _equations(jaxpr.jaxpr):
        stable = _made_from(ops, primitive, place)
        made = {name for name, _ in _made_from(instructions, primitive, place)}
        rows.append(dict(
            primitive=primitive,
            file=place[0] if place else None,
            line=place[1] if place else None,
            stablehlo=list(dict.fromkeys(op for op, _ in stable)),
            hlo=[e for e in entry if contains[e] & made],
        ))
    return rows


def _equations(jaxpr, caller=None):
    """(primitive, (file, line, column)) of every executed equation, calls flattened.

    An equation traced with no frame of yours (inside a library's jit, traced once and
    cached) takes the place of the call it sits in.
    """
    for eqn in jaxpr.eqns:
        frame = source_info_util.user_frame(eqn.source_info.traceback)
        place = (frame.file_name, frame.start_line, frame.start_column) if frame else caller
        if eqn.primitive.name in CALLS:
            for param in eqn.params.values():
                if isinstance(param, (jex_core.ClosedJaxpr, jex_core.Jaxpr)):
                    yield from _equations(getattr(param, "jaxpr", param), place)
            continue
        yield eqn.primitive.name, place


def _made_from(items, primitive, place):
    """Items are (label, (op name, location)); those at `place` named `primitive`, else at `place`."""
    if place is None:
        return []
    here = [(label, name) for label, (name, at) in items if at == place]
    named = [(label, name) for label, name in here if (name or "").split("/")[-1] == primitive]
    return named or here


# ---------------------------------------------------------------- StableHLO


def _stablehlo_ops(text):
    """[(op, (op name, (file, line, column)))] for every stablehlo op.

    A library's jit (jax.nn.relu) is a private function whose ops name no file: loc("max").
    Such an op is at the places of the calls that run its function, one item per place.
    """
    table = dict(re.findall(r"^#(loc\d*) = loc\((.*)\)$", text, re.MULTILINE))
    ops, blocks, owner = [], [], None  # blocks: for each open "{", the op whose region it opens
    functions, calls, function = [], {}, "main"  # calls: function -> [(calling function, place)]
    for line in text.splitlines():
        op = re.match(r'\s*(?:%[^=]*=\s*)?"?(stablehlo\.\w+)', line)
        loc = re.search(r"loc\((#loc\d*|\"[^\"]*\"(?:\(#loc\d*\))?)\)$", line.rstrip())
        if line.strip().startswith("}") and blocks:
            closing = blocks.pop()
            if closing is not None and loc:  # an op with a region carries its loc on "} loc(...)"
                ops[closing] = (ops[closing][0], _resolve(loc.group(1), table))
            if line.rstrip().endswith("{"):
                blocks.append(closing)
            continue
        if head := re.match(r"\s*func\.func \w* ?@([\w.$-]+)", line):
            function = head.group(1)
        if call := re.match(r"\s*(?:%[^=]*=\s*)?call @([\w.$-]+)", line):
            calls.setdefault(call.group(1), []).append((function, _resolve(loc.group(1), table)[1] if loc else None))
        if op:
            ops.append((op.group(1), _resolve(loc.group(1), table) if loc else (None, None)))
            functions.append(function)
            owner = None if loc else len(ops) - 1
        if line.rstrip().endswith("{"):
            blocks.append(owner)
            owner = None
    located = []
    for (op, (name, place)), function in zip(ops, functions):
        for site in [place] if place else _call_sites(calls, function, {function}):
            located.append((op, (name, site)))
    return located


def _call_sites(calls, function, seen):
    """Where `function` runs: its calls' places, or, for a call that has none, its caller's."""
    sites = []
    for caller, place in calls.get(function, []):
        if place:
            sites.append(place)
        elif caller not in seen:
            sites += _call_sites(calls, caller, seen | {caller})
    return sites or [None]


def _resolve(loc, table):
    """(outermost name, (file, line, column)) of an MLIR location."""
    if loc.startswith("#"):
        return _resolve(table.get(loc[1:], "unknown"), table)
    if m := re.match(r'"([^"]*)":(\d+):(\d+)', loc):
        return None, (m.group(1), int(m.group(2)), int(m.group(3)))
    if m := re.match(r"callsite\((\S+) at", loc):
        return None, _resolve(m.group(1), table)[1]
    if m := re.match(r'"([^"]*)"\((.*)\)$', loc):
        return m.group(1), _resolve(m.group(2), table)[1]
    if m := re.match(r'"([^"]*)"$', loc):
        return m.group(1), None
    return None, None


# ---------------------------------------------------------------- optimized HLO


def _hlo(text):
    """(instructions [(name, (op name, place))], ENTRY names, ENTRY name -> names it runs)."""
    files = dict(re.findall(r'^(\d+) "(.*)"$', text.split("FunctionNames")[0], re.MULTILINE)) \
        if "FileNames" in text else {}
    places = {n: (files.get(f), int(l), int(c)) for n, f, l, c in re.findall(
        r"^(\d+) \{file_name_id=(\d+) function_name_id=\d+ line=(\d+) end_line=\d+ column=(\d+)",
        text, re.MULTILINE)}
    frames = dict(re.findall(r"^(\d+) \{file_location_id=(\d+)", text, re.MULTILINE))
    computations, calls, entry_name, current = {}, {}, None, None
    instructions = []
    for line in text.splitlines():
        if head := re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{$", line):
            current = head.group(2)
            computations[current], calls[current] = [], set()
            entry_name = current if head.group(1) else entry_name
            continue
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = ", line)
        if current is None or m is None:
            continue
        name = m.group(1)
        meta = re.search(r'metadata=\{op_name="([^"]*)"(?: stack_frame_id=(\d+))?', line)
        place = places.get(frames.get(meta.group(2))) if meta and meta.group(2) else None
        instructions.append((name, (meta.group(1) if meta else None, place)))
        called = re.findall(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)", line)
        computations[current].append((name, called))
    contains = {}
    for name, called in computations.get(entry_name, []):
        names, todo = {name}, list(called)
        while todo:
            for inner, more in computations.get(todo.pop(), []):
                names.add(inner)
                todo.extend(more)
        contains[name] = names
    return instructions, [n for n, _ in computations.get(entry_name, [])], contains
