"""An honest learner is never refused as "uses the shipped solution" (docs/earned.md).

tests/honest/chNN/<variant>/ holds kernels written from chapter NN's README and stub
docstrings the way a learner writes them: helpers named as the README names them (`acc_ref`,
`_init`, `_flush`, a softmax of `x`), so that much of their code compiles to exactly what the
shipped solutions compile to. Each variant set is placed, all its files at once, into a copy
of the course's exercises/chNN/ (beside the course's own solutions/), and the graded test
files of the chapter's kernel exercises run as a learner's run does (`pytest
exercises/chNN/test_<exercise>.py ...`, no --impl-root): every test must pass, and no
"shipped solution" verdict may appear. One run per chapter and variant set, on the warm
worker that grades the chapters (tests/chapter_runs.py).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from pytest_tpucourse.core.course import load_course

from .chapter_runs import ChapterJob, wait_for
from .support import REPO

CORPUS = Path(__file__).with_name("honest")

# Each chapter's kernel exercises: those whose README exercise has the learner write Pallas
# kernels (ch13's causal_skipping and gqa put their arithmetic into the forward's and the
# backward's kernels, and their tests grade those kernels). Other files of a variant set are
# the learner's work those kernels need (ch15: band.py, manifest.py and capstone.toml).
KERNEL_EXERCISES = {
    "ch06": ("index_maps", "reduction", "double_buffering"),
    "ch11": ("elementwise_add", "matmul", "fused_matmul", "softmax", "layernorm"),
    "ch13": ("forward", "causal_skipping", "backward", "gqa"),
    "ch14": ("permute", "all_gather", "reduce_scatter", "collective_matmul"),
    "ch15": ("forward", "backward"),
}
VARIANTS = sorted(path for path in CORPUS.glob("ch*/*") if path.is_dir())


def _variant_id(variant: Path) -> str:
    return f"{variant.parent.name}-{variant.name}"


def test_every_kernel_exercise_has_two_honest_variants():
    course = load_course(REPO)
    for chapter, exercises in KERNEL_EXERCISES.items():
        for exercise in exercises:
            assert course.exercise(f"{chapter}.{exercise}") is not None, f"{chapter}.{exercise} is no exercise"
            written = [v.name for v in VARIANTS if v.parent.name == chapter and (v / f"{exercise}.py").is_file()]
            assert len(written) >= 2, f"{chapter}.{exercise}: honest variants {written}, at least two wanted"


@pytest.fixture
def corpus_run(request, chapter_runner):
    """The result of this test's run of its variant set (its job_of), as pytester's RunResult."""
    return wait_for(chapter_runner, request.node,
                    lambda item: job_of(item, chapter_runner.fresh_path("course")))


def job_of(item, workdir: Path) -> ChapterJob | None:
    """A learner's run of the variant's chapter, in a copy of the course holding the variant."""
    if item.originalname != "test_honest_kernels_pass_as_a_learners_run":
        return None
    variant = item.callspec.params["variant"]
    chapter = variant.parent.name
    course = learners_course(variant, workdir)
    files = tuple(f"test_{exercise}.py" for exercise in KERNEL_EXERCISES[chapter])
    # The compilation cache the checkout's own chapter runs use: a warm learner's.
    return ChapterJob(chapter, ("--jax-cache", str(REPO / ".tpucourse" / "jax-cache")), files=files,
                      course=course)


def learners_course(variant: Path, root: Path) -> Path:
    """A copy of the course (course.toml, its pytest settings, exercises/ and solutions/) whose
    exercises/chNN/ holds every file of the variant set as the learner's own."""
    root.mkdir(parents=True)
    for name in ("course.toml", "pyproject.toml", "conftest.py"):
        shutil.copy2(REPO / name, root / name)
    for tree in ("exercises", "solutions"):
        shutil.copytree(REPO / tree, root / tree, ignore=shutil.ignore_patterns("__pycache__", ".tpucourse"))
    for path in variant.iterdir():
        if path.is_file():
            shutil.copy2(path, root / "exercises" / variant.parent.name / path.name)
    return root


@pytest.mark.chapters
@pytest.mark.parametrize("variant", VARIANTS, ids=_variant_id)
def test_honest_kernels_pass_as_a_learners_run(corpus_run, variant):
    out = corpus_run.stdout.str()
    assert "shipped solution" not in out, out
    assert corpus_run.ret == pytest.ExitCode.OK, out
    assert "graded: exercises/ (your work)" in out
    for exercise in KERNEL_EXERCISES[variant.parent.name]:
        assert re.search(rf"^\s*done\s+{exercise}\s", out, re.MULTILINE), f"{exercise} is not done:\n{out}"
