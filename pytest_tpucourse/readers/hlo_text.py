"""Reading XLA's HLO text: computations, instructions, their source locations, dots, a summary.

XLA prints a module as computations of instructions, one per line:

    %fusion.2 = f32[8,32]{1,0} fusion(%x.1, %w.1), kind=kOutput, calls=%fused_computation.1,
        metadata={op_name="jit(f)/dot_general" stack_frame_id=5}

Optimized HLO (`.compile().as_text()`) prefixes names with `%`; the HLO of a lowered,
not yet compiled program (`.as_text(dialect="hlo")`) does not. Operands are names of
instructions of the same computation, sometimes with their shape printed before them.
Source locations sit in tables at the top of the module (jax 0.10.2 prints no
`source_line=` in metadata): StackFrames -> FileLocations -> FileNames.

This is the course's reference reader: the x-ray command and the graded tests of
chapter 12 use it; the learner writes their own.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..core.source_location import SourceLocation

# Bytes per element of HLO's element types (sub-byte types rounded up to one byte).
ELEMENT_BYTES = {
    "pred": 1, "s4": 1, "u4": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3b11fnuz": 1,
    "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
    "f32": 4, "s32": 4, "u32": 4,
    "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16,
}

# ENTRY instructions that launch no work: the summary's kernels leave them out.
NOT_KERNELS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})

# Collective opcodes as XLA prints them (an async pair is counted by its -start half).
COLLECTIVES = frozenset({
    "all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "collective-permute",
    "collective-permute-start", "reduce-scatter", "all-to-all", "ragged-all-to-all",
    "collective-broadcast",
})

_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,]*)\]")
_COMPUTATION = re.compile(r"^(?P<entry>ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*(?:\([^{]*?\))?\s*(?:->\s*.*?)?\s*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?P<root>ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<rest>.*)$")
_CALLED = re.compile(r"\b(?:calls|to_apply|body|condition|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")


@dataclass
class Instruction:
    name: str
    opcode: str
    shape: str  # the result type as printed, layout included: "f32[8,32]{1,0}", "(f32[8], s32[])"
    operands: list[str]
    attributes: str  # everything after the operand list, as printed
    computation: str
    is_root: bool = False
    op_name: str | None = None
    stack_frame_id: int | None = None

    @property
    def called(self) -> list[str]:
        """Computations this instruction runs (fusion bodies, reducers, loop bodies, branches)."""
        names = _CALLED.findall(self.attributes)
        for group in _BRANCHES.findall(self.attributes):
            names += [n.strip().lstrip("%") for n in group.split(",") if n.strip()]
        return names

    def attribute(self, key: str) -> str | None:
        """The value of `key=` in the attributes, braces and quotes kept as printed."""
        match = re.search(rf"(?:^|[\s,]){re.escape(key)}=", self.attributes)
        if match is None:
            return None
        return _balanced_value(self.attributes, match.end())

    @property
    def arrays(self) -> list[tuple[str, tuple[int, ...]]]:
        """(element type, dims) of the result, one per array (a tuple has several)."""
        return [(dtype, tuple(int(d) for d in dims.split(",") if d))
                for dtype, dims in _ARRAY.findall(_strip_layouts(self.shape))]


@dataclass
class Computation:
    name: str
    is_entry: bool
    instructions: list[Instruction] = field(default_factory=list)

    def instruction(self, name: str) -> Instruction | None:
        for instruction in self.instructions:
            if instruction.name == name:
                return instruction
        return None

    @property
    def root(self) -> Instruction | None:
        for instruction in self.instructions:
            if instruction.is_root:
                return instruction
        return self.instructions[-1] if self.instructions else None


@dataclass
class HloModule:
    name: str
    computations: list[Computation]
    file_names: dict[int, str]
    file_locations: dict[int, dict[str, int]]
    stack_frames: dict[int, dict[str, int]]

    @property
    def entry(self) -> Computation:
        for computation in self.computations:
            if computation.is_entry:
                return computation
        raise ValueError(f"HLO module {self.name} has no ENTRY computation")

    def computation(self, name: str) -> Computation | None:
        for computation in self.computations:
            if computation.name == name:
                return computation
        return None

    def instructions(self):
        for computation in self.computations:
            yield from computation.instructions

    def location(self, instruction: Instruction) -> SourceLocation | None:
        """The source range an instruction's metadata points at (its innermost user frame)."""
        frame = self.stack_frames.get(instruction.stack_frame_id) if instruction.stack_frame_id else None
        place = self.file_locations.get(frame["file_location_id"]) if frame else None
        if place is None:
            return None
        return SourceLocation(self.file_names.get(place["file_name_id"], "?"), place["line"],
                              place["column"], place["end_line"], place["end_column"])

    def contained(self, computation_name: str) -> list[Instruction]:
        """Every instruction of a computation and of the computations it runs, recursively."""
        found, seen, frontier = [], set(), [computation_name]
        while frontier:
            name = frontier.pop()
            if name in seen or self.computation(name) is None:
                continue
            seen.add(name)
            for instruction in self.computation(name).instructions:
                found.append(instruction)
                frontier.extend(instruction.called)
        return found


