"""Checks for code that reads IR: rows, summaries and decoded dots against the course's reader.

Chapter 12's learner writes an x-ray, a dot decoder and a narrator; the graded tests
and gate 02 judge them against what ir_xray.py and hlo_text.py read from the same text,
and against what the test knows from the program it built. A mismatch is a WrongResult
naming the function, the first entry that differs, and what was expected.
"""

from __future__ import annotations

from ..core.outcomes import WrongResult

MAX_SHOWN = 6


ROW_KEYS = ("primitive", "file", "line", "stablehlo", "hlo")
DOT_KEYS = ("name", "lhs_shape", "rhs_shape", "out_shape", "lhs_batch", "rhs_batch", "lhs_contracting",
            "rhs_contracting", "einsum")


def keys_differ(got: dict, keys) -> str:
    """'' when `got` has exactly `keys`; else which it misses and which it has beyond them, by name."""
    missing = [key for key in keys if key not in got]
    extra = [key for key in got if key not in keys]
    said = ([f"misses {_keys(missing)}"] if missing else []) + ([f"has {_keys(extra)}, not one of them"]
                                                                  if extra else [])
    return " and ".join(said)


def _keys(names) -> str:
    return f"the key{'s' if len(names) > 1 else ''} {', '.join(map(repr, names))}"


def assert_rows_are_rows(fn, got, *, program: str) -> None:
    """A list of dicts with exactly the x-ray's keys, stablehlo and hlo lists of names."""
    where = f"{fn.display} on {program}"
    if not isinstance(got, list) or not all(isinstance(row, dict) for row in got):
        raise WrongResult(f"{where} should return a list of dicts, one per equation; got {_kind(got)}")
    for index, row in enumerate(got):
        differ = keys_differ(row, ROW_KEYS)
        if differ or not all(isinstance(row[k], (list, tuple)) for k in ("stablehlo", "hlo")):
            raise WrongResult(f"{where}: row {index} should have exactly the keys {', '.join(map(repr, ROW_KEYS))} "
                              f"(stablehlo and hlo lists of names); it "
                              f"{differ or 'has ' + ', '.join(f'{k} {type(row[k]).__name__}' for k in ('stablehlo', 'hlo'))}")


def assert_rows_match(fn, got, want: list[dict], *, program: str, listing: str = "") -> None:
    """The learner's x-ray rows against the course linker's (ir_xray.xray_bounds).

    Row by row, the equation (primitive, file, line) must be the linker's. Its StableHLO ops
    and ENTRY instructions are compared as sets, in any order: a row must name every one the
    linker made from the equation, and may name others only if they are at the equation's
    location (`stablehlo_here`, `hlo_here`; without them, exactly the linker's). `listing`
    (the program's numbered source) ends the message.
    """
    where = f"{fn.display} on {program}"
    tail = f"\n  the program:\n{listing}" if listing else ""
    assert_rows_are_rows(fn, got, program=program)
    if len(got) != len(want):
        expected = ", ".join(f"{r['primitive']}@{r['line']}" for r in want[:12])
        raise WrongResult(f"{where} returned {len(got)} rows; the program executes {len(want)} "
                          f"equations (calls flattened): {expected}{' ...' if len(want) > 12 else ''}{tail}")
    for index, (row, expected) in enumerate(zip(got, want)):
        wrong = [f"    {key}: got {row.get(key, '<missing>')!r}, expected {expected[key]!r}"
                 for key in ("primitive", "file", "line") if row.get(key, "<missing>") != expected[key]]
        for key in ("stablehlo", "hlo"):
            mine = list(dict.fromkeys(row[key]))
            allowed = expected.get(f"{key}_here", expected[key])
            missing = [name for name in expected[key] if name not in mine]
            foreign = [name for name in mine if name not in allowed and name not in expected[key]]
            if missing:
                wrong.append(f"    {key}: misses {missing}, made from this equation (got {mine!r})")
            inner = [name for name in foreign if key == "hlo" and expected.get("entry") and name not in expected["entry"]]
            if inner:
                wrong.append(f"    hlo: names {inner}, not ENTRY instructions: report the fusion, call or while "
                             f"of ENTRY that runs them (got {mine!r}, expected {expected[key]!r})")
            foreign = [name for name in foreign if name not in inner]
            if foreign:
                place = expected.get("place") or f"line {expected['line']}"
                wrong.append(f"    {key}: names {foreign}, which nothing at {place} made (got {mine!r}, "
                             f"expected {expected[key]!r})")
        if wrong:
            lines = "\n".join(wrong)
            raise WrongResult(f"{where}: row {index} ({expected['primitive']} at line {expected['line']}) "
                              f"differs:\n{lines}{tail}")


