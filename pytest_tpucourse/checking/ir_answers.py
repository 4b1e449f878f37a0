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


def assert_rows_are_rows(fn, got, *, program: str) -> None:
    """A list of dicts with the x-ray's keys, stablehlo and hlo lists of names."""
    where = f"{fn.display} on {program}"
    if not isinstance(got, list) or not all(isinstance(row, dict) for row in got):
        raise WrongResult(f"{where} should return a list of dicts, one per equation; got {_kind(got)}")
    for index, row in enumerate(got):
        missing = [key for key in ROW_KEYS if key not in row]
        if missing or not all(isinstance(row[k], (list, tuple)) for k in ("stablehlo", "hlo")):
            raise WrongResult(f"{where}: row {index} should have keys {', '.join(ROW_KEYS)} (stablehlo and "
                              f"hlo lists of names); it has {sorted(row)}")


def assert_rows_match(fn, got, want: list[dict], *, program: str) -> None:
    """The learner's x-ray rows must equal the course linker's, row by row, field by field."""
    where = f"{fn.display} on {program}"
    assert_rows_are_rows(fn, got, program=program)
    if len(got) != len(want):
        expected = ", ".join(f"{r['primitive']}@{r['line']}" for r in want[:12])
        raise WrongResult(f"{where} returned {len(got)} rows; the program executes {len(want)} "
                          f"equations (calls flattened): {expected}{' ...' if len(want) > 12 else ''}")
    for index, (row, expected) in enumerate(zip(got, want)):
        wrong = {}
        for key, value in expected.items():
            mine = row.get(key, "<missing>")
            if key in ("stablehlo", "hlo") and isinstance(mine, (list, tuple)):
                mine = list(mine)
            if mine != value:
                wrong[key] = (mine, value)
        if wrong:
            lines = "\n".join(f"    {key}: got {mine!r}, expected {value!r}" for key, (mine, value) in wrong.items())
            raise WrongResult(f"{where}: row {index} ({expected['primitive']} at line {expected['line']}) "
                              f"differs:\n{lines}")


def assert_summary_matches(fn, got, want: dict, *, dump: str) -> None:
    """The learner's narration must equal the course reader's summary, key by key."""
    where = f"{fn.display} on {dump}"
    if not isinstance(got, dict):
        raise WrongResult(f"{where} should return a dict with keys {sorted(want)}; got {type(got).__name__}")
    for key, value in want.items():
        mine = got.get(key, "<missing>")
        normal = _as_tuples(mine)
        if normal != _as_tuples(value):
            raise WrongResult(f"{where}: {key!r} is wrong.\n    got      {_short(mine)}\n    expected {_short(value)}")


def assert_dots_match(fn, got, want: list[dict], *, dump: str,
                      keys=("name", "lhs_shape", "rhs_shape", "out_shape", "lhs_batch", "rhs_batch",
                            "lhs_contracting", "rhs_contracting")) -> None:
    """The learner's decoded dots must name the same instructions, shapes and dimension numbers."""
    where = f"{fn.display} on {dump}"
    if not isinstance(got, list) or not all(isinstance(d, dict) for d in got):
        raise WrongResult(f"{where} should return a list of dicts, one per dot or convolution; got {_kind(got)}")
    if len(got) != len(want):
        raise WrongResult(f"{where} found {len(got)} dots; the module has {len(want)}: "
                          f"{', '.join(d['name'] for d in want)}")
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
