"""Per-op device time: what each op the device ran inside a timed call is, and what that says.

A timing's breakdown (timer.Timing.ops) lists the ops of the device's trace ("XLA Ops": the
kernel's custom call, XLA's fusions, copies, the prefetches of a cross-program prefetch) with
their median device seconds per call. An op is named as its instruction in the compiled
program: XLA:TPU names a Pallas kernel's custom call after the kernel (`my_kernel.1 = ...
custom-call(...), custom_call_target="tpu_custom_call"`), so its kind is read off the
program's optimized HLO where the caller has it (`hlo_kinds`), and off the name and the
trace's category otherwise. A row carries the breakdown (`as_row`).

A function a gate declares as "one custom call" (JAX's Pallas kernels called as model code
calls them) must time as one: a convert or multiply fusion around the call (a cast of q to
f32 and its scaling, the output cast back), or a copy, is a pass its model-code form would
not run, and the time is not the kernel's (`beside_one_custom_call`). Where no op of the trace
is recognisably a custom call, nothing is said about it: a name this module does not know is
never taken for a wrapper.
"""

from __future__ import annotations

import re

CUSTOM_CALL, FUSION, COPY, PREFETCH, COLLECTIVE, OTHER = (
    "custom-call", "fusion", "copy", "prefetch", "collective", "other")
_COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute", "all-to-all", "send", "recv")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*.*?\s(?P<opcode>[a-z][\w\-]*)\(")


def hlo_kinds(hlo_text: str) -> dict[str, str]:
    """{instruction name: kind} of a compiled program's optimized HLO text, for every instruction
    the device could run as an op (its fused computations' inner instructions included, harmlessly)."""
    kinds = {}
    for line in hlo_text.splitlines():
        found = _INSTRUCTION.match(line)
        if found and found["opcode"] != "parameter":  # a program's inputs, named after the kernel's refs on JAX 0.12
            kinds[found["name"]] = _opcode_kind(found["opcode"], found["name"])
    return kinds


def _opcode_kind(opcode: str, name: str) -> str:
    if opcode == "custom-call":
        return CUSTOM_CALL
    if opcode in ("copy-start", "copy-done"):
        return PREFETCH
    if opcode == "copy":
        return COPY
    if opcode == "fusion":
        return FUSION
    if opcode.startswith(_COLLECTIVES):
        return COLLECTIVE
    return kind(name)


def kind(name: str, category: str = "", known: dict | None = None) -> str:
    """What an op of the trace is: from the compiled program's instructions where given (`known`,
    hlo_kinds: the name itself, or the same name with another numeric suffix), else from its name
    (custom-call.3, fusion.12, copy-start.1) and the category the trace gives it, where any."""
    name = name.lstrip("%")  # a trace that names an op as the HLO text prints it
    if known:
        if name in known:
            return known[name]
        base = _base(name)
        same = {k for n, k in known.items() if _base(n) == base}
        if len(same) == 1:
            return same.pop()
    text, category = name.lower(), category.lower()
    if "custom" in category or "custom-call" in text or "custom_call" in text:
        return CUSTOM_CALL
    if text.startswith(("copy-start", "copy-done")) or "prefetch" in text:
        return PREFETCH  # an asynchronous copy: XLA's cross-program prefetch into VMEM is one
    if text.startswith(_COLLECTIVES) or "collective" in category:
        return COLLECTIVE
    if text.startswith("copy") or "data formatting" in category:
        return COPY
    if "fusion" in text or "fusion" in category:
        return FUSION
    return OTHER


def _base(name: str) -> str:
    """An instruction name without its numeric suffix: my_kernel.1 -> my_kernel."""
    return re.sub(r"\.\d+$", "", name)