def parse(text: str) -> HloModule:
    """Read an HLO module printed by XLA (optimized or not, with or without `%` names)."""
    header = re.search(r"^HloModule\s+([\w.\-]+)", text, re.MULTILINE)
    module = HloModule(header.group(1) if header else "?", [], {}, {}, {})
    table, current = None, None
    for line in text.splitlines():
        stripped = re.sub(r"/\*.*?\*/", "", line).strip()  # XLA's inline /*index=5*/ notes
        if not stripped or stripped.startswith("//") or stripped.startswith("HloModule"):
            continue
        if current is None and stripped in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            table = stripped
            continue
        if current is None and table is not None and re.match(r"^\d+\s", stripped):
            _read_table_row(module, table, stripped)
            continue
        if stripped == "}":
            current = None
            continue
        heading = _COMPUTATION.match(stripped)
        if current is None and heading:
            table = None
            current = Computation(heading["name"], bool(heading["entry"]))
            module.computations.append(current)
            continue
        if current is not None:
            instruction = _parse_instruction(stripped, current.name)
            if instruction is not None:
                current.instructions.append(instruction)
    return module


def _read_table_row(module: HloModule, table: str, row: str) -> None:
    number, rest = row.split(None, 1)
    if table == "FileNames":
        module.file_names[int(number)] = json.loads(rest)
    elif table in ("FileLocations", "StackFrames"):
        fields = {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", rest)}
        (module.file_locations if table == "FileLocations" else module.stack_frames)[int(number)] = fields


def _parse_instruction(line: str, computation: str) -> Instruction | None:
    match = _INSTRUCTION.match(line)
    if match is None:
        return None
    rest = match["rest"]
    shape, after = _split_shape(rest)
    opcode_match = re.match(r"\s*([\w\-]+)\(", after)
    if opcode_match is None:
        return None
    opcode = opcode_match.group(1)
    start = opcode_match.end()
    operand_text = _balanced_value(after, start - 1)[1:-1]
    attributes = after[start - 1 + len(operand_text) + 2:].lstrip(", ")
    operands = [name for name in (_operand_name(o) for o in _split_top(operand_text)) if name]
    instruction = Instruction(match["name"], opcode, shape, operands, attributes, computation,
                              is_root=bool(match["root"]))
    metadata = instruction.attribute("metadata")
    if metadata:
        name = re.search(r'op_name="([^"]*)"', metadata)
        frame = re.search(r"stack_frame_id=(\d+)", metadata)
        instruction.op_name = name.group(1) if name else None
        instruction.stack_frame_id = int(frame.group(1)) if frame else None
    return instruction


def _split_shape(rest: str) -> tuple[str, str]:
    """'(f32[8]{0}, s32[]) tuple(...)' -> ('(f32[8]{0}, s32[])', ' tuple(...)')."""
    rest = rest.lstrip()
    if rest.startswith("("):
        value = _balanced_value(rest, 0)
        return value, rest[len(value):]
    match = re.match(r"[^\s]+", rest)
    return match.group(0), rest[match.end():]


def _operand_name(operand: str) -> str | None:
    """'f32[8]{0} %x.1' or '%x.1' or 'x.1' -> 'x.1'."""
    tokens = operand.strip().split()
    return tokens[-1].lstrip("%") if tokens else None


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets, braces and parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:])
    return parts


def without_attributes(line: str, keys) -> str:
    """An instruction's line without the attributes named in `keys` ("metadata", "backend_config"), each
    value left out whole (braces, quotes and a kernel's base64 body with them)."""
    for key in keys:
        match = re.search(rf", {re.escape(key)}=", line)
        if match:
            line = line[:match.start()] + line[match.end() + len(_balanced_value(line, match.end())):]
    return line


