"""Read a Pallas kernel's Mosaic module: what the compiler receives, before it lays anything out.

The kernel is one `func.func` whose signature lists, in order, one i32 per grid
axis (the program ids), the scalar-prefetch refs, one window per operand
(inputs, then outputs) and the scratch refs; its attributes carry the grid
(`iteration_bounds`), the `dimension_semantics`, the `scalar_prefetch` and
`scratch_operands` counts and a `window_params` entry per operand (the block
shape as `window_bounds`, or `{}` for an operand left in place, `pl.ANY`). The
other functions of the module (`@transform_N`) are the index maps.

Reading is positional: the scratch refs are the *last* `scratch_operands`
arguments, and a squeezed (`None`) block dimension is still there, as 1.
"""

import re
from collections import Counter

_FUNC = re.compile(r"^\s*func\.func @(\w+)\((.*)\)(?: -> [^{]*)?(?: attributes \{(.*)\})? \{$")
# `%5 = arith.addf ...`, `%6:2 = scf.for ...`, `tpu.vector_store ...`, and the generic form of an
# op without a custom syntax, `"tpu.trace_start"() <{...}>`.
_OP = re.compile(r"^\s*(?:%[\w#:]+(?:, %[\w#:]+)* = )?\"?([a-z_]\w*(?:\.\w+)+)\b")


def read_kernel(text: str) -> dict:
    """The kernel function of a Mosaic module's text, as a dict (see the stub for the keys)."""
    lines = text.splitlines()
    kernel = None
    for index, line in enumerate(lines):
        match = _FUNC.match(line)
        if match and match.group(3) and ("window_params" in match.group(3) or "iteration_bounds" in match.group(3)):
            kernel = index, match
            break
    if kernel is None:
        raise ValueError("no kernel function (func.func with window_params or iteration_bounds) in the text")
    start, match = kernel
    name, arguments, attributes = match.group(1), _split_top(match.group(2)), match.group(3)

    grid = _ints(re.search(r"iteration_bounds = array<i64(?:: ([\d, ]*))?>", attributes).group(1))
    semantics = tuple(re.findall(r"#tpu\.dimension_semantics<(\w+)>", attributes))
    prefetch = int(re.search(r"scalar_prefetch = (\d+)", attributes).group(1))
    scratch_count = int(re.search(r"scratch_operands = (\d+)", attributes).group(1))
    params = re.search(r"window_params = \[(.*)\]", attributes)
    windows = tuple(
        _ints(bounds.group(1)) if (bounds := re.search(r"window_bounds = array<i64: ([\d, ]+)>", entry)) else None
        for entry in re.findall(r"\{([^{}]*)\}", params.group(1) if params else ""))

    types = [argument.split(":", 1)[1].strip() for argument in arguments]
    scratch = tuple(_memref(t) for t in types[len(types) - scratch_count:]) if scratch_count else ()

    counts = Counter()
    for line in lines[start + 1:]:
        if line.startswith("  }"):  # the kernel function's closing brace
            break
        op = _OP.match(line)
        if op:
            counts[op.group(1)] += 1
    return {
        "name": name,
        "grid": grid,
        "dimension_semantics": semantics,
        "windows": windows,
        "scalar_prefetch": prefetch,
        "scratch": scratch,
        "op_counts": dict(counts),
    }


def _split_top(text: str) -> list[str]:
    """Split at the commas that are not inside <...>, (...) or [...]."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char in "<([":
            depth += 1
        elif char in ">)]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    return parts + ([current.strip()] if current.strip() else [])


def _ints(text: str | None) -> tuple:
    return tuple(int(part) for part in (text or "").split(",") if part.strip())


def _memref(type_text: str) -> tuple:
    """memref<2x128xf32, #tpu.memory_space<vmem>> -> ((2, 128), "f32", "vmem")."""
    body = type_text[len("memref<"):-1]
    shaped = _split_top(body)[0]
    head, bang, semaphore = shaped.partition("!")
    if bang:  # a semaphore type, `2x!tpu.dma_semaphore`: its name holds no "x" to split at
        dims, element = [d for d in head.split("x") if d], "!" + semaphore
    else:
        *dims, element = shaped.split("x")
    space = re.search(r"#tpu\.memory_space<(\w+)>", body)
    return tuple(int(d) for d in dims), element, space.group(1) if space else None