def numbered(source: str, indent: str = "      ") -> str:
    """Source text with its line numbers, as the messages cite them."""
    lines = source.splitlines()
    width = len(str(len(lines)))
    return "\n".join(f"{indent}{n:>{width}} | {text}".rstrip() for n, text in enumerate(lines, 1))


def assert_summary_matches(fn, got, want: dict, *, dump: str, ties=()) -> None:
    """The learner's narration against the course reader's summary, key by key: exactly its keys
    (one missing, or one more, is named), each value equal.

    Lists are compared as collections, in any order (a reader may walk computations in
    another order). `largest` may be any of `ties`: the (name, array) pairs of ENTRY
    instructions writing an array of the largest size (hlo_text.largest_arrays).
    """
    where = f"{fn.display} on {dump}"
    if not isinstance(got, dict):
        raise WrongResult(f"{where} should return a dict with keys {sorted(want)}; got {type(got).__name__}")
    differ = keys_differ(got, tuple(want))
    if differ:
        raise WrongResult(f"{where} should answer with exactly the course reader's keys, "
                          f"{', '.join(map(repr, want))}; it {differ}")
    for key, value in want.items():
        mine = got.get(key, "<missing>")
        if key == "largest":
            accepted = {_as_tuples(value)} | {_as_tuples(tie) for tie in ties}
            right = _as_tuples(mine) in accepted
        elif isinstance(value, (list, tuple)) and isinstance(mine, (list, tuple)):
            right = sorted(map(repr, _as_tuples(mine))) == sorted(map(repr, _as_tuples(value)))
        else:
            right = _as_tuples(mine) == _as_tuples(value)
        if not right:
            also = f" (or {', '.join(map(repr, [t for t in ties if _as_tuples(t) != _as_tuples(value)]))})" \
                if key == "largest" and len(ties) > 1 else ""
            raise WrongResult(f"{where}: {key!r} is wrong.\n    got      {_short(mine)}\n    expected "
                              f"{_short(value)}{also}{'' if key == 'largest' else ', in any order'}")


def assert_dots_match(fn, got, want: list[dict], *, dump: str,
                      keys=("name", "lhs_shape", "rhs_shape", "out_shape", "lhs_batch", "rhs_batch",
                            "lhs_contracting", "rhs_contracting")) -> None:
    """The learner's decoded dots must have exactly the contract's keys (DOT_KEYS) and name the same
    instructions, shapes and dimension numbers (`keys`; the einsum is run, not compared)."""
    where = f"{fn.display} on {dump}"
    if not isinstance(got, list) or not all(isinstance(d, dict) for d in got):
        raise WrongResult(f"{where} should return a list of dicts, one per dot or convolution; got {_kind(got)}")
    if len(got) != len(want):
        raise WrongResult(f"{where} found {len(got)} dots; the module has {len(want)}: "
                          f"{', '.join(d['name'] for d in want)}")
    for index, mine in enumerate(got):
        differ = keys_differ(mine, DOT_KEYS)
        if differ:
            raise WrongResult(f"{where}: dot {index} ({mine.get('name', want[index]['name'])!r}) should have "
                              f"exactly the keys {', '.join(map(repr, DOT_KEYS))}; it {differ}")
    for mine, expected in zip(got, want):
        wrong = {k: (_as_tuples(mine.get(k, "<missing>")), expected[k]) for k in keys
                 if _as_tuples(mine.get(k, "<missing>")) != _as_tuples(expected[k])}
        if wrong:
            lines = "\n".join(f"    {k}: got {a!r}, expected {b!r}" for k, (a, b) in wrong.items())
            raise WrongResult(f"{where}: {expected['name']} is misread:\n{lines}")


def _kind(value) -> str:
    """'list of tuple', 'dict', 'NoneType' ..."""
    if isinstance(value, (list, tuple)) and value:
        return f"a {type(value).__name__} of {type(value[0]).__name__}"
    return type(value).__name__


def _as_tuples(value):
    if isinstance(value, (list, tuple)):
        return tuple(_as_tuples(v) for v in value)
    return value


def _short(value) -> str:
    if isinstance(value, (list, tuple)) and len(value) > MAX_SHOWN:
        return repr(list(value[:MAX_SHOWN]))[:-1] + f", ... ({len(value)} in all)]"
    return repr(value)