def _balanced_value(text: str, start: int) -> str:
    """The value starting at text[start]: a bracketed group, a quoted string, or up to the next ', '."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    if start < len(text) and text[start] in pairs:
        depth, quoted = 0, False
        for i in range(start, len(text)):
            char = text[i]
            if char == '"' and text[i - 1] != "\\":
                quoted = not quoted
            if quoted:
                continue
            if char in pairs:
                depth += 1
            elif char in pairs.values():
                depth -= 1
                if depth == 0:
                    return text[start:i + 1]
        return text[start:]
    if start < len(text) and text[start] == '"':
        end = text.index('"', start + 1)
        return text[start:end + 1]
    match = re.match(r"[^,\s]*", text[start:])
    return match.group(0)


def _strip_layouts(shape: str) -> str:
    return re.sub(r"\{[^{}]*\}", "", shape)


def array_text(dtype: str, dims: tuple[int, ...]) -> str:
    return f"{dtype}[{','.join(map(str, dims))}]"


def nbytes(dtype: str, dims: tuple[int, ...]) -> int:
    return ELEMENT_BYTES.get(dtype, 4) * math.prod(dims)


# ---------------------------------------------------------------- dots


def operand_shapes(module: HloModule, instruction: Instruction) -> list[tuple[int, ...]]:
    """Each operand's dims: printed inline before the operand, or read off its definition."""
    computation = module.computation(instruction.computation)
    shapes = []
    for name in instruction.operands:
        defined = computation.instruction(name) if computation else None
        shapes.append(defined.arrays[0][1] if defined is not None and defined.arrays else ())
    return shapes


def dot_numbers(module: HloModule, instruction: Instruction) -> dict:
    """A dot, or a convolution that is a dot (the TPU's form), as dot_general dimension numbers.

    convolution: `dim_labels=<lhs>_<rhs>-><out>`. lhs: b is a free dimension, f the
    contracted one; rhs: i is contracted, o free; a digit is a spatial dimension, which
    in a dot-as-convolution is a batch dimension paired by its digit (the window's
    size, stride and lhs_dilate make output position p meet only lhs p and rhs p).
    Returns lhs_batch, rhs_batch, lhs_contracting, rhs_contracting, the three shapes, and
    out_labels: for each output dimension, ("batch", k), ("lhs", k) or ("rhs", k), the
    k-th batch pair or free dimension of that side in operand order.
    """
    lhs_shape, rhs_shape = operand_shapes(module, instruction)[:2]
    out_shape = instruction.arrays[0][1]
    if instruction.opcode == "dot":
        numbers = {key: _int_set(instruction.attribute(f"{key}_dims"))
                   for key in ("lhs_batch", "rhs_batch", "lhs_contracting", "rhs_contracting")}
        lhs_free = [d for d in range(len(lhs_shape))
                    if d not in numbers["lhs_batch"] + numbers["lhs_contracting"]]
        rhs_free = [d for d in range(len(rhs_shape))
                    if d not in numbers["rhs_batch"] + numbers["rhs_contracting"]]
        out_labels = ([("batch", k) for k in range(len(numbers["lhs_batch"]))]
                      + [("lhs", k) for k in range(len(lhs_free))] + [("rhs", k) for k in range(len(rhs_free))])
    elif instruction.opcode == "convolution":
        lhs_l, rhs_l, out_l = re.match(r"([^_]+)_([^-]+)->(.+)", instruction.attribute("dim_labels")).groups()
        digits = sorted(c for c in lhs_l if c.isdigit())
        numbers = dict(lhs_batch=tuple(lhs_l.index(d) for d in digits),
                       rhs_batch=tuple(rhs_l.index(d) for d in digits),
                       lhs_contracting=(lhs_l.index("f"),), rhs_contracting=(rhs_l.index("i"),))
        out_labels = [("batch", digits.index(c)) if c.isdigit() else ("lhs" if c == "b" else "rhs", 0)
                      for c in out_l]
    else:
        raise ValueError(f"{instruction.name} is a {instruction.opcode}, not a dot or a convolution")
    return dict(name=instruction.name, opcode=instruction.opcode, lhs_shape=tuple(lhs_shape),
                rhs_shape=tuple(rhs_shape), out_shape=tuple(out_shape), out_labels=out_labels, **numbers)