def as_row(ops, known: dict | None = None) -> tuple[dict, ...] | None:
    """A Timing's breakdown (OpTime: name, category, seconds) as a row keeps it, longest first, each
    op's kind read off the compiled program where `known` (hlo_kinds) is given; None where the trace
    had no op line."""
    if not ops:
        return None
    return tuple({"op": op.name, "kind": kind(op.name, op.category, known), "seconds": float(op.seconds)}
                 for op in sorted(ops, key=lambda op: -op.seconds))


def describe(ops, limit: int = 6) -> str:
    """The longest ops of a row's breakdown, in words: "custom-call.1 700.1 us, fusion.2 30.0 us"."""
    if not ops:
        return ""
    shown = [f"{op['op']} ({op['kind']}) {op['seconds'] * 1e6:.1f} us" for op in ops[:limit]]
    more = len(ops) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def beside_one_custom_call(ops) -> str | None:
    """Why a function declared as one custom call did not time as one (the other ops, by name and
    time), or None: it did, or the trace cannot tell (no breakdown, no op recognisably a custom call)."""
    if not ops:
        return None
    calls = [op for op in ops if op["kind"] == CUSTOM_CALL]
    if not calls:
        return None
    others = [op for op in ops if op["kind"] != CUSTOM_CALL]
    if len(calls) == 1 and not others:
        return None
    names = ", ".join(f"{op['op']} ({op['kind']}, {op['seconds'] * 1e6:.1f} us)" for op in others + calls[1:])
    return (f"declared as one custom call, it timed {len(calls)} custom call{'s' if len(calls) > 1 else ''} "
            f"and passes its model-code form would not run: {names}")


def cross_program_prefetch(hlo_text: str) -> bool:
    """Whether a compiled program (its optimized HLO text) starts with a cross-program prefetch:
    an operand copied into VMEM before the program's body, which a later call with the same
    operand finds there."""
    return "cross_program_prefetch" in hlo_text


def instruction_name(op_name: str) -> str:
    """The instruction an op of the trace is: "copy.1" of "copy.1" or of "%copy.1 = bf16[...] copy(...)"
    (a trace may name an op by its whole instruction text)."""
    return op_name.split("=", 1)[0].strip().removeprefix("ROOT ").strip().lstrip("%")


_KERNEL_IN_VMEM = re.compile(r"^\s*(?:ROOT\s+)?%(?P<name>[\w.\-]+)\s*=\s*\S+S\(1\)\}?\s+custom-call\(.*"
                             r"custom_call_target=\"tpu_custom_call\"")
_COPY_OF = re.compile(r"^\s*(?:ROOT\s+)?%(?P<name>[\w.\-]+)\s*=\s*\S+\s+copy\((?:\S+\s+)?%(?P<operand>[\w.\-]+)\)")


def result_copies(hlo_text: str | None) -> set[str]:
    """The copies a compiled program (its optimized HLO) makes of a Pallas kernel's result out of
    VMEM because the program returns that result.

    XLA:TPU places the result of a kernel that communicates (a collective_id) in VMEM, memory space
    S(1); a program that returns it copies it to HBM first, while an op of the same program that
    consumes it reads it where it is, with no copy (tests/facts/test_ch14.py reads both off the
    compiler). The copy is the program boundary's, not the kernel's schedule: model code, which
    consumes the result, does not run it."""
    if not hlo_text:
        return set()
    entry = hlo_text[hlo_text.find("\nENTRY"):] if "\nENTRY" in hlo_text else hlo_text
    lines = entry.splitlines()
    in_vmem = {found["name"] for line in lines if (found := _KERNEL_IN_VMEM.match(line))}
    root = next((line for line in lines if line.lstrip().startswith("ROOT ")), "")
    head, _, operands = root.partition("=")
    returned = (set(re.findall(r"%([\w.\-]+)", operands)) if re.search(r"\stuple\(", operands)  # a tuple's parts
                else {instruction_name(head)})
    return {found["name"] for line in lines
            if (found := _COPY_OF.match(line)) and found["operand"] in in_vmem and found["name"] in returned}
