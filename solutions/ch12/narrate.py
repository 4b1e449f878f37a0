"""Narrate an unfamiliar dump: what a reader says first about an optimized HLO module.

Read ENTRY first: it is the program, one instruction per kernel launch or data
movement (parameters, constants, tuples, get-tuple-element and bitcasts launch
nothing). A fusion runs a fused computation (`calls=`); its kind says what it fuses
(kLoop elementwise, kInput a reduction, kOutput work into a dot's or convolution's
output, kCustom a library call) and its root is what it finally computes. The shape
before an opcode is what that instruction writes to memory, so the largest one is
the program's largest buffer. Collectives, custom calls and loops can hide in any
computation a `call`, `while` or `conditional` runs, so look for those everywhere.
"""

import json
import re

SILENT = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}
COLLECTIVES = {"all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "collective-permute",
               "collective-permute-start", "reduce-scatter", "all-to-all", "ragged-all-to-all",
               "collective-broadcast"}
BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4,
         "u32": 4, "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16}


def narrate(hlo: str) -> dict:
    """kernels, fusions, largest, collectives, custom_calls and while_loops of an HLO module."""
    computations, entry, current = {}, None, None
    for line in hlo.splitlines():
        line = re.sub(r"/\*.*?\*/", "", line)  # XLA numbers long tuples: /*index=5*/
        if head := re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{$", line):
            current = head.group(2)
            computations[current] = []
            entry = current if head.group(1) else entry
        elif line.startswith("}"):
            current = None
        elif current and (m := re.match(r"\s*(ROOT )?%?([\w.\-]+) = (.*)", line)):
            shape, opcode = re.match(r"(\([^=]*?\)|\S+) ([\w\-]+)\(", m.group(3)).groups()
            computations[current].append(dict(name=m.group(2), root=bool(m.group(1)), shape=shape,
                                              opcode=opcode, line=line))
    everything = [i for body in computations.values() for i in body]
    fusions = []
    for i in computations[entry]:
        if i["opcode"] == "fusion":
            body = computations[re.search(r"calls=%?([\w.\-]+)", i["line"]).group(1)]
            root = next((j for j in body if j["root"]), body[-1])["opcode"]
            fusions.append((i["name"], re.search(r"kind=(\w+)", i["line"]).group(1), root))
    largest, most = None, -1
    for i in computations[entry]:
        for dtype, dims in re.findall(r"([a-z]\w*)\[([\d,]*)\]", re.sub(r"\{[^{}]*\}", "", i["shape"])):
            size = BYTES.get(dtype, 4) * _product(dims)
            if size > most:
                largest, most = (i["name"], f"{dtype}[{dims}]"), size
    return dict(
        kernels=[(i["name"], i["opcode"]) for i in computations[entry] if i["opcode"] not in SILENT],
        fusions=fusions,
        largest=largest,
        collectives=[(i["name"], i["opcode"]) for i in everything if i["opcode"] in COLLECTIVES],
        custom_calls=[(i["name"], re.search(r'custom_call_target="([^"]*)"', i["line"]).group(1))
                      for i in everything if i["opcode"] == "custom-call"],
        while_loops=[(i["name"], _trip_count(i["line"])) for i in everything if i["opcode"] == "while"],
    )


def _trip_count(line):
    config = re.search(r"backend_config=(\{.*\})", line)
    if config is None:
        return None
    try:
        n = json.loads(config.group(1)).get("known_trip_count", {}).get("n")
    except json.JSONDecodeError:
        n = (re.search(r'"known_trip_count":\{"n":"(\d+)"', line) or [None, None])[1]
    return int(n) if n is not None else None


def _product(dims):
    result = 1
    for d in dims.split(","):
        if d:
            result *= int(d)
    return result