def dots(module: HloModule) -> list[Instruction]:
    """Every dot and convolution instruction, in text order."""
    return [i for i in module.instructions() if i.opcode in ("dot", "convolution")]


def _int_set(value: str | None) -> tuple[int, ...]:
    if not value:
        return ()
    return tuple(int(v) for v in value.strip("{}").split(",") if v.strip())


def convolution_window(instruction: Instruction) -> dict[str, tuple[int, ...]]:
    """`window={size=4 stride=3 lhs_dilate=4}` -> {"size": (4,), "stride": (3,), "lhs_dilate": (4,)}."""
    window = instruction.attribute("window")
    if not window:
        return {}
    return {key: tuple(int(v) for v in value.split("x"))
            for key, value in re.findall(r"(\w+)=([\dx]+)", window.strip("{}"))}


# ---------------------------------------------------------------- summary


def while_trip_count(instruction: Instruction) -> int | None:
    """The trip count XLA proved for a while loop (backend_config known_trip_count), if any."""
    config = instruction.attribute("backend_config")
    match = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', config or "")
    return int(match.group(1)) if match else None


def summary(module: HloModule) -> dict:
    """What a reader says first about a dump (chapter 12's narrate contract).

    kernels       (name, opcode) of every ENTRY instruction that launches work, in order
    fusions       (name, kind, opcode of the fused computation's root) per ENTRY fusion
    largest       (name, array) of the ENTRY instruction writing the largest array
    collectives   (name, opcode) of every collective, anywhere in the module
    custom_calls  (name, custom_call_target), anywhere (tpu_custom_call: a Pallas kernel)
    while_loops   (name, trip count or None), anywhere
    """
    entry = module.entry
    kernels = [(i.name, i.opcode) for i in entry.instructions if i.opcode not in NOT_KERNELS]
    fusions = []
    for i in entry.instructions:
        if i.opcode == "fusion":
            body = module.computation(i.called[0]) if i.called else None
            root = body.root.opcode if body is not None and body.root is not None else None
            fusions.append((i.name, i.attribute("kind"), root))
    largest, best = None, -1
    for i in entry.instructions:
        for dtype, dims in i.arrays:
            if nbytes(dtype, dims) > best:
                largest, best = (i.name, array_text(dtype, dims)), nbytes(dtype, dims)
    everywhere = list(module.instructions())
    return dict(
        kernels=kernels,
        fusions=fusions,
        largest=largest,
        collectives=[(i.name, i.opcode) for i in everywhere if i.opcode in COLLECTIVES],
        custom_calls=[(i.name, (i.attribute("custom_call_target") or "").strip('"'))
                      for i in everywhere if i.opcode == "custom-call"],
        while_loops=[(i.name, while_trip_count(i)) for i in everywhere if i.opcode == "while"],
    )


def largest_arrays(module: HloModule) -> list[tuple[str, str]]:
    """Every (name, array) of ENTRY writing an array of the largest size: summary's `largest`
    is the first; a reader that breaks the tie another way names another."""
    arrays = [(i.name, dtype, dims) for i in module.entry.instructions for dtype, dims in i.arrays]
    best = max((nbytes(dtype, dims) for _, dtype, dims in arrays), default=None)
    return list(dict.fromkeys((name, array_text(dtype, dims)) for name, dtype, dims in arrays
                              if nbytes(dtype, dims) == best))


# ---------------------------------------------------------------- shipped dumps


@dataclass(frozen=True)
class Dump:
    """A dump shipped with the course: its text and the header line saying who compiled it."""

    path: Path
    text: str
    header: str  # "compiled by ... on ... for ..." (the file's first line, without '// ')


def read_dump(path: Path, course_root: Path) -> Dump:
    """Read a dump whose file names are relative to the course root, and make them absolute.

    Dumps are captured with the course checkout's paths; they ship with paths relative to
    the course root, so their source locations match the programs in this checkout.
    """
    raw = Path(path).read_text(encoding="utf-8")
    first = raw.splitlines()[0] if raw else ""
    header = first[2:].strip() if first.startswith("//") else ""
    lines, table = [], None
    for line in raw.splitlines():
        if line.strip() in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            table = line.strip()
        elif not line.strip():
            table = None
        elif table == "FileNames":
            number, name = line.split(None, 1)
            if not json.loads(name).startswith("/"):
                line = f"{number} {json.dumps(str(Path(course_root) / json.loads(name)))}"
        lines.append(line)
    return Dump(Path(path), "\n".join(lines) + "\n", header)
