"""The text a new chapter starts from: each file or entry the scaffold writes, as a function of the chapter.

Every exercise starts as one placeholder op, 2·x block by block as a Pallas kernel, so that the
new chapter's own checks mean something from the first commit: the stub is TODO, the solution
passes its graded tests, and the shipped mutant (the factor dropped) fails them. The author
replaces the op, and every "TODO(author)" marks what only a person writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..chips import DEFAULT_CHIP

# docs/authoring.md section 3: a chapter README's sections, in order ("Gate NN" for a stage only).
README_SECTIONS = ("What this chapter is", "The ideas", "How your kernels run here", "The exercises",
                   "Running the tests", "Common mistakes and what the grader says", "Gate NN", "Further reading")
PLACEHOLDER_LINE = "o_ref[...] = x_ref[...] * 2"  # the solution's one line each shipped mutant edits
GATE_SHAPE = (512, 1024)  # the correctness slot's operand: a few blocks at the solution's default


@dataclass(frozen=True)
class NewChapter:
    """The chapter to write: its id (chNN), title, exercises in order, and its stage and gate if it has one."""

    id: str
    title: str
    exercises: tuple[str, ...]
    summary: str
    stage: int | None = None
    gate: int | None = None

    @property
    def number(self) -> int:
        return int(self.id[2:])

    @property
    def kind(self) -> str:
        return "stage" if self.gate is not None else "layer"


def quoted(text: str) -> str:
    """A string literal both Python and TOML read back as `text`."""
    return json.dumps(text, ensure_ascii=False)


def mutant_name(exercise: str) -> str:
    return f"{exercise}_drops_the_factor"


def course_entry(chapter: NewChapter) -> str:
    """The chapter's [[chapters]] table and its [[chapters.exercises]], for the end of course.toml."""
    lines = ["", "[[chapters]]", f'id = "{chapter.id}"', f"title = {quoted(chapter.title)}", f'kind = "{chapter.kind}"']
    if chapter.gate is not None:
        lines += [f"stage = {chapter.stage}", f"gate = {chapter.gate}"]
    lines.append(f"summary = {quoted(chapter.summary)}")
    for name in chapter.exercises:
        lines += ["", "[[chapters.exercises]]", f'name = "{name}"', f'function = "{name}"',
                  f'summary = "TODO(author): {name}() in one line: the contract the graded tests hold it to."',
                  "hints = [",
                  '    "TODO(author): a nudge, shown in the TODO report.",',
                  '    "TODO(author): more specific.",',
                  '    "TODO(author): nearly the answer.",',
                  "]"]
    return "\n".join(lines) + "\n"


def stub(chapter: NewChapter, name: str) -> str:
    return f'''"""Exercise {chapter.id}.{name}. TODO(author): what the learner writes, in a line.

Write {name}(x, *, block_shape) as a Pallas kernel. The chapter README explains the ideas;
`pytest exercises/{chapter.id}/test_{name}.py` grades this file.
"""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def {name}(x: jax.Array, *, block_shape: tuple[int, int] = (256, 512)) -> jax.Array:
    """2·x for a 2-D array, computed block by block (the scaffold's placeholder: TODO(author)).

    Shapes need not be multiples of block_shape (the last blocks may be partial), and an array
    smaller than a block is a single block.
    """
    raise NotImplementedError("write {name}(): a grid of (bm, bn) blocks, o_ref[...] = x_ref[...] * 2")
'''


def solution(chapter: NewChapter, name: str) -> str:
    return f'''"""{chapter.title}: {name}. TODO(author): the schedule: why this grid, what stays resident,
which axis is "arbitrary" and why.

The scaffold's placeholder op, 2·x: a 2-D grid of (bm, bn) blocks, one BlockSpec for the
operand and the output, the last blocks partial where the shape is ragged.
"""

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def _kernel(x_ref, o_ref):
    {PLACEHOLDER_LINE}


def {name}(x: jax.Array, *, block_shape: tuple[int, int] = (256, 512)) -> jax.Array:
    """2·x for a 2-D array, computed block by block."""
    if x.ndim != 2:
        raise ValueError(f"{name} expects a 2-D array, got shape {{x.shape}}")
    m, n = x.shape
    # A block as large as the whole dimension is always legal, whatever its size.
    bm, bn = min(block_shape[0], m), min(block_shape[1], n)
    spec = pl.BlockSpec((bm, bn), lambda i, j: (i, j))
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(pl.cdiv(m, bm), pl.cdiv(n, bn)),
        in_specs=[spec],
        out_specs=spec,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")),
    )(x)
'''


