"""Graded tests for ch15.manifest: manifest() -> dict, the capstone's claims in one table.

Complete (every field, one line per missing one), every import path resolving, the
oracle a plain JAX function (a Pallas kernel cannot be its own oracle), and the
corner cases a flash kernel's bugs hide in enumerated: blocks of unequal sizes, q and
kv of different lengths, a length shorter than a block, a long sequence.
"""

import jax
import pytest

from pytest_tpucourse.instruments import capstone
from pytest_tpucourse import checks, gating, ir
from pytest_tpucourse.checks import WrongResult


def _manifest(impl):
    return impl.manifest.manifest()


def test_manifest_is_complete(impl):
    found = _manifest(impl)
    missing = capstone.missing_fields(found)
    if missing:
        raise WrongResult("manifest() in exercises/ch15/manifest.py is incomplete:\n  "
                          + "\n  ".join(missing))


def test_manifest_imports_resolve(impl):
    """floor, ceiling and oracle import; the kernels named exist in this chapter."""
    found = _manifest(impl)
    for field in ("floor", "ceiling", "oracle"):
        if not callable(capstone.resolve(found["baselines"][field])):
            raise WrongResult(f"baselines.{field} = {found['baselines'][field]!r} is not callable")
    for field in ("forward", "attention"):
        module, _, name = found["kernel"][field].partition(":")
        getattr(getattr(impl, module), name).resolve()


def test_oracle_is_not_a_kernel(impl):
    """The oracle runs in float64 as plain JAX: no pallas_call."""
    found = _manifest(impl)
    case = capstone.cases(found)[0]
    q, k, v = case.arrays(0)
    oracle = capstone.resolve(found["baselines"]["oracle"])
    closed = jax.make_jaxpr(lambda *a: oracle(*a, **case.kwargs))(q, k, v)
    if ir.count_pallas_calls(closed):
        raise WrongResult(f"baselines.oracle = {found['baselines']['oracle']!r} runs a pallas_call: "
                          f"a kernel checked against itself proves nothing")


def test_corner_cases_are_enumerated(impl):
    cases = capstone.cases(_manifest(impl))
    wanted = {
        "blocks of unequal sizes (block_q != block_kv)": any(c.block_q != c.block_kv for c in cases),
        "q and kv of different lengths": any(c.q_len != c.kv_len for c in cases),
        "a length shorter than its block": any(min(c.q_len, c.kv_len) < max(c.block_q, c.block_kv)
                                              for c in cases),
        "a long sequence (1024 or more)": any(c.q_len >= 1024 for c in cases),
        "gradients checked in float32 and in bfloat16": {c.dtype for c in cases if c.grads}
                                                        >= {"float32", "bfloat16"},
    }
    absent = [what for what, present in wanted.items() if not present]
    if absent:
        raise WrongResult("manifest() cases do not enumerate: " + "; ".join(absent))


WRITEUP_SECTIONS = ("Derivation", "Schedule decisions and their measured consequences",
                    "The full benchmark record, with provenance")
REVIEW_SECTION = "What review changed"  # due once the submission is public (tpucourse records link)


@pytest.mark.edits("WRITEUP.md")
def test_writeup_has_the_four_sections(impl):
    """WRITEUP.md, next to the manifest: the page's four sections, each written (no TODO). The
    review section is due when its review can exist: once the upstream link is recorded."""
    _manifest(impl)
    path = impl.manifest.path.with_name("WRITEUP.md")
    if not path.is_file():
        raise WrongResult(f"{path.name} is missing next to manifest.py: the write-up is the artifact")
    text = path.read_text(encoding="utf-8")
    sections = {part.splitlines()[0].strip(): part for part in text.split("\n## ")[1:]}
    link = gating.recorded_link(5, path)  # gate 05's upstream submission
    due = WRITEUP_SECTIONS + ((REVIEW_SECTION,) if link else ())
    problems = []
    for title in due:
        body = sections.get(title)
        if body is None:
            problems.append(f"no section '## {title}'")
        elif "TODO" in body or len(body.split()) < 30:
            problems.append(f"'## {title}' is not written yet (TODO, or under 30 words)")
    if link and problems and REVIEW_SECTION in problems[-1]:
        problems[-1] += f" (due since the submission {link} was recorded)"
    if problems:
        raise WrongResult(f"{path.name}: " + "; ".join(problems))


def _complete_and_enumerated(got, _):
    """Complete, and enumerating every corner case, judged as data in the grader's process (import
    paths are the tree's to resolve: the grader imports nothing a tree names)."""
    missing = capstone.missing_fields(got)
    assert not missing, "the manifest is incomplete: " + "; ".join(missing[:4])
    cases = capstone.cases(got)
    wanted = {
        "blocks of unequal sizes": any(c.block_q != c.block_kv for c in cases),
        "q and kv of different lengths": any(c.q_len != c.kv_len for c in cases),
        "a length shorter than its block": any(min(c.q_len, c.kv_len) < max(c.block_q, c.block_kv) for c in cases),
        "a long sequence (1024 or more)": any(c.q_len >= 1024 for c in cases),
        "gradients checked in float32 and in bfloat16": {c.dtype for c in cases if c.grads} >= {"float32", "bfloat16"},
    }
    absent = [what for what, present in wanted.items() if not present]
    assert not absent, "the cases do not enumerate: " + "; ".join(absent)


def _trusted_cases(rng):
    """Checked outside the tree's process (docs/grading.md): the manifest as data; that its paths
    import and its oracle is no kernel is the tree's own process's to see. It takes no input: what
    the grader judges is the table the tree's code returns."""
    return [checks.trusted.exact("manifest", (), expected=None, compare=checks.trusted.passes(_complete_and_enumerated))]


TRUSTED = checks.trusted.Cases(_trusted_cases)