_REFERENCE = '''# The placeholder op's float64 oracle and XLA floor. An op only this chapter grades defines its
# Reference here; ops several chapters grade live in pytest_tpucourse/references.py.
DOUBLE = references.Reference("double", lambda x: 2 * x, lambda x: 2 * x)'''


def graded_test(chapter: NewChapter, name: str) -> str:
    return f'''"""Graded tests for {chapter.id}.{name}: {name}(x, *, block_shape). TODO(author): the contract's
corner cases as explicit examples (docs/authoring.md section 6)."""

from hypothesis import example, given

from pytest_tpucourse import checks, references, tpu
from pytest_tpucourse import strategies as tst

{_REFERENCE}
CASES = ((64, 256, (8, 128)), (200, 300, (64, 128)))  # (m, n, block_shape); the second is ragged


@given(case=tst.few(*CASES), seed=tst.seeds())
@example(case=CASES[0], seed=0)
def test_{name}_matches_reference(impl, case, seed):
    m, n, block_shape = case
    x = tst.random_array((m, n), "float32", seed)
    checks.assert_matches_reference(impl.{name}.{name}, (x,), kwargs=dict(block_shape=block_shape),
                                    reference=DOUBLE)


def test_{name}_lowers_for_tpu(impl):
    x = tst.random_array((512, 1024), "bfloat16", 0)
    tpu.assert_lowers_for_tpu(impl.{name}.{name}, x)


def _trusted_cases(rng):
    """What `tpucourse grade` checks outside the graded tree's process: the cases' shapes, on values
    drawn from the grader's secret seed (docs/grading.md, "The trusted check")."""
    return [checks.trusted.values("{name}", (tst.random_array((m, n), "float32", checks.trusted.seed(rng)),),
                                  kwargs=dict(block_shape=block_shape), reference=DOUBLE)
            for m, n, block_shape in CASES]


TRUSTED = checks.trusted.Cases(_trusted_cases)
'''


def mutants(chapter: NewChapter) -> str:
    entries = "".join(f'''
[[mutants]]
name = "{mutant_name(name)}"
module = "{name}"
why = "writes x unchanged: the scaffold's placeholder mistake, which the values check catches"
caught_by = ["test_{name}.py"]
edits = [
    {{ find = {quoted(PLACEHOLDER_LINE)}, replace = {quoted(PLACEHOLDER_LINE.removesuffix(" * 2"))} }},
]
''' for name in chapter.exercises)
    return f'''# Deliberately wrong kernels for chapter {chapter.number} (mutants of the shipped solutions), and
# correct variants (`[[equivalents]]`, same format, no caught_by) the whole chapter must pass
# (docs/authoring.md section 7). Every `find` occurs exactly once in its solution module; a
# mutant fails exactly the graded test files in `caught_by`. Ship one for every mistake the
# README's table names.
{entries}'''


def readme(chapter: NewChapter) -> str:
    exercises = "\n".join(f'''### {i}. `{name}`: `{name}(x, *, block_shape=(256, 512))`

TODO(author): the signature, the contract (shapes, dtypes, what may be assumed, what must be
raised) and what the graded tests check. The scaffold's placeholder: 2·x, block by block.
''' for i, name in enumerate(chapter.exercises, 1))
    mistakes = "\n".join(f"| writes x unchanged (`{mutant_name(name)}`) | TODO(author): the message a run of "
                         f"the mutant prints |" for name in chapter.exercises)
    where = (f"Stage {chapter.stage} of the course, closed by gate {chapter.gate:02d}.\n"
             if chapter.gate is not None else "")
    gate = f'''
## Gate {chapter.gate:02d}

TODO(author): the criteria in the course's words (the gate table, pytest_tpucourse/gates/criteria.py);
gates pass only on real hardware. `pytest --gates --chip={DEFAULT_CHIP} exercises/{chapter.id}` runs
`exercises/{chapter.id}/test_gate{chapter.gate:02d}.py`; on a CPU its correctness criterion writes an
off-chip-verified row and nothing is timed.
''' if chapter.gate is not None else ""
    return f'''# Chapter {chapter.number} · {chapter.title}

## What this chapter is

{where}TODO(author): one paragraph: what the learner can do after this chapter, and why it matters
for making TPU kernels fast.

## The ideas

TODO(author): the teaching, concrete, with small generic code fragments, never the solution.
Every number comes from a command, the findings, or arithmetic shown on the page.

## How your kernels run here

Off a TPU the plugin runs each `pl.pallas_call` under JAX's TPU interpret mode, which keeps
the TPU's memory model; on a TPU they run natively. TODO(author): what this chapter's checks add.

## The exercises

{exercises}
## Running the tests

```bash
pytest exercises/{chapter.id}                # your work
pytest exercises/{chapter.id} --solutions    # the course's own solutions
```

## Common mistakes and what the grader says

| mistake | what the grader says |
|---|---|
{mistakes}

Each row is a mutant in `tests/mutants/{chapter.id}.toml`, caught by the tests it names.
{gate}
## Further reading

TODO(author): the sources, each with what to read it for.
'''


def gate_entry(chapter: NewChapter) -> str:
    """The chapter's gate in the gate table (`GATES` in pytest_tpucourse/gates/criteria.py)."""
    kernels = "".join(f'"{name}.{name}", ' for name in chapter.exercises).rstrip(" ")
    op = "+".join(chapter.exercises)
    return f'''    Gate({chapter.gate}, "{chapter.id}", {quoted(chapter.title)}, (
        # TODO(author): the gate's criteria (speed ones with their ratio and slots); the correctness
        # criterion's slot is the size test_gate{chapter.gate:02d}.py checks the kernels at.
        _correct(Slot.of("{op}", ({GATE_SHAPE},), BF16)),
    ), words="project", kernels=({kernels}), times_own_kernel=True),
'''


def gate_test(chapter: NewChapter) -> str:
    kernels = ", ".join(f"impl.{name}.{name}" for name in chapter.exercises)
    return f'''"""Gate {chapter.gate:02d}, {chapter.title}. Run: pytest --gates --chip={DEFAULT_CHIP} exercises/{chapter.id}

- correct: the chapter's differential checks at the gate's size, on the kernels the gate table
  names (pytest_tpucourse/gates/criteria.py). Under interpret mode (any CPU) this writes an
  off-chip-verified row; natively on a TPU, a measured one. It judges your own kernels
  (pytest_tpucourse/gates/own_work.py): Pallas kernels written in your tree doing the op.
TODO(author): the gate's speed criteria, each timed here with gate_run.measure_trio against the
XLA floor and the best public kernel (docs/gates.md, "How a gate test measures").
"""

import pytest

from pytest_tpucourse import checks, gating, references
from pytest_tpucourse import strategies as tst

GATE = gating.gate({chapter.gate})
{_REFERENCE}


@pytest.mark.gate({chapter.gate})
def test_kernels_are_correct(gate_run, impl):
    [slot] = GATE.criterion("correct").slots
    [x] = (tst.random_array(shape, slot.dtype, seed) for seed, shape in enumerate(slot.shapes))
    kernels = [{kernels}]

    def check():
        for kernel in kernels:
            checks.assert_matches_reference(kernel, (x,), reference=DOUBLE)

    work = [gating.own_kernel(kernel, (x,), flops=0.0) for kernel in kernels]
    gate_run.verify("correct", slot.op, slot.shapes, slot.dtype, check, work=work)
'''


def gates_doc_section(chapter: NewChapter) -> str:
    """docs/gates.md's section for the gate: its criteria as the table states them."""
    return f'''### Gate {chapter.gate:02d}, {chapter.title} ({chapter.id})

| criterion id | in the project's words | kind | judged by |
|---|---|---|---|
| correct | Correct under the differential suite | correctness | the shared checker |

Test: `exercises/{chapter.id}/test_gate{chapter.gate:02d}.py`. TODO(author): what each criterion runs, at
which sizes, against which floor and ceiling.

'''


def facts_section(chapter: NewChapter) -> str:
    """docs/facts.md's section for the chapter: its claims about the toolchain, none yet."""
    return f'''
## {chapter.id} · {chapter.title}

| README | claim | test | versions |
|---|---|---|---|
'''


def course_table_row(chapter: NewChapter) -> str:
    """README.md's row for the chapter in "The course"."""
    kind = f"stage {chapter.stage}, gate {chapter.gate:02d}" if chapter.gate is not None else "layer"
    count = len(chapter.exercises)
    return f"| {chapter.id} | {chapter.title} | {kind} | graded: {count} exercise{'s' if count > 1 else ''} |\n"
